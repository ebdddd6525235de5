"""A server's log messages (``notifications/message``, the deprecated "logging" utility) for the call
they belong to, and the level asked for them.

How a level is asked depends on the negotiated protocol:

* **2026-07-28** (server/utilities/logging, SEP-2577): per request, the reserved ``_meta`` key
  ``io.modelcontextprotocol/logLevel`` (``mcp_types.LOG_LEVEL_META_KEY``); without it the server
  MUST NOT send any. :func:`stamp_level` adds it to a request's ``_meta``.
* **2025-11-25**: ``logging/setLevel`` for the whole session, where the server declares ``logging``;
  :meth:`ServerLogging._settle_level` sends it before a request that wants another level than the
  session has (so per connection, and a connection is per person and server).

A message is **related to a call** when it came on that call's own response stream (the same
``contextvars`` path as a server request, :mod:`.server_requests`: the SDK runs the
``message_handler`` in the snapshot of the task that wrote the request, where :data:`SENDING` is
that call's :class:`OpenCall`). Only such a message reaches the call's ``on_log``; any other
(the standalone stream, a call already answered) is dropped, counted in one rate-limited log line
per connection. What reaches ``on_log`` is the server's ``level`` (one of :data:`LEVELS`, else
``"info"``), its ``logger`` (a string or ``None``) and its ``data`` (any JSON, untouched: the
caller bounds and escapes it).

:class:`ServerLogging` is a mixin of :class:`~mrtrweb.mcp.connection.McpConnection`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

import mcp_types as types
from mcp_types import LOG_LEVEL_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .errors import McpCallError
from .loglimit import LogLimiter
from .server_requests import SENDING, OpenCall

__all__ = ["LEVELS", "LogCallback", "SET_LEVEL_TIMEOUT_S", "ServerLogging", "stamp_level"]

logger = logging.getLogger("mrtrweb.mcp.connection")

#: the protocol's log levels, least severe first (RFC 5424's, as MCP names them)
LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

#: how long ``logging/setLevel`` is waited for (seconds; the connection's timeout when shorter): the
#: call it comes before waits meanwhile
SET_LEVEL_TIMEOUT_S: Final = 5.0

#: ``async (level, logger, data) -> None``: one log message of the call, as the server sent it
LogCallback = Callable[[str, "str | None", Any], Awaitable[None]]


def stamp_level(wire_params: dict[str, Any], level: str | None, protocol_version: str | None) -> None:
    """On a 2026-07-28 request: ask for log messages at ``level`` and above (``_meta``); else nothing."""
    if level in LEVELS and protocol_version in MODERN_PROTOCOL_VERSIONS:
        meta = wire_params.setdefault("_meta", {})
        if isinstance(meta, dict):
            meta[LOG_LEVEL_META_KEY] = level


class ServerLogging:
    """The log-message half of a connection (see the module doc)."""

    origin: str
    timeout_s: float
    _open_calls: dict[Any, OpenCall]
    _session_level: tuple[int, str] | None  # (session generation, level) logging/setLevel set (2025-11-25)
    session_generation: int
    _log_drops: LogLimiter

    def _init_server_log(self) -> None:
        self._session_level = None
        self._log_drops = LogLimiter(logger, 60.0)

    async def _on_message(self, message: Any) -> None:
        """The SDK session's ``message_handler``: a log message here, anything else to the next
        handler (:class:`~mrtrweb.mcp.list_changed.ListingWatch`)."""
        if isinstance(message, types.LoggingMessageNotification):
            await self._on_log_message(message)
            return
        await super()._on_message(message)  # type: ignore[misc]

    async def _on_log_message(self, message: types.LoggingMessageNotification) -> None:
        call = SENDING.get()
        if call is None or call.on_log is None or call not in self._open_calls.values():
            self._log_drops.info(f"log:{self.origin}", "a log message of %s related to no open call was dropped",
                                 self.origin)
            return
        params = message.params
        level = params.level if params.level in LEVELS else "info"
        name = params.logger if isinstance(params.logger, str) else None
        try:
            await call.on_log(level, name, params.data)
        except Exception:  # noqa: BLE001 -- a failing listener must not disturb the connection
            logger.exception("log listener of a call on %s failed", self.origin)

    async def _settle_level(self, level: str | None, protocol_version: str | None,
                            capabilities: dict[str, Any] | None) -> None:
        """On a 2025-11-25 session whose server declares ``logging``: ``logging/setLevel`` when
        ``level`` is not the session's yet, waited for at most :data:`SET_LEVEL_TIMEOUT_S`. A refusal
        or no answer is logged and the call goes on without it; it is not asked again this session."""
        if level not in LEVELS or (self.session_generation, level) == self._session_level \
                or protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        if protocol_version is None or "logging" not in (capabilities or {}):
            return
        try:
            await self._send(  # type: ignore[attr-defined]  # the connection's (mcp.sending)
                "logging/setLevel", {"level": level}, f"setlevel-{uuid.uuid4()}", renew=False,
                timeout_s=min(self.timeout_s, SET_LEVEL_TIMEOUT_S))
        except McpCallError as exc:
            logger.info("logging/setLevel %s on %s refused (%s)", level, self.origin, exc.code)
        # asked once per session and level, answered or not: a server that refuses it, or never
        # answers, is not asked again before every call (each would wait); what it sends below the
        # level is left out by the receiver (mrtrweb.operations.serverlog). A renewed session is asked again.
        self._session_level = (self.session_generation, level)
