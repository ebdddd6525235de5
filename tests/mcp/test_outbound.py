"""The outbound guard (``mrtrweb.mcp.outbound``) against real listeners on loopback.

Every URL the OAuth code fetches is chosen by the MCP server, i.e. by an attacker: these cases are
what such a server would try (private, link-local and metadata addresses, IPv6 and IPv4-mapped
spellings, other schemes, userinfo, a redirect to another host, an endless or slow body).
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, StreamingResponse
from starlette.routing import Route

from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.mcp import outbound
from mrtrweb.mcp.outbound import OutboundPolicy, OutboundRefused, check_url, guarded_client

LOOP = OutboundPolicy(allow_http_loopback=True, timeout_s=3.0, max_bytes=10_000)
STRICT = OutboundPolicy(timeout_s=3.0)


async def _hosted(request: Request) -> JSONResponse:
    return JSONResponse({"host": request.headers.get("host"), "path": request.url.path})


async def _redirect_away(request: Request) -> RedirectResponse:
    return RedirectResponse(f"http://localhost:{request.url.port}/hosted", status_code=302)


async def _huge(request: Request) -> StreamingResponse:
    async def body():
        for _ in range(100):
            yield b"x" * 1000
    return StreamingResponse(body(), media_type="application/json")


async def _slow(request: Request) -> StreamingResponse:
    async def body():
        for _ in range(20):
            yield b" "
            await asyncio.sleep(0.5)
    return StreamingResponse(body(), media_type="application/json")


@pytest.fixture(scope="module")
def site():
    app = Starlette(routes=[Route("/hosted", _hosted), Route("/away", _redirect_away), Route("/huge", _huge),
                            Route("/slow", _slow)])
    handle = serve_asgi_in_thread(app, path="")
    yield f"http://127.0.0.1:{handle.port}"
    handle.stop()


@pytest.mark.parametrize("url, why", [
    ("file:///etc/passwd", "scheme file:"),
    ("ftp://example.com/x", "scheme ftp:"),
    ("gopher://127.0.0.1:70/", "scheme gopher:"),
    ("javascript:alert(1)", "scheme javascript:"),
    ("https://user:pw@example.com/", "user information"),
    ("https://127.0.0.1@169.254.169.254/", "user information"),
    ("https://169.254.169.254/latest/meta-data/", "private"),
    ("https://10.0.0.5/", "private"),
    ("https://192.168.1.1/", "private"),
    ("https://172.16.0.1/", "private"),
    ("https://100.64.0.1/", "private"),       # shared address space (CGNAT)
    ("https://0.0.0.0/", "private"),
    ("https://[fd00::1]/", "private"),        # ULA
    ("https://[fe80::1]/", "private"),        # link-local
    ("https://[::ffff:10.0.0.1]/", "private"),   # IPv4-mapped
    ("https://[::ffff:169.254.169.254]/", "private"),
    ("https://[64:ff9b::a9fe:a9fe]/", "private"),  # NAT64 of the metadata address
    ("https://224.0.0.1/", "private"),
    ("http://93.184.216.34/", "plain http"),   # public, but not https
    ("https://no-such-host.invalid/", "does not resolve"),
    ("https://exa mple.com/", "spaces"),
])
async def test_refused_urls(url: str, why: str) -> None:
    with pytest.raises(OutboundRefused) as caught:
        await check_url(url, LOOP)
    assert why in caught.value.reason


async def test_loopback_only_with_the_setting(site: str) -> None:
    for url in (f"{site}/hosted", "https://127.0.0.1/", "https://localhost/", "https://[::1]/",
                "https://[::ffff:127.0.0.1]/"):
        with pytest.raises(OutboundRefused):
            await check_url(url, STRICT)
    await check_url(f"{site}/hosted", LOOP)
    await check_url("http://localhost:1/x", LOOP)  # localhost resolves to loopback only
    # http to loopback needs the setting even when the host is allow-listed
    with pytest.raises(OutboundRefused, match="plain http"):
        await check_url(f"{site}/hosted", OutboundPolicy(allow_hosts=frozenset({"127.0.0.1"})))
    await check_url("https://10.0.0.5/", OutboundPolicy(allow_hosts=frozenset({"10.0.0.5"})))


async def test_guarded_client_fetches_allowed_and_refuses_the_rest(site: str) -> None:
    async with guarded_client(LOOP) as client:
        response = await client.get(f"{site}/hosted")
        assert response.json()["path"] == "/hosted"
        with pytest.raises(OutboundRefused):
            await client.get("https://169.254.169.254/latest/meta-data/")
    async with guarded_client(STRICT) as client:
        with pytest.raises(OutboundRefused):
            await client.get(f"{site}/hosted")


async def test_redirect_is_not_followed_and_a_followed_one_is_checked(site: str) -> None:
    async with guarded_client(LOOP) as client:
        response = await client.get(f"{site}/away")
        assert response.status_code == 302  # handed back, not followed
    # followed on request: the next hop is a new request, checked again (localhost: still loopback)
    async with guarded_client(LOOP, follow_redirects=True) as client:
        assert (await client.get(f"{site}/away")).json()["path"] == "/hosted"
    strict_after_first = OutboundPolicy(allow_hosts=frozenset({"127.0.0.1"}), allow_http_loopback=False)
    async with guarded_client(strict_after_first, follow_redirects=True) as client:
        with pytest.raises(OutboundRefused):
            await client.get(f"{site}/away")


async def test_body_bound_and_time_bound(site: str) -> None:
    async with guarded_client(LOOP) as client:
        with pytest.raises(OutboundRefused, match="larger than 10000 bytes"):
            await client.get(f"{site}/huge")
    started = time.monotonic()
    quick = OutboundPolicy(allow_http_loopback=True, timeout_s=1.5)
    async with guarded_client(quick) as client:
        with pytest.raises(OutboundRefused, match="too long|in time"):
            await client.get(f"{site}/slow")
    assert time.monotonic() - started < 4


async def test_connect_timeout_on_a_silent_listener() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)  # accepts at the kernel level, never answers
    port = sock.getsockname()[1]
    try:
        started = time.monotonic()
        async with guarded_client(OutboundPolicy(allow_http_loopback=True, timeout_s=1.0)) as client:
            with pytest.raises(OutboundRefused):
                await client.get(f"http://127.0.0.1:{port}/")
        assert time.monotonic() - started < 3
    finally:
        sock.close()


async def test_the_checked_address_is_the_one_connected(site: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS pinning: the name resolves once, to the address that is checked and connected to; the
    request keeps its Host header. (The resolver is replaced: this sandbox has no DNS of its own.)"""
    port = int(site.rsplit(":", 1)[1])
    answers = iter([[(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))],
                    [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port))]])
    calls = []

    async def resolver(host, port_, **kw):
        calls.append(host)
        return next(answers)

    monkeypatch.setattr(outbound.anyio, "getaddrinfo", resolver)
    policy = OutboundPolicy(allow_http_loopback=True, timeout_s=3.0)
    async with guarded_client(policy) as client:
        response = await client.get(f"http://rebind.example:{port}/hosted")
    assert response.json() == {"host": f"rebind.example:{port}", "path": "/hosted"}
    assert calls == ["rebind.example"]  # one resolution: the second (private) answer is never used
    async with guarded_client(policy) as client:
        with pytest.raises(OutboundRefused, match="plain http|private"):
            await client.get(f"http://rebind.example:{port}/hosted")


async def test_requests_to_the_mcp_origin_pass(site: str) -> None:
    port = site.rsplit(":", 1)[1]
    async with guarded_client(STRICT, mcp_origin=f"http://127.0.0.1:{port}") as client:
        assert (await client.get(f"{site}/hosted")).status_code == 200
        with pytest.raises(OutboundRefused):
            await client.get(f"http://localhost:{port}/hosted")  # another origin: guarded


def test_guard_module_has_no_django() -> None:
    import subprocess
    import sys
    code = "import sys, mrtrweb.mcp.outbound, mrtrweb.mcp.auth; print(any(m.startswith('django') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


