"""Support of the MCP Apps tests (public names): a server listing a tool with an app (``show``), one
for the app alone (``refresh``) and one without (``plain``); every call's tool name in :data:`CALLS`."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server

from mrtrweb.demo.server import serve_asgi_in_thread

CALLS: list[str] = []
TOOLS = [
    types.Tool.model_validate({"name": "show", "description": "has an app", "inputSchema": {"type": "object"},
                               "_meta": {"ui": {"resourceUri": "ui://show/app.html"}}}),
    types.Tool.model_validate({"name": "refresh", "description": "for the app alone",
                               "inputSchema": {"type": "object"},
                               "_meta": {"ui": {"resourceUri": "ui://show/app.html", "visibility": ["app"]}}}),
    types.Tool.model_validate({"name": "plain", "description": "no app", "inputSchema": {"type": "object"}}),
]


async def _list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    CALLS.append(params.name)
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} done")])


def serve() -> Any:
    """The server on loopback (``.url``, ``.stop()``)."""
    server = Server("apps-test", version="1.0", on_list_tools=_list_tools, on_call_tool=_call_tool)
    return serve_asgi_in_thread(server.streamable_http_app())
