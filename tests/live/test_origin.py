"""The WebSocket's full origin check (issue 12, item 4): scheme, host and port must be the site's
own (as the request sees it, proxies included, as Django's CSRF check) or one of
``CSRF_TRUSTED_ORIGINS``. Through the real ASGI application with channels' communicator."""

from __future__ import annotations

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb.live.origin import parse_origin, trusted
from mrtrweb.site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True)]

HOST = b"127.0.0.1:8000"


async def _cookie(user) -> bytes:
    client = AsyncClient()
    await client.aforce_login(user)
    return "; ".join(f"{k}={v.value}" for k, v in client.cookies.items()).encode()


async def _connect(cookie: bytes, *origins: bytes, host: bytes = HOST, scheme: str = "ws",
                   extra: list[tuple[bytes, bytes]] | None = None) -> bool:
    headers = [(b"host", host), (b"cookie", cookie), *[(b"origin", o) for o in origins], *(extra or [])]
    ws = WebsocketCommunicator(application, "/ws/mrtrweb/", headers=headers)
    ws.scope["scheme"] = scheme
    connected, _ = await ws.connect()
    await ws.disconnect()
    return connected


async def test_own_origin_is_accepted(seeded):
    cookie = await _cookie(seeded["users"]["alice"])
    assert await _connect(cookie, b"http://127.0.0.1:8000")


@pytest.mark.parametrize("origin", [
    b"http://127.0.0.1:8001",   # another port of the same host (the reproduced attack)
    b"http://127.0.0.1",        # the default port is another port
    b"https://127.0.0.1:8000",  # another scheme
    b"http://localhost:8000",   # another host (even an allowed one)
    b"https://evil.example",
    b"null",                    # sandboxed frames, file: pages
    b"http://127.0.0.1:8000/path",
    b"http://user@127.0.0.1:8000",
    b"http://127.0.0.1:notaport",
    b"",
])
async def test_any_other_origin_is_refused(seeded, origin, caplog):
    cookie = await _cookie(seeded["users"]["alice"])
    with caplog.at_level("WARNING", logger="mrtrweb.origin"):
        assert not await _connect(cookie, origin)
    assert "websocket /ws/mrtrweb/ refused" in caplog.text


async def test_missing_or_repeated_origin_is_refused(seeded):
    cookie = await _cookie(seeded["users"]["alice"])
    assert not await _connect(cookie)
    assert not await _connect(cookie, b"http://127.0.0.1:8000", b"http://127.0.0.1:8000")


async def test_a_host_outside_allowed_hosts_is_refused(seeded):
    """DNS rebinding: the page's origin and Host agree, but the host is not this site's."""
    cookie = await _cookie(seeded["users"]["alice"])
    assert not await _connect(cookie, b"http://rebind.example:8000", host=b"rebind.example:8000")


async def test_ipv6_host(seeded, settings):
    settings.ALLOWED_HOSTS = ["[::1]"]
    cookie = await _cookie(seeded["users"]["alice"])
    assert await _connect(cookie, b"http://[::1]:8000", host=b"[::1]:8000")
    assert not await _connect(cookie, b"http://[::1]:8001", host=b"[::1]:8000")


async def test_wss_makes_the_own_origin_https(seeded):
    cookie = await _cookie(seeded["users"]["alice"])
    assert await _connect(cookie, b"https://127.0.0.1:8000", scheme="wss")
    assert not await _connect(cookie, b"http://127.0.0.1:8000", scheme="wss")


