"""A resource that changes while a person looks at it: the demo's notice board (issue 28, item 4).

:func:`add_notice_board` adds to an SDK ``MCPServer``:

``demo://board`` (resource, ``text/plain``)
    "Version N: <text>".
``update_board(text)`` (tool)
    Writes the board (at most 200 characters) and says the resource was updated: on 2026-07-28
    ``subscriptions/listen`` streams that follow ``demo://board``, and at 2025-11-25 to every
    session that sent ``resources/subscribe`` for it (and no ``resources/unsubscribe`` since).

The server then declares ``resources.subscribe`` on both protocol versions (2026-07-28: the SDK
derives it from ``subscriptions/listen``; 2025-11-25: from the subscribe handler added here).
:func:`board_server` is a small server with the board alone (the tests'); the command-line demo
(``python -m mrtrweb.demo.server``) has it too.
"""

from __future__ import annotations

from typing import Any, Final

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

__all__ = ["BOARD_URI", "add_notice_board", "board_server"]

BOARD_URI: Final = "demo://board"


def add_notice_board(mcp: MCPServer) -> None:
    """Add the board resource, its ``update_board`` tool and ``resources/subscribe`` (2025-11-25)."""
    board = {"version": 1, "text": "Nothing posted yet."}
    subscribers: dict[int, Any] = {}  # id(session) -> a 2025-11-25 session following the board

    @mcp.resource(BOARD_URI, name="notice_board", title="Notice board", mime_type="text/plain")
    def notice_board() -> str:
        """The demo's notice board: changes when update_board is called."""
        return f"Version {board['version']}: {board['text']}"

    @mcp.tool(structured_output=False, title="Update the notice board")
    async def update_board(text: str, ctx: Context) -> str:
        """Write the notice board (demo://board); its readers are told."""
        board["version"] += 1
        board["text"] = text[:200]
        await ctx.notify_resource_updated(BOARD_URI)  # 2026-07-28: the listen streams following it
        for session in list(subscribers.values()):  # 2025-11-25: the sessions that subscribed
            try:
                await session.send_resource_updated(BOARD_URI)
            except Exception:  # noqa: BLE001 -- a session gone meanwhile
                subscribers.pop(id(session), None)
        return f"The board is at version {board['version']}."

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        if str(params.uri) == BOARD_URI and ctx.session is not None:
            subscribers[id(ctx.session)] = ctx.session
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        if ctx.session is not None:
            subscribers.pop(id(ctx.session), None)
        return types.EmptyResult()

    lowlevel = mcp._lowlevel_server  # noqa: SLF001 -- MCPServer has no public subscribe hook
    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)


def board_server() -> MCPServer:
    """A small SDK server with the notice board alone."""
    mcp = MCPServer(name="board", version="1", log_level="WARNING")
    add_notice_board(mcp)
    return mcp
