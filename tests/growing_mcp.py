"""An MCP server whose tool list grows while a person looks at it (the listings' tests, in process
and in a real browser)."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer


def growing_server() -> MCPServer:
    """An SDK server whose ``grow`` tool adds a tool ``grown_N`` and says its tools changed (on a
    2026-07-28 listen stream and, at 2025-11-25, on the session's stream)."""
    mcp = MCPServer(name="growing", version="1", log_level="WARNING")
    grown = [0]

    @mcp.tool(structured_output=False)
    async def grow(ctx: Context) -> str:
        """Add a tool."""
        grown[0] += 1
        name = f"grown_{grown[0]}"

        async def added() -> str:
            return name

        mcp.add_tool(added, name=name, description="<b>added</b> at run time")
        await ctx.notify_tools_changed()  # 2026-07-28: subscriptions/listen streams
        if ctx.request_context.session is not None:
            await ctx.session.send_tool_list_changed()  # 2025-11-25: the session's stream (dropped at 2026)
        return name

    return mcp
