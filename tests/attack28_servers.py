"""Hostile MCP servers for the issue 28 attack tests, served on loopback by the test that needs them:

* :func:`mute_subscriber` -- 2025-11-25 ``resources.subscribe`` declared, but a
  ``resources/subscribe`` is never answered (each one recorded in ``asked``);
* :func:`mute_level` -- 2025-11-25 ``logging`` declared, but a ``logging/setLevel`` is never
  answered (each one recorded); its tool ``hello`` answers at once.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

MUTE_URI = "demo://mute"


def mute_subscriber() -> tuple[MCPServer, list[str]]:
    """A server with one resource whose ``resources/subscribe`` never answers; and the URIs asked."""
    mcp = MCPServer(name="mute", version="1", log_level="WARNING")
    asked: list[str] = []

    @mcp.resource(MUTE_URI, name="mute", mime_type="text/plain")
    def mute() -> str:
        """Never says it changed."""
        return "quiet"

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        asked.append(str(params.uri))
        await asyncio.Event().wait()  # never answered
        return types.EmptyResult()  # pragma: no cover

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        return types.EmptyResult()

    lowlevel = mcp._lowlevel_server  # noqa: SLF001 -- MCPServer has no public subscribe hook
    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
    return mcp, asked


def mute_level() -> tuple[MCPServer, list[str]]:
    """A server whose ``logging/setLevel`` never answers; and the levels asked."""
    mcp = MCPServer(name="mute-level", version="1", log_level="WARNING")
    asked: list[str] = []

    @mcp.tool(structured_output=False)
    def hello() -> str:
        """Answers at once."""
        return "hello"

    async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        asked.append(params.level)
        await asyncio.Event().wait()  # never answered
        return types.EmptyResult()  # pragma: no cover

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        mcp._lowlevel_server.add_request_handler(  # noqa: SLF001 -- as the demo's assist server
            "logging/setLevel", types.SetLevelRequestParams, set_level)
    return mcp, asked
