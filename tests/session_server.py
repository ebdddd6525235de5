"""A small 2025-11-25 SDK server (``mcp.server.mcpserver.MCPServer``, the venv's ``mcp`` package)
that asks the client things **outside** and **inside** its calls, for the session-level request
tests (issue 15 item 2).

* On ``notifications/initialized`` it asks ``roots/list`` on the standalone stream, as the
  filesystem server does (the everything server does it 350 ms later).
* ``slow(seconds)``: works ``seconds`` (at most 10) and asks nothing.
* ``roots_on_the_call()``: asks ``roots/list`` on the call's own response stream (related to it).
* ``roots_aside()``: asks ``roots/list`` on the standalone stream during the call (the SDK's
  ``list_roots()``; FastMCP does the same).
* ``elicit_aside(note)`` / ``sample_aside(note)``: ask ``elicitation/create`` /
  ``sampling/createMessage`` on the standalone stream during the call (a round of the only call
  open); ``note`` goes into the request (the tests check it never reaches a log).
* ``elicit_on_the_call()``: a form elicitation on the call's stream (a round of the call).
* ``ask_after(method, note)``: returns at once, then asks ``method`` on the standalone stream
  once no call is open (``when`` ``"after"``).

Every answer the client gave to a request on the standalone stream is kept in order in
:attr:`SessionServer.aside` (``{"when": "initialized" | tool, "method", "result" | "error"}``).

A request on the standalone stream is lost when the client's GET stream is not open yet (the SDK
then has nowhere to put it, and no event store replays it on a first GET): the server asks again
under a new id after :data:`RESEND_S` until it is answered (at most :data:`ASKS` times), so what
the client answered is each time exactly one request.
"""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest,
                       ElicitRequestFormParams, ElicitResult, ListRootsRequest, ListRootsResult,
                       NotificationParams, SamplingMessage, TextContent)
from mcp_types import REQUEST_TIMEOUT
from pydantic import BaseModel, Field

from mrtrweb.demo.legacy import WireLog, WireRecorder, build_legacy_app
from mrtrweb.demo.server import DemoServerHandle, serve_asgi_in_thread

__all__ = ["ASKS", "RESEND_S", "SessionServer", "serve_session_server"]

RESEND_S = 1.0
ASKS = 10


class Ticket(BaseModel):
    ticket: str = Field(title="Ticket", min_length=3, max_length=32)


