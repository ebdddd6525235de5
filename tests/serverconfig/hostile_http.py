"""Hostile HTTP "servers" for the "Test" of a server (issue 29, item 7), on loopback: a web page
instead of an MCP endpoint, a redirect loop, a 50 MB body, a socket that accepts and never
answers; and a protected endpoint naming its authorization server in its resource metadata.

:class:`Counted` counts every HTTP request that reached the app (to show that nothing did).
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from mrtrweb.demo.server import serve_asgi_in_thread

#: what /prm/mcp's resource metadata names
AUTH_SERVER = "https://auth.example.com"
HUGE_BYTES = 50 * 1024 * 1024


class Counted:
    """ASGI middleware: ``requests`` counts every HTTP request that reached ``app``; ``hosts``
    the ``Host`` header of each."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests = 0
        self.hosts: list[str] = []
        self._lock = threading.Lock()

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") == "http":
            with self._lock:
                self.requests += 1
                self.hosts.append(dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1"))
        await self.app(scope, receive, send)


async def _html(request: Request) -> HTMLResponse:
    return HTMLResponse("<!doctype html><html><body><h1>Welcome to our wiki</h1></body></html>")


async def _loop(request: Request) -> RedirectResponse:
    return RedirectResponse(str(request.url), status_code=302)


async def _huge(request: Request) -> StreamingResponse:
    async def body():
        chunk = b" " * (1024 * 1024)
        yield b'{"jsonrpc": "2.0", "id": 1, "result": {"padding": "'
        for _ in range(HUGE_BYTES // len(chunk)):
            yield chunk
        yield b'"}}'
    return StreamingResponse(body(), media_type="application/json")


async def _protected(request: Request) -> Response:
    meta = f"http://{request.url.netloc}/.well-known/oauth-protected-resource/prm/mcp"
    return Response(status_code=401, headers={
        "WWW-Authenticate": f'Bearer resource_metadata="{meta}", scope="files:read\xad"'})


async def _prm(request: Request) -> JSONResponse:
    return JSONResponse({"resource": f"http://{request.url.netloc}/prm/mcp",
                         "authorization_servers": [AUTH_SERVER, "javascript:alert(1)\u200b",
                                                   "https://evil.example/<img src=x onerror=alert(1)>"]})


def serve_hostile():
    """``(handle, counted)``: the app on 127.0.0.1; ``handle.port``; paths ``/html``, ``/loop``,
    ``/huge``, ``/prm/mcp`` (401 naming :data:`AUTH_SERVER`)."""
    counted = Counted(Starlette(routes=[
        Route("/html", _html, methods=["GET", "POST", "DELETE"]),
        Route("/loop", _loop, methods=["GET", "POST", "DELETE"]),
        Route("/huge", _huge, methods=["GET", "POST", "DELETE"]),
        Route("/prm/mcp", _protected, methods=["GET", "POST", "DELETE"]),
        Route("/.well-known/oauth-protected-resource/prm/mcp", _prm)]))
    return serve_asgi_in_thread(counted, path=""), counted


class Silent:
    """A TCP listener on 127.0.0.1 that accepts connections and never answers (``port``);
    :meth:`stop` closes it and every accepted socket."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="silent-listener")
        self._thread.start()

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(conn)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        for conn in self.accepted:
            conn.close()
        self._sock.close()