async def test_behind_a_tls_proxy_as_django_sees_it(seeded, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    cookie = await _cookie(seeded["users"]["alice"])
    proto = [(b"x-forwarded-proto", b"https")]
    assert await _connect(cookie, b"https://127.0.0.1:8000", extra=proto)
    assert not await _connect(cookie, b"http://127.0.0.1:8000", extra=proto)
    # the header present and saying http wins over the connection's own scheme, as in is_secure()
    assert not await _connect(cookie, b"https://127.0.0.1:8000", scheme="wss",
                              extra=[(b"x-forwarded-proto", b"http")])
    # X-Forwarded-Host is honoured only with USE_X_FORWARDED_HOST
    fwd = [*proto, (b"x-forwarded-host", b"127.0.0.1")]
    assert not await _connect(cookie, b"https://127.0.0.1", extra=fwd)
    settings.USE_X_FORWARDED_HOST = True
    assert await _connect(cookie, b"https://127.0.0.1", extra=fwd)


async def test_trusted_origins(seeded, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example", "https://*.apps.example"]
    cookie = await _cookie(seeded["users"]["alice"])
    assert await _connect(cookie, b"https://portal.example")
    assert await _connect(cookie, b"https://team.apps.example")
    assert not await _connect(cookie, b"http://portal.example")        # scheme
    assert not await _connect(cookie, b"https://portal.example:8443")  # port
    assert not await _connect(cookie, b"https://portal.example.evil")  # host
    assert not await _connect(cookie, b"https://team.apps.example:444")
    assert not await _connect(cookie, b"https://evilapps.example")


def test_parse_and_match():
    assert parse_origin("HTTPS://Portal.Example") == ("https", "portal.example", 443)
    assert parse_origin("http://[::1]:8000") == ("http", "::1", 8000)
    assert parse_origin("ftp://x.example") is None and parse_origin("https://") is None
    assert trusted(("https", "a.b.example", 443), ["https://*.b.example"])
    assert trusted(("https", "a.b.example", 8443), ["https://*.b.example:8443"])
    assert not trusted(("https", "a.b.example", 8443), ["https://*.b.example"])
    assert not trusted(("http", "a.b.example", 80), ["https://*.b.example"])


def test_the_embedding_snippet_uses_it():
    """The embedding recipe's asgi.py (docs/embedding.md; tests/embedding/test_embed_docs.py runs it: the one
    import mrtrweb.asgi, whose application mounts it) and the test portal's asgi.py (the earlier
    imports) mount the full-origin check, not channels' host-only validator; the security page
    (docs/security.md, once the README's) names it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc, security = (root / "docs" / "embedding.md").read_text(), (root / "docs" / "security.md").read_text()
    assert "from mrtrweb.asgi import get_asgi_application, mrtrweb_application" in doc
    assert "application = mrtrweb_application(django_asgi_app)" in doc
    face = (root / "mrtrweb" / "asgi.py").read_text()
    assert "SameOriginValidator(AuthMiddlewareStack(URLRouter([*ours, *websocket_urlpatterns])))" in face
    assert "mrtrweb.live.origin.SameOriginValidator" in security
    assert "AllowedHostsOriginValidator(" not in doc + security
    source = (Path(__file__).resolve().parents[1] / "embed_project" / "asgi.py").read_text()
    assert "SameOriginValidator(AuthMiddlewareStack(" in source


def test_an_origin_is_exactly_what_browsers_send():
    """The ``Origin`` header is ``scheme://host[:port]`` as browsers serialize it, nothing more."""
    from mrtrweb.live.origin import parse_header_origin

    assert parse_header_origin("http://127.0.0.1:8000") == ("http", "127.0.0.1", 8000)
    assert parse_header_origin("https://portal.example") == ("https", "portal.example", 443)
    assert parse_header_origin("http://[::1]:8000") == ("http", "::1", 8000)
    assert parse_header_origin("https://xn--mgbh0fb.xn--kgbechtv") == ("https", "xn--mgbh0fb.xn--kgbechtv", 443)
    for text in ["http://127.0.0.1:8000 ", " http://127.0.0.1:8000", "http://127.0.0.1:8000\t",
                 "http://127.0.0.1:8000\n", "http://127.0.0.1:8000?", "http://127.0.0.1:8000#",
                 "http://127.0.0.1:8000/", "http://127.0.0.1:08000", "http://127.0.0.1:", "http://127.0.0.1:0",
                 "http://127.0.0.1:65536", "http://127.0.0.1:+8000", "HTTP://127.0.0.1:8000",
                 "http://Portal.example", "https://portal.example:443", "http://portal.example:80",
                 "http://u@127.0.0.1:8000", "http://u:p@127.0.0.1:8000", "http://[0:0::1]:8000", "http://[::1",
                 "http://127.0.0.1:8000/?#", "http://exa mple", "http://ex\u0430mple.com", "null", ""]:
        assert parse_header_origin(text) is None, text
    # settings entries stay case-insensitive and may name the default port; nothing else loosens
    assert parse_origin("https://portal.example:443") == ("https", "portal.example", 443)
    for text in ["https://portal.example ", "https://portal.example?", "https://portal.example#",
                 "https://portal.example:0443", "https://portal.example/"]:
        assert parse_origin(text) is None, text


@pytest.mark.parametrize("origin", [b"http://127.0.0.1:8000 ", b"http://127.0.0.1:8000?", b"http://127.0.0.1:8000#",
                                    b"http://127.0.0.1:08000", b"http://127.0.0.1:8000/", b"HTTP://127.0.0.1:8000"])
async def test_a_lenient_spelling_of_the_own_origin_is_refused(seeded, origin, caplog):
    cookie = await _cookie(seeded["users"]["alice"])
    assert await _connect(cookie, b"http://127.0.0.1:8000")
    with caplog.at_level("WARNING", logger="mrtrweb.origin"):
        assert not await _connect(cookie, origin)
    assert "malformed Origin" in caplog.text