class SessionServer:
    """The server, its handle (``url``, ``log``: a :class:`~mrtrweb.demo.legacy.WireLog`) and
    :attr:`aside`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aside: list[dict[str, Any]] = []
        #: bumped by clear(): an ask begun before it (a previous test's session, still resending
        #: on a loaded machine) is not recorded after it
        self._generation = 0
        self._later: list[Any] = []  # tasks asking after their call (ask_after)
        self.handle: DemoServerHandle | None = None

    @property
    def url(self) -> str:
        assert self.handle is not None
        return self.handle.url

    @property
    def log(self) -> WireLog:
        assert self.handle is not None
        return self.handle.log

    @property
    def aside(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._aside)

    def clear(self) -> None:
        with self._lock:
            self._aside.clear()
            self._generation += 1
        if self.handle is not None:
            self.log.clear()

    def wait_aside(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Block until :attr:`aside` holds ``count`` answers (AssertionError after ``timeout_s``)."""
        import time

        deadline = time.monotonic() + timeout_s
        while len(self.aside) < count:
            assert time.monotonic() < deadline, f"the server got {self.aside}, not {count} answers"
            time.sleep(0.02)
        return self.aside

    async def ask_aside(self, session: Any, when: str, request: Any, result_type: Any) -> dict[str, Any]:
        """Ask on the standalone stream (resent while it is lost, see the module doc); record and
        return ``{"when", "method", "result" | "error"}``."""
        method = request.method
        with self._lock:
            generation = self._generation
        for _ in range(ASKS):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    result = await session.send_request(request, result_type, request_read_timeout_seconds=RESEND_S)
            except MCPError as exc:
                if exc.error.code == REQUEST_TIMEOUT:
                    continue
                entry = {"when": when, "method": method, "error": {"code": exc.error.code, "message": exc.error.message}}
                break
            entry = {"when": when, "method": method, "result": result.model_dump(mode="json", exclude_none=True)}
            break
        else:
            entry = {"when": when, "method": method, "error": {"code": REQUEST_TIMEOUT, "message": "never answered"}}
        with self._lock:
            if generation == self._generation:
                self._aside.append(entry)
        return entry

    def build(self) -> MCPServer:
        mcp = MCPServer(name="session-requests", version="0.1.0", log_level="WARNING")

        async def on_initialized(ctx: Any, params: NotificationParams) -> None:
            await self.ask_aside(ctx.session, "initialized", ListRootsRequest(), ListRootsResult)

        mcp._lowlevel_server.add_notification_handler(  # pyright: ignore[reportPrivateUsage]
            "notifications/initialized", NotificationParams, on_initialized)

        @mcp.tool(structured_output=False)
        async def slow(seconds: float, ctx: Context) -> str:
            """Work a while (at most 10 s) and ask nothing."""
            await anyio.sleep(max(0.0, min(float(seconds), 10.0)))
            return f"worked {seconds:g}s"

        @mcp.tool(structured_output=False)
        async def roots_on_the_call(ctx: Context) -> str:
            """Ask roots/list on this call's own response stream."""
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    result = await ctx.request_context.session.send_request(
                        ListRootsRequest(), ListRootsResult,
                        metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
            except MCPError as exc:
                return f"refused: {exc.error.message}"
            return "roots: " + json.dumps([r.model_dump(mode="json", exclude_none=True) for r in result.roots])

        @mcp.tool(structured_output=False)
        async def roots_aside(ctx: Context) -> str:
            """Ask roots/list on the standalone stream during the call."""
            entry = await self.ask_aside(ctx.request_context.session, "roots_aside", ListRootsRequest(), ListRootsResult)
            return json.dumps(entry.get("result") or entry["error"], sort_keys=True)

        @mcp.tool(structured_output=False)
        async def elicit_aside(note: str, ctx: Context) -> str:
            """Ask a form elicitation on the standalone stream during the call."""
            request = ElicitRequest(params=ElicitRequestFormParams(
                message=f"Ticket? {note}", requested_schema=Ticket.model_json_schema()))
            entry = await self.ask_aside(ctx.request_context.session, "elicit_aside", request, ElicitResult)
            return json.dumps(entry.get("result") or entry["error"], sort_keys=True)

        @mcp.tool(structured_output=False)
        async def sample_aside(note: str, ctx: Context) -> str:
            """Ask sampling/createMessage on the standalone stream during the call."""
            request = CreateMessageRequest(params=CreateMessageRequestParams(
                messages=[SamplingMessage(role="user", content=TextContent(type="text", text=note))], max_tokens=20))
            entry = await self.ask_aside(ctx.request_context.session, "sample_aside", request, CreateMessageResult)
            return json.dumps(entry.get("result") or entry["error"], sort_keys=True)

        @mcp.tool(structured_output=False)
        async def ask_after(method: str, note: str, ctx: Context) -> str:
            """Return at once, then ask ``method`` (elicitation/create or sampling/createMessage) on
            the standalone stream once the call is over (recorded in :attr:`aside` as ``"after"``)."""
            session = ctx.request_context.session
            request = (ElicitRequest(params=ElicitRequestFormParams(
                           message=f"Ticket? {note}", requested_schema=Ticket.model_json_schema()))
                       if method == "elicitation/create" else
                       CreateMessageRequest(params=CreateMessageRequestParams(
                           messages=[SamplingMessage(role="user", content=TextContent(type="text", text=note))],
                           max_tokens=20)))
            result_type = ElicitResult if method == "elicitation/create" else CreateMessageResult

            async def later() -> None:
                await anyio.sleep(0.3)
                await self.ask_aside(session, "after", request, result_type)

            self._later.append(asyncio.get_running_loop().create_task(later()))
            return "asked later"

        @mcp.tool(structured_output=False)
        async def elicit_on_the_call(ctx: Context) -> str:
            """A form elicitation on this call's stream (a round of the call)."""
            result = await ctx.elicit("Which ticket?", Ticket)
            return f"{result.action}: {result.data.ticket}" if result.action == "accept" else result.action

        return mcp


def serve_session_server() -> SessionServer:
    """Start a :class:`SessionServer` on a free loopback port (stop it with ``.handle.stop()``)."""
    server = SessionServer()
    log = WireLog()
    app = WireRecorder(build_legacy_app(server.build()), log)
    server.handle = serve_asgi_in_thread(app)
    server.handle.log = log
    return server
