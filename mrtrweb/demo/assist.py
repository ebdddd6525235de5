"""What the demo server offers as you type and tells while it works (issue 28), where built with
``build_demo_server(assist=True)``: completions (``completion/complete``) of the ``release_notes``
prompt's ``version`` and the ``demo://reports/{team}`` template's ``team``; the deprecated logging
utility (``logging/setLevel``, so ``logging`` is declared) and a tool ``chatty(lines, wait=0)`` that
waits ``wait`` seconds, sends ``lines`` log messages (at most 50, levels debug to error in turn)
during its call, then answers.

Off by default: a demo server that declares ``logging`` makes each call read the person's log level.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import Completion, EmptyResult, PromptReference, ResourceTemplateReference, SetLevelRequestParams

__all__ = ["RELEASES", "TEAMS", "add_assistance"]

#: the ``version`` values the ``release_notes`` prompt completes
RELEASES = ("1.0.0", "1.1.0", "1.2.0", "2.0.0-rc1")
#: the ``team`` values the report template completes
TEAMS = ("payments", "people", "platform", "search")
_LEVELS = ("debug", "info", "notice", "warning", "error")


def add_assistance(mcp: MCPServer) -> None:
    """Add the completions, the log level handler and ``chatty`` to the demo ``mcp``."""

    @mcp.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
        if isinstance(ref, PromptReference) and ref.name == "release_notes" and argument.name == "version":
            pool = RELEASES
        elif isinstance(ref, ResourceTemplateReference) and argument.name == "team":
            pool = TEAMS
        else:
            return None
        values = [v for v in pool if v.startswith(argument.value)]
        return Completion(values=values, total=len(values), hasMore=False)

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        return EmptyResult()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)  # noqa: SLF001

    @mcp.tool(structured_output=False, title="Talk while working")
    async def chatty(lines: int, ctx: Context, wait: int = 0) -> str:
        """Waits ``wait`` seconds (at most 10), sends ``lines`` log messages (at most 50), then answers."""
        count = max(0, min(int(lines), 50))
        await asyncio.sleep(max(0, min(int(wait), 10)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            for i in range(count):
                await ctx.log(_LEVELS[i % len(_LEVELS)], {"step": i + 1, "of": count}, logger_name="chatty")
        return f"said {count} things"
