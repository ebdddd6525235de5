"""Why a server could not be reached (issue 28, item 6), against real listeners on loopback:
:class:`~mrtrweb.mcp.McpConnection` fails with ``transport_error`` and a ``reason`` a person can act
on (:mod:`mrtrweb.mcp.reachability`), and the server page says it in words with **Try again**,
never "This server lists no tools"."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from mrtrweb.mcp import McpCallError, McpConnection
from mrtrweb.mcp.reachability import reason_of
from mrtrweb.bench.machine import free_port as bench_free_port


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 404
    content_type = "text/plain"

    def _answer(self) -> None:
        body = b"<html><body>a web page</body></html>" if self.content_type == "text/html" else b"not found"
        self.send_response(self.status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


def _serve(status: int, content_type: str):
    handler = type("H", (_Answer,), {"status": status, "content_type": content_type})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _free_port() -> int:
    return bench_free_port()  # a port of this test process's own range (mrtrweb.bench.machine.free_port)


async def _reason(url: str, timeout_s: float = 5.0) -> tuple[str | None, int | None]:
    conn = McpConnection(url, timeout_s=timeout_s)
    with pytest.raises(McpCallError) as caught:
        await conn.open()
    await conn.close()
    assert caught.value.code in ("transport_error", "timeout")
    assert (caught.value.code == "timeout") == (caught.value.reason == "timeout")
    return caught.value.reason, caught.value.http_status


async def test_nothing_listening_is_refused():
    assert await _reason(f"http://127.0.0.1:{_free_port()}/mcp") == ("refused", None)


async def test_a_name_that_does_not_resolve():
    assert await _reason("http://no-such-host.invalid/mcp") == ("dns", None)


@pytest.mark.parametrize("status", [404, 500, 502])
async def test_an_http_error_at_the_path_says_its_status(status):
    server = _serve(status, "text/plain")
    try:
        assert await _reason(f"http://127.0.0.1:{server.server_port}/wrong-path") == ("http_status", status)
    finally:
        server.shutdown()


async def test_a_web_page_is_not_an_mcp_endpoint():
    server = _serve(200, "text/html")
    try:
        assert await _reason(f"http://127.0.0.1:{server.server_port}/") == ("not_mcp", None)
    finally:
        server.shutdown()


async def test_tls_to_a_plain_listener_fails_as_tls():
    server = _serve(404, "text/plain")
    try:
        reason, _ = await _reason(f"https://127.0.0.1:{server.server_port}/mcp")
        assert reason == "tls"
    finally:
        server.shutdown()


async def test_a_listener_that_never_answers_times_out():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel does) and never answers
    try:
        assert await _reason(f"http://127.0.0.1:{silent.getsockname()[1]}/mcp", timeout_s=1.5) == ("timeout", None)
    finally:
        silent.close()


def test_reason_of_reads_the_exception_chain():
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as inner:
            raise OSError("All connection attempts failed") from inner
    except OSError as outer:
        assert reason_of(outer) == ("refused", None)
    assert reason_of(RuntimeError("something else")) == ("unreachable", None)
    assert reason_of(RuntimeError("something else"), last_status=503) == ("http_status", 503)


async def test_the_server_page_says_why_and_offers_try_again(seeded):
    from django.test import AsyncClient

    from mrtrweb.models import McpServer

    alice = AsyncClient()
    await alice.aforce_login(seeded["users"]["alice"])
    tenant_id = seeded["servers"]["acme"].tenant_id
    refused = await McpServer.objects.acreate(tenant_id=tenant_id, name="Gone", url=f"http://127.0.0.1:{_free_port()}/mcp")
    web = _serve(404, "text/plain")
    try:
        wrong_path = await McpServer.objects.acreate(tenant_id=tenant_id, name="Wrong path",
                                                     url=f"http://127.0.0.1:{web.server_port}/nothing-here")
        for server, reason, words in ((refused, "refused", "Connection refused: nothing listens at"),
                                      (wrong_path, "http_status", "The server answered HTTP 404 at this URL.")):
            resp = await alice.get(f"/mcp/servers/{server.pk}/")
            assert resp.status_code == 200
            page = resp.content.decode()
            assert f'data-reason="{reason}"' in page and words in page
            assert f'href="/mcp/servers/{server.pk}/">Try again</a>' in page
            assert "This server lists no tools." not in page
        assert "is the URL's path right (often /mcp)?" in page
    finally:
        web.shutdown()
    # a server that lists no tools says so, and no reason
    page = (await alice.get(f"/mcp/servers/{seeded['servers']['acme'].pk}/")).content.decode()
    assert "data-reason" not in page and "Try again" not in page
