"""Serving a demo server: any ASGI app under uvicorn in a daemon thread, behind a
:class:`~.recording.CountingMiddleware` (:func:`serve_asgi_in_thread`, :func:`serve_built_in_thread`,
:func:`serve_in_thread` for the demo server itself), and the :class:`DemoServerHandle` they return
(``url``, ``log``, ``stop()``). Errors: :class:`RuntimeError` when the server does not start in
time, :class:`OSError` when the address cannot be bound.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time
from collections.abc import Callable

import uvicorn
from mcp.server.mcpserver import MCPServer

from .recording import ASGIApp, CallLog, CountingMiddleware
from .tools import build_demo_server

__all__ = ["MCP_PATH", "DemoServerHandle", "build_demo_app", "serve_asgi_in_thread", "serve_built_in_thread",
           "serve_in_thread"]

MCP_PATH = "/mcp"


def build_demo_app(server: MCPServer | None = None, *, host: str = "127.0.0.1") -> ASGIApp:
    """The demo server's Streamable HTTP ASGI app (endpoint :data:`MCP_PATH`)."""
    mcp = server or build_demo_server()
    return mcp.streamable_http_app(streamable_http_path=MCP_PATH, host=host)


class DemoServerHandle:
    """A server running under uvicorn in a daemon thread (see :func:`serve_in_thread`).

    Attributes:
        host, port: where it listens.
        url: the Streamable HTTP endpoint, e.g. ``http://127.0.0.1:PORT/mcp``.
        log: the :class:`CallLog` of received JSON-RPC requests.
    """

    def __init__(
        self, host: str, port: int, path: str, log: CallLog, server: uvicorn.Server, thread: threading.Thread
    ) -> None:
        self.host = host
        self.port = port
        self.log = log
        self._server = server
        self._thread = thread
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.url = f"http://{netloc}{path}"

    @property
    def calls(self) -> collections.Counter[tuple[str | None, bool]]:
        """``tools/call`` requests received so far, keyed by ``(tool name, carried inputResponses/requestState)``."""
        return self.log.counts()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask uvicorn to exit and wait (up to ``timeout_s`` seconds) for the thread to end."""
        self._server.should_exit = True
        self._thread.join(timeout_s)

    def __enter__(self) -> DemoServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_asgi_in_thread(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *, path: str = MCP_PATH, start_timeout_s: float = 15.0
) -> DemoServerHandle:
    """Serve any ASGI ``app`` (wrapped in a :class:`CountingMiddleware`) under uvicorn in a daemon thread.

    The server runs on its own event loop. ``port=0`` picks a free port; ``path`` only shapes the
    handle's ``url``. Returns once the socket accepts connections.

    Raises:
        RuntimeError: the server did not start within ``start_timeout_s`` seconds.
        OSError: the address could not be bound.
    """
    return serve_built_in_thread(lambda _port: app, host, port, path=path, start_timeout_s=start_timeout_s)


def serve_built_in_thread(
    make_app: Callable[[int], ASGIApp], host: str = "127.0.0.1", port: int = 0, *, path: str = MCP_PATH,
    start_timeout_s: float = 15.0,
) -> DemoServerHandle:
    """As :func:`serve_asgi_in_thread`, for an app that must know its own port (an OAuth resource
    or authorization server names its URL): the socket is bound first, then ``make_app(port)``
    builds the app. Same errors."""
    log = CallLog()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        bound_port = sock.getsockname()[1]
        app = make_app(bound_port)
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config(
        CountingMiddleware(app, log),
        log_level="warning",
        lifespan="on",
        loop="asyncio",
        timeout_graceful_shutdown=2,
        access_log=False,
    )
    userver = uvicorn.Server(config)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(userver.serve(sockets=[sock]))
        except BaseException as exc:  # reported to the starting thread
            errors.append(exc)
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"mcp-test-server-{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not userver.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            userver.should_exit = True
            raise RuntimeError(f"server did not start: {errors[0] if errors else 'timeout'}")
        time.sleep(0.01)
    return DemoServerHandle(host, bound_port, path, log, userver, thread)


def serve_in_thread(
    host: str = "127.0.0.1", port: int = 0, *, server: MCPServer | None = None, start_timeout_s: float = 15.0
) -> DemoServerHandle:
    """Start the demo server (or ``server``) over Streamable HTTP in a daemon thread.

    See :func:`serve_asgi_in_thread`; ``handle.url`` is ``http://HOST:PORT/mcp``.
    """
    return serve_asgi_in_thread(build_demo_app(server, host=host), host, port, start_timeout_s=start_timeout_s)
