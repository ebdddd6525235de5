"""The ``operation.log`` push (a server's log message during an operation's call,
:mod:`mrtrweb.operations.serverlog`) to the browser: a mixin of
:class:`~mrtrweb.live.consumers.OperationsConsumer`, whose ``dispatch`` lets it through only while
the session holds and the person may see the operation (as ``operation.progress``)."""

from __future__ import annotations

from typing import Any

__all__ = ["ServerLogPush"]

_LEVELS = frozenset({"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"})


class ServerLogPush:
    """``{"type": "log", "id", "level", "logger", "data", "held", "line"}`` (``line`` false: no line,
    only ``held``, at the end of a request): text already bounded and made
    visible by the sender; the page sets it as ``textContent``."""

    async def operation_log(self, event: dict[str, Any]) -> None:
        level = event.get("level")
        held = event.get("held")
        await self.send_json({  # type: ignore[attr-defined]  # the consumer's
            "type": "log", "id": event.get("operation_id"), "level": level if level in _LEVELS else "info",
            "logger": str(event.get("logger") or ""), "data": str(event.get("data") or ""),
            "held": held if isinstance(held, int) and held > 0 else 0,
            "line": event.get("line") is not False})  # False: only how many were held back (the request ended)
