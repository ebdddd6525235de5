"""Fixtures of the TLS tests of several folders (a plugin listed in ``tests/conftest.py``): the demo
MCP server over HTTPS on loopback with a certificate made for the test (``tls_demo``: its URL and
certificate), and the process's TLS client context forgotten and its builds counted (``fresh_context``)."""

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

from mrtrweb.demo.server import MCP_PATH, build_demo_app
from mrtrweb.mcp import tls, tls_client_context
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
