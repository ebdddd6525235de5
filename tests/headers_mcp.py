"""A real MCP server (the SDK's low-level ``Server`` over Streamable HTTP, 2026-07-28) whose tools
use ``x-mcp-header`` (SEP-2243), for tests. The SDK's server side validates every ``tools/call``'s
``Mcp-Param-*`` headers against its arguments (a missing or wrong header is a JSON-RPC error
``HEADER_MISMATCH``), so a call it completes carried them right. A middleware records, for each
POST, the JSON-RPC method, the tool name and the ``Mcp-Param-*`` headers as received.

Tools:

``route``
    annotated ``region`` (string, ``Region``), ``priority`` (integer, ``Priority``), ``verbose``
    (boolean, ``Verbose``), ``note`` (string, ``Note``); unannotated ``score`` (number) and
    ``query``. One form round (``go``, a boolean defaulting to true) threaded through
    ``requestState``, then "routed".
``bad_space`` / ``bad_number``
    an invalid annotation (``"My Region"``; one on a ``number``): MCP clients must exclude them,
    and the server answers any call of them (so a client that calls one is seen doing it).
``fails``
    one form round, then (on the retry) a JSON-RPC error whose message is :data:`HOSTILE_MESSAGE`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from mrtrweb.demo.server import DemoServerHandle, read_body, replaying, serve_asgi_in_thread

#: the form of each tool's round
GO_SCHEMA = {"type": "object", "properties": {"go": {"type": "boolean", "default": True}}, "required": ["go"]}
#: a JSON-RPC error message with an escape sequence, a bidi override, line breaks, markup and a long tail
HOSTILE_MESSAGE = ("\x1b[2J\x1b[31mAccess denied\x1b[0m \u202eexe.txt\nline two\r\n<b>bold</b> "
                   + "tail " * 200)
HOSTILE_CODE = -32010

ROUTE_SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "priority": {"type": "integer", "x-mcp-header": "Priority"},
        "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
        "note": {"type": "string", "x-mcp-header": "Note"},
        "score": {"type": "number"},
        "query": {"type": "string"},
    },
    "required": ["region"],
}

TOOLS = [
    types.Tool(name="route", description="routes by region", input_schema=ROUTE_SCHEMA),
    types.Tool(name="bad_space", description="invalid header name",
               input_schema={"type": "object", "properties": {"v": {"type": "string", "x-mcp-header": "My Region"}}}),
    types.Tool(name="bad_number", description="header on a number",
               input_schema={"type": "object", "properties": {"n": {"type": "number", "x-mcp-header": "N"}}}),
    types.Tool(name="fails", description="fails on the retry",
               input_schema={"type": "object", "properties": {"secret_arg": {"type": "string"}}}),
]


@dataclasses.dataclass(frozen=True)
class Seen:
    """One POST as the server received it."""

    method: str
    tool: str | None
    params: dict[str, Any]
    #: the ``mcp-param-*`` headers, names lowercased (ASGI), values as sent
    param_headers: dict[str, str]


class HeadersLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[Seen] = []

    def add(self, seen: Seen) -> None:
        with self._lock:
            self._seen.append(seen)

    def all(self, method: str | None = None, tool: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen if (method is None or s.method == method) and (tool is None or s.tool == tool)]

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


def _round() -> types.InputRequiredResult:
    ask = types.ElicitRequest(params=types.ElicitRequestFormParams(message="Go on?", requested_schema=GO_SCHEMA))
    return types.InputRequiredResult(input_requests={"go": ask}, request_state="round-1-state")


async def _list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    if params.name in ("route", "fails") and not params.input_responses:
        return _round()
    if params.name == "fails":
        raise MCPError(HOSTILE_CODE, HOSTILE_MESSAGE)
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} done")])


class _Recorder:
    def __init__(self, app: Any, log: HeadersLog) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        try:
            message = json.loads(body)
        except ValueError:
            message = {}
        if isinstance(message, dict) and "id" in message:
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                       if k.decode("latin-1").startswith("mcp-param-")}
            self.log.add(Seen(str(message.get("method")), params.get("name") if message.get("method") == "tools/call"
                              else None, params, headers))
        await self.app(scope, replaying(body, receive), send)


def serve() -> tuple[DemoServerHandle, HeadersLog]:
    """Start the server in a thread; returns its handle (``.url``, ``.stop()``) and its log."""
    server = Server("headers-test", version="1.0", on_list_tools=_list_tools, on_call_tool=_call_tool)
    log = HeadersLog()
    handle = serve_asgi_in_thread(_Recorder(server.streamable_http_app(), log))
    return handle, log
