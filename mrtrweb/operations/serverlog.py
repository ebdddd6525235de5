"""A server's log messages during an operation's call, pushed live to the person's operation page
(issue 28): the level the person chose for that server (:class:`~mrtrweb.models.ServerLogLevel`)
goes out with each request of the operation (:mod:`mrtrweb.mcp.server_log`), and each
``notifications/message`` the call's stream carries becomes an ``operation.log`` push.

Pushed live only, not kept with the operation: log messages are a deprecated debugging aid whose
volume the server alone decides; writing them would turn a chatty (or hostile) server into database
writes per message, and the audit trail records what the person decided, not what a server said
on the side. A reload shows the pane empty again; the page says so.

A message below the person's level is not pushed (a 2025-11-25 server's ``logging/setLevel`` handler may
not filter). Bounds (server text, never trusted): at most :data:`MAX_LINES` pushes per request, at most
:data:`PER_SECOND` a second (the rest counted and said on the next line pushed), the logger name
at most :data:`MAX_LOGGER` characters and the data as JSON text at most :data:`MAX_DATA`
characters, both through :func:`~mrtrweb.text.display.shown` (bidi and controls made visible);
the page sets them as ``textContent``. Nothing of a message is logged by us (it may hold secrets).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from ..mcp.server_log import LEVELS
from ..models import ServerLogLevel
from ..runtime import push
from ..runtime.push import user_group
from ..text import display

__all__ = ["MAX_DATA", "MAX_LINES", "MAX_LOGGER", "PER_SECOND", "LogPush", "level_for"]

logger = logging.getLogger("mrtrweb.operations")

#: the most log lines pushed per request of an operation
MAX_LINES: Final = 200
#: the most log lines pushed per second (a burst beyond is counted, not pushed)
PER_SECOND: Final = 20
#: the longest logger name pushed (characters)
MAX_LOGGER: Final = 100
#: the longest data pushed, as JSON text (characters)
MAX_DATA: Final = 2000


def level_for(user_id: Any, server_id: Any) -> str | None:
    """Sync: the least log level ``user_id`` asks of ``server_id``, or None (none asked)."""
    level = ServerLogLevel.objects.filter(user_id=user_id, server_id=server_id).values_list("level", flat=True).first()
    return level if level in LEVELS else None


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


class LogPush:
    """The ``on_log`` of one request of operation ``op`` (see the module doc)."""

    def __init__(self, op: Any, level: str = "debug") -> None:
        self.least = LEVELS.index(level) if level in LEVELS else 0  # a 2025-11-25 server may send below it
        self.op_id = str(op.id)
        self.group = user_group(op.user_id)
        self.pushed = 0
        self.held = 0  # lines not pushed since the last one that was (rate or count)
        self.window = (0.0, 0)  # (loop time the second began, lines pushed in it)

    async def __call__(self, level: str, name: str | None, data: Any) -> None:
        if level in LEVELS and LEVELS.index(level) < self.least:
            return  # below what the person asked for
        now = asyncio.get_running_loop().time()
        start, count = self.window
        if now - start >= 1.0:
            start, count = now, 0
        if self.pushed >= MAX_LINES or count >= PER_SECOND:
            self.held += 1
            return
        self.window = (start, count + 1)
        self.pushed += 1
        try:
            text = display.json_text(data)
        except (TypeError, ValueError, RecursionError):
            text = "?"
        event = {"type": "operation.log", "operation_id": self.op_id, "level": level if level in LEVELS else "info",
                 "logger": display.shown(_bounded(name, MAX_LOGGER)) if name else "",
                 "data": display.shown(_bounded(text, MAX_DATA)), "held": self.held}
        self.held = 0
        await push.group_send(self.group, event, what="log message")
