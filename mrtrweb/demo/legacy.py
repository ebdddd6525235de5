"""The legacy demo server: an SDK ``MCPServer`` that speaks only MCP **2025-11-25**.

Elicitation on 2025-11-25 is a *server-to-client request* (``elicitation/create``) sent while the
client's ``tools/call`` is still open, answered by the client on the same session; the tool then
goes on and returns its result. Tools (each elicitation through the SDK's ``ctx.elicit`` /
``ctx.elicit_url``):

``legacy_deploy(env)``
    One form elicitation (confirm: boolean, ticket: 3-32 characters, replicas: 1-10, default 1);
    returns what was answered (or "declined"/"cancelled").
``legacy_connect(provider)``
    One URL-mode elicitation (``https://auth.example.test/connect?provider=...``).
``legacy_trip(destination)``
    Two form elicitations in one call: nights, then seat + confirmation.
``legacy_summarize(text)``
    Asks ``sampling/createMessage`` during the call (deny-by-default at the client).
``legacy_roots()``
    Asks ``roots/list`` during the call, on the call's own response stream (deny-by-default at the client).
``legacy_long_task(seconds)``
    Works for ``seconds`` (at most 60) in steps of one second, reporting progress at each step.
    A ``notifications/cancelled`` for the call stops it (the SDK cancels the handler); the handler
    notes in the :class:`WireLog` (when built with one) that it started, was cancelled at step N,
    or finished.
``echo(text)``
    Returns ``text`` at once.

The SDK serves both eras on one endpoint, routing by the ``MCP-Protocol-Version`` header; it has no
switch to serve only the old one. :class:`LegacyOnly` makes the app answer like a 2025-11-25 server
does to anything newer: a request carrying a protocol version it does not know (the client's
``server/discover`` probe at 2026-07-28) gets HTTP 400 with a JSON-RPC error, so a ``mode="auto"``
client falls back to the ``initialize`` handshake and negotiates 2025-11-25.

:class:`WireRecorder` records everything the client POSTs, in arrival order, into a
:class:`WireLog` (a :class:`~mrtrweb.demo.server.CallLog` that also keeps notifications, the
session each message came on, the POSTs the client closed before their response ended, and the
tools' own notes); :func:`serve_legacy_in_thread` serves the legacy server behind it. Both live in
:mod:`.wire` and are re-exported here.

Run it alone with ``python -m mrtrweb.demo.legacy --port 8766``; ``manage.py mrtrweb_demo`` starts
it too and adds it to each demo tenant as "Demo (legacy 2025-11-25)".
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
import uuid
import warnings
from typing import Literal

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.message import ServerMessageMetadata
from mcp_types import ListRootsRequest, ListRootsResult, SamplingMessage, TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from .recording import ASGIApp, Receive, Scope, Send
from .schemas import CONNECT_URL_BASE
from .serving import MCP_PATH, DemoServerHandle, serve_asgi_in_thread
from .wire import ClosedPost, RecordedMessage, ToolNote, WireLog, WireRecorder

__all__ = ["LEGACY_VERSION", "ClosedPost", "LegacyOnly", "RecordedMessage", "ToolNote", "WireLog", "WireRecorder",
           "build_legacy_app", "build_legacy_server", "main", "serve_legacy_in_thread"]

LEGACY_VERSION = "2025-11-25"
SERVER_NAME = "mrtr-legacy-demo"


class DeployAnswer(BaseModel):
    confirm: bool = Field(title="Confirm deployment", description="Tick to confirm you want to deploy now.")
    ticket: str = Field(title="Change ticket", description="The change-management ticket id (3 to 32 characters).",
                        min_length=3, max_length=32)
    replicas: int = Field(default=1, title="Replicas", description="How many replicas (1 to 10).", ge=1, le=10)


class TripNights(BaseModel):
    nights: int = Field(title="Nights", description="How many nights (1 to 30).", ge=1, le=30)


class TripSeat(BaseModel):
    seat: Literal["window", "aisle"] = Field(title="Seat", description="Window or aisle.")
    confirm: bool = Field(title="Confirm booking", description="Tick to book now.")


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


def build_legacy_server(log: WireLog | None = None) -> MCPServer:
    """Build the legacy demo ``MCPServer`` (tools described in the module docstring); with ``log``,
    ``legacy_long_task`` notes there what happened to each of its calls."""
    mcp = MCPServer(
        name=SERVER_NAME,
        title="Legacy demo server (2025-11-25)",
        version="0.1.0",
        instructions="Demo tools that ask the user questions with elicitation/create requests during the call.",
        log_level="WARNING",
    )

    @mcp.tool(structured_output=False)
    async def legacy_deploy(env: str, ctx: Context) -> str:
        """Deploy to an environment, after a confirmation form (asked during the call)."""
        result = await ctx.elicit(f"Deploy to {env}? (legacy server, call held open)", DeployAnswer)
        if result.action != "accept":
            return f"Deployment: {result.action}; nothing was deployed."
        data = result.data
        if not data.confirm:
            return "Deployment not confirmed; nothing was deployed."
        return f"Deployed {data.replicas} replica(s) to {env} (ticket {data.ticket})."

    @mcp.tool(structured_output=False)
    async def legacy_connect(provider: str, ctx: Context) -> str:
        """Connect an account: asks the person to open a URL (URL-mode elicitation during the call)."""
        url = f"{CONNECT_URL_BASE}?{urllib.parse.urlencode({'provider': provider})}"
        result = await ctx.elicit_url(f"Sign in to {provider} to connect your account.", url, str(uuid.uuid4()))
        if result.action != "accept":
            return f"Connecting {provider}: {result.action}."
        return f"Connecting {provider}: the person opened the sign-in page."

    @mcp.tool(structured_output=False)
    async def legacy_trip(destination: str, ctx: Context) -> str:
        """Book a trip: two questions in one call (nights, then seat and confirmation)."""
        first = await ctx.elicit(f"How many nights in {destination}?", TripNights)
        if first.action != "accept":
            return f"Trip booking: {first.action} at the first question."
        second = await ctx.elicit(f"{first.data.nights} night(s) in {destination}: choose your seat.", TripSeat)
        if second.action != "accept":
            return f"Trip booking: {second.action} at the second question."
        if not second.data.confirm:
            return "Trip not confirmed; nothing was booked."
        return f"Booked {first.data.nights} night(s) in {destination}, {second.data.seat} seat."

    @mcp.tool(structured_output=False)
    async def legacy_summarize(text: str, ctx: Context) -> str:
        """Summarize a text by asking the client to sample (sampling/createMessage during the call)."""
        try:
            with warnings.catch_warnings():  # deprecated at 2026-07-28; this server speaks 2025-11-25
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                result = await ctx.request_context.session.create_message(  # pyright: ignore[reportDeprecated]
                    [SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))],
                    max_tokens=200, related_request_id=ctx.request_id)
        except Exception as exc:  # noqa: BLE001 - the client refused: say so in the result
            return f"Sampling refused by the client: {getattr(getattr(exc, 'error', None), 'message', exc)}"
        content = result.content
        return f"Summary: {getattr(content, 'text', json.dumps(result.model_dump(mode='json')))}"

    @mcp.tool(structured_output=False)
    async def legacy_roots(ctx: Context) -> str:
        """List the client's roots (roots/list during the call)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                # on the call's own stream (the SDK's list_roots() takes the standalone one, which
                # a client answers at session level, outside the call)
                result = await ctx.request_context.session.send_request(
                    ListRootsRequest(), ListRootsResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
        except Exception as exc:  # noqa: BLE001
            return f"Roots refused by the client: {getattr(getattr(exc, 'error', None), 'message', exc)}"
        return "Roots: " + ", ".join(str(r.uri) for r in result.roots)

    @mcp.tool(structured_output=False)
    async def legacy_long_task(seconds: int, ctx: Context) -> str:
        """Work for a while (at most 60 s) in one-second steps, reporting progress; stops when cancelled."""
        seconds = max(0, min(int(seconds), 60))
        request_id = ctx.request_context.request_id
        step = 0
        if log is not None:
            log.note("legacy_long_task", request_id, "started", 0)
        try:
            for step in range(seconds):
                await ctx.report_progress(step, seconds, f"{step} of {seconds} s")
                await anyio.sleep(1)  # a notifications/cancelled for this call cancels the handler here
        except anyio.get_cancelled_exc_class():
            if log is not None:
                log.note("legacy_long_task", request_id, "cancelled", step, _cancel_requested(ctx))
            raise
        if log is not None:
            log.note("legacy_long_task", request_id, "finished", seconds)
        return f"Worked for {seconds} s."

    @mcp.tool(structured_output=False)
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    return mcp


def _cancel_requested(ctx: Context) -> bool | None:
    """Whether the SDK marked this call cancelled by a ``notifications/cancelled`` for its id.

    SDK internals (``mcp==2.3``): the request-scoped ``ServerSession._request_outbound`` is the
    call's dispatch context, whose ``cancel_requested`` event the dispatcher sets on the notice
    (then cancels the handler). ``None`` if that is not reachable."""
    dctx = getattr(ctx.request_context.session, "_request_outbound", None)
    event = getattr(dctx, "cancel_requested", None)
    return event.is_set() if isinstance(event, anyio.Event) else None


class LegacyOnly:
    """ASGI wrapper: answer requests at a protocol version newer than 2025-11-25 as a 2025-11-25
    server does (HTTP 400, JSON-RPC error -32600 "Unsupported protocol version"); pass the rest on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http":
            version = next((v.decode("latin-1") for k, v in scope.get("headers", [])
                            if k.lower() == b"mcp-protocol-version"), None)
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                body = json.dumps({"jsonrpc": "2.0", "id": "server-error", "error": {
                    "code": -32600,
                    "message": f"Bad Request: Unsupported protocol version: {version}. Supported versions: "
                               f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)}"}}).encode()
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def build_legacy_app(server: MCPServer | None = None, *, host: str = "127.0.0.1") -> ASGIApp:
    """The legacy demo server's Streamable HTTP ASGI app (endpoint :data:`MCP_PATH`), 2025-11-25 only."""
    mcp = server or build_legacy_server()
    return LegacyOnly(mcp.streamable_http_app(streamable_http_path=MCP_PATH, host=host))


def serve_legacy_in_thread(host: str = "127.0.0.1", port: int = 0, *, start_timeout_s: float = 15.0) -> DemoServerHandle:
    """Start the legacy demo server under uvicorn in a daemon thread (see
    :func:`mrtrweb.demo.server.serve_asgi_in_thread`); ``handle.log`` is a :class:`WireLog`: the
    requests it got, the responses the client sent to its own requests (``handle.log.responses()``),
    every message in order with the notifications (``handle.log.messages()``,
    ``handle.log.cancellations()``), and what ``legacy_long_task`` noted (``handle.log.tool_notes()``)."""
    log = WireLog()
    app = WireRecorder(build_legacy_app(build_legacy_server(log), host=host), log)
    handle = serve_asgi_in_thread(app, host, port, start_timeout_s=start_timeout_s)
    handle.log = log  # the CallLog serve_asgi_in_thread keeps (of the same POSTs) goes unused
    return handle


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m mrtrweb.demo.legacy [--host 127.0.0.1] [--port 8766]``."""
    parser = argparse.ArgumentParser(description="Run the legacy (2025-11-25) demo MCP server (Streamable HTTP).")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8766, help="port to bind (default 8766)")
    args = parser.parse_args(argv)
    log = WireLog()
    app = WireRecorder(build_legacy_app(build_legacy_server(log), host=args.host), log)
    netloc = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    print(f"Legacy (2025-11-25) demo server on http://{netloc}{MCP_PATH}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", lifespan="on")


if __name__ == "__main__":
    main()
