"""MCP over HTTPS: every connection shares one verifying TLS client context.

A real ``MCPServer`` (the demo's) is served by uvicorn over TLS on loopback with a certificate made
for the test. The product's :class:`McpConnection` refuses it while the certificate is not trusted
(verification is on), and talks to it once ``SSL_CERT_FILE`` names the certificate, as httpx2 honours
that variable. Many connections build the context once: building it per connection loaded the CA
bundle each time (~25 ms, ~0.8 MiB per user and server, see docs/benchmarks).
"""

from __future__ import annotations

import asyncio
import ssl

import pytest

from mrtrweb.mcp import McpCallError, McpConnection, tls_client_context


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
