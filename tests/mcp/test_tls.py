"""MCP over HTTPS: every connection shares one verifying TLS client context.

A real ``MCPServer`` (the demo's) is served by uvicorn over TLS on loopback with a certificate made
for the test. The product's :class:`McpConnection` refuses it while the certificate is not trusted
(verification is on), and talks to it once ``SSL_CERT_FILE`` names the certificate, as httpx2 honours
that variable. Many connections build the context once: building it per connection loaded the CA
bundle each time (~25 ms, ~0.8 MiB per user and server, see docs/benchmarks).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import uvicorn

from mrtrweb.mcp import tls
from mrtrweb.demo.server import MCP_PATH, build_demo_app
from mrtrweb.mcp import McpCallError, McpConnection, tls_client_context
from tests.certs import self_signed


@pytest.fixture
def tls_demo(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cert, key = self_signed(tmp_path)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_demo_app(), log_level="warning", lifespan="on", loop="asyncio",
                            ssl_certfile=str(cert), ssl_keyfile=str(key), access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    for _ in range(300):
        if server.started:
            break
        threading.Event().wait(0.05)
    assert server.started, "TLS demo server did not start"
    yield f"https://localhost:{port}{MCP_PATH}", cert
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture
def fresh_context(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Forget the process's cached context; count how often one is built while the test runs."""
    built: list[int] = []
    real = httpx2.create_ssl_context

    def counting(*args, **kwargs) -> ssl.SSLContext:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(tls.httpx2, "create_ssl_context", counting)
    tls_client_context.cache_clear()
    yield built
    tls_client_context.cache_clear()


def test_the_shared_context_verifies() -> None:
    context = tls_client_context()
    assert context is tls_client_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True


async def test_an_untrusted_certificate_is_refused(tls_demo, fresh_context, monkeypatch) -> None:
    url, _cert = tls_demo
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    connection = McpConnection(url, timeout_s=10)
    with pytest.raises(McpCallError) as err:
        await connection.open()
    assert err.value.code == "transport_error"
    assert "CERTIFICATE_VERIFY_FAILED" in (connection._failure or "")
    assert not connection.is_open


async def test_a_trusted_certificate_works_and_the_context_is_built_once(tls_demo, fresh_context,
                                                                           monkeypatch) -> None:
    url, cert = tls_demo
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    connections = [McpConnection(url, timeout_s=10) for _ in range(5)]
    await asyncio.gather(*(c.open() for c in connections))
    try:
        listings = await asyncio.gather(*(c.list_tools() for c in connections))
        assert all(any(t["name"] == "deploy" for t in tools) for tools in listings)
        assert len(fresh_context) == 1  # five connections (five users), one context
    finally:
        await asyncio.gather(*(c.close() for c in connections))
