"""Hostile MCP servers for the issue 28 attack tests, served on loopback by the test that needs them:

* :func:`mute_subscriber` -- 2025-11-25 ``resources.subscribe`` declared, but a
  ``resources/subscribe`` is never answered (each one recorded in ``asked``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import MCPServer

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
