"""Live-server helpers for the real-browser tests (``tests/browser.py``, ``tests/views/test_browser.py``...).

* :class:`LiveAsgiServer` -- the whole ASGI app (HTTP + Channels WebSockets) under uvicorn on
  127.0.0.1 in a daemon thread with its own event loop. pytest-django's ``live_server`` is WSGI
  only; this one serves WebSockets. It runs in the test process, so it shares the in-memory channel
  layer, the locmem cache and the (file) SQLite test database with the test.
* :class:`Valve` -- ASGI middleware in front of a demo MCP server that holds chosen ``tools/call``
  requests until the test opens it, so a test can put the browser on the operation page *before*
  the round arrives and see it come in through the WebSocket (not as part of the page load).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

from mrtrweb.demo.server import replaying

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class LiveAsgiServer:
    """``mrtrweb.site.asgi:application`` under uvicorn on 127.0.0.1 (free port), in a thread."""

    def __init__(self, app: str = "mrtrweb.site.asgi:application") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        # The WebSocket is behind SameOriginValidator: pages of exactly this origin (this port) may open it.
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, ws="websockets-sansio", lifespan="off", loop="asyncio",
                                log_level="warning", access_log=False, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=f"mrtrweb-live-{self.port}", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._sock]))
        except BaseException as exc:  # reported to the starting thread
            self._errors.append(exc)
        finally:
            self._sock.close()

    def start(self, timeout_s: float = 15.0) -> LiveAsgiServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                raise RuntimeError(f"live server did not start: {self._errors[0] if self._errors else 'timeout'}")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)


class Hold:
    """One held ``tools/call``: ``arrived`` is set when the request reached the valve (and waits);
    :meth:`release` lets it through to the server."""

    def __init__(self, tool: str, retry: bool) -> None:
        self.tool = tool
        self.retry = retry
        self.arrived = threading.Event()
        self._open = threading.Event()

    def release(self) -> None:
        self._open.set()

    def wait_arrived(self, timeout_s: float = 10.0) -> None:
        if not self.arrived.wait(timeout_s):
            raise AssertionError(f"no tools/call {self.tool} (retry={self.retry}) reached the MCP server")


class Valve:
    """ASGI middleware: a ``tools/call`` of a held tool waits until its :class:`Hold` is released.

    Each hold catches the first matching request only. Everything else passes unchanged.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._holds: list[Hold] = []

    def hold(self, tool: str, *, retry: bool = False) -> Hold:
        """Hold the next ``tools/call`` of ``tool`` (a retry, or a first call)."""
        h = Hold(tool, retry)
        with self._lock:
            self._holds.append(h)
        return h

    def release_all(self) -> None:
        with self._lock:
            holds, self._holds = self._holds, []
        for h in holds:
            h.release()

    def _match(self, body: bytes) -> Hold | None:
        try:
            msg = json.loads(body)
        except ValueError:
            return None
        if not isinstance(msg, dict) or msg.get("method") != "tools/call" or not isinstance(msg.get("params"), dict):
            return None
        params = msg["params"]
        retry = "inputResponses" in params or "requestState" in params
        with self._lock:
            for h in self._holds:
                if h.tool == params.get("name") and h.retry == retry:
                    self._holds.remove(h)
                    return h
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        held = self._match(body)
        if held is not None:
            held.arrived.set()
            await asyncio.to_thread(held._open.wait, 30.0)
        await self.app(scope, replaying(body, receive), send)


def serve_valved_demo():
    """A second demo MCP server (the real ``build_demo_server``) behind a :class:`Valve`.

    Returns ``(handle, valve)``; ``handle.url``/``handle.log``/``handle.calls`` as for the
    ``demo_mcp`` fixture (the log records a request when it reaches the valve).
    """
    from mrtrweb.demo.server import build_demo_app, serve_asgi_in_thread

    valve = Valve(build_demo_app())
    return serve_asgi_in_thread(valve), valve
