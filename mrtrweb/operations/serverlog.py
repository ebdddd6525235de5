"""A server's log messages during an operation's call, pushed live to the person's operation page
(issue 28): the level the person chose for that server (:class:`~mrtrweb.models.ServerLogLevel`)
goes out with each request of the operation (:mod:`mrtrweb.mcp.server_log`), and each
``notifications/message`` the call's stream carries becomes an ``operation.log`` push.

Pushed live as they come, and kept with the operation (``Operation.server_log``, the last
:data:`KEPT_LINES`) in **one** write when the request ends -- never a write per message: the volume
is the server's to decide, and a chatty (or hostile) server must not turn into a stream of database
writes. So a reload shows what the earlier requests of the operation logged; what the request in
flight has logged so far reaches a page only live (a page opened after it logged sees it once the
request ends). The audit trail does not record them: it records what the person decided, not what
a server said on the side.

A message below the person's level is not pushed (a 2025-11-25 server's ``logging/setLevel`` handler may
not filter). Bounds (server text, never trusted): at most :data:`MAX_LINES` pushes per request, at most
:data:`PER_SECOND` a second (the rest counted and said on the next line pushed, or when the request
ends; kept as a :data:`HELD` line), the logger name
at most :data:`MAX_LOGGER` characters and the data as JSON text at most :data:`MAX_DATA`
characters, both through :func:`~mrtrweb.text.display.shown` (bidi and controls made visible);
the page sets them as ``textContent``. Nothing of a message is logged by us (it may hold secrets).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.db import transaction

from ..mcp.server_log import LEVELS
from ..models import Operation, ServerLogLevel
from ..runtime import push
from ..runtime.push import user_group
from ..text import display

__all__ = ["HELD", "KEPT_LINES", "MAX_DATA", "MAX_LINES", "MAX_LOGGER", "PER_SECOND", "LogPush", "keep_lines", "level_for"]

logger = logging.getLogger("mrtrweb.operations")

#: the most log lines pushed per request of an operation
MAX_LINES: Final = 200
#: the most log lines pushed per second (a burst beyond is counted, not pushed)
PER_SECOND: Final = 20
#: the longest logger name pushed (characters)
MAX_LOGGER: Final = 100
#: the longest data pushed, as JSON text (characters)
MAX_DATA: Final = 1000
#: the most lines kept with an operation (the newest; its row carries them)
KEPT_LINES: Final = 100
#: the "level" of a kept line that says how many messages were held back before the next one
#: (``[HELD, "", "<n>"]``; product-made, never a server's level)
HELD: Final = "held"


def level_for(user_id: Any, server_id: Any) -> str | None:
    """Sync: the least log level ``user_id`` asks of ``server_id``, or None (none asked)."""
    level = ServerLogLevel.objects.filter(user_id=user_id, server_id=server_id).values_list("level", flat=True).first()
    return level if level in LEVELS else None


def keep_lines(op_id: Any, lines: list[list[str]]) -> None:
    """Sync: append ``lines`` to the operation's kept log, the last :data:`KEPT_LINES` of it (one row lock)."""
    with transaction.atomic():
        row = Operation.objects.select_for_update().only("pk", "server_log").get(pk=op_id)
        kept = row.server_log if isinstance(row.server_log, list) else []
        Operation.objects.filter(pk=op_id).update(server_log=(kept + lines)[-KEPT_LINES:])


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
        self.lines: list[list[str]] = []  # what was pushed, to keep when the request ends (the last KEPT_LINES)

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
        held = [[HELD, "", str(self.held)]] if self.held else []
        self.held = 0
        self.lines = (self.lines + held + [[event["level"], event["logger"], event["data"]]])[-KEPT_LINES:]
        await push.group_send(self.group, event, what="log message")

    async def keep(self) -> None:
        """Keep what this request's server logged with the operation (one write, none when it logged
        nothing). A failure is logged and lets the call go on: the lines were pushed already."""
        if self.held:  # the end of a flood: how many were held back after the last line, said live and kept
            self.lines.append([HELD, "", str(self.held)])
            await push.group_send(self.group, {"type": "operation.log", "operation_id": self.op_id, "level": "info",
                                               "logger": "", "data": "", "held": self.held, "line": False},
                                  what="log message")
            self.held = 0
        lines, self.lines = self.lines, []
        if not lines:
            return
        try:
            await sync_to_async(keep_lines)(self.op_id, lines)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the database gone, the row deleted: not kept, said once
            logger.warning("operation %s: %d server log lines not kept (%s)", self.op_id, len(lines),
                           type(exc).__name__)
