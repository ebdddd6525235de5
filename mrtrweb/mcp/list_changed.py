"""Change notifications of a server's listings (``notifications/tools/list_changed``, prompts,
resources), handed to the connection's ``on_list_changed`` callback.

How they arrive depends on the negotiated protocol:

* **2025-11-25** ("Tools", "Prompts", "Resources": *List Changed Notification*): the server sends
  them on its standalone GET stream (or a response stream) whenever it likes; the SDK hands them
  to the session's ``message_handler`` (:meth:`ListingWatch._on_message`).
* **2026-07-28** (``subscriptions/listen``, SEP-2575): only on a listen stream the client opened
  and asked for them; :meth:`ListingWatch.watch_listings` opens one (for the kinds whose
  capability says ``listChanged``) and keeps it while the connection lives.

Only the *kind* of listing reaches the callback -- never server text: the page it tells re-reads
the listing itself. :class:`ListingWatch` is a mixin of :class:`~mrtrweb.mcp.connection.McpConnection`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import mcp_types as types
from mcp.client.subscriptions import (
    PromptsListChanged, ResourcesListChanged, SubscriptionLost, ToolsListChanged, listen,
)
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["KINDS", "ListChangedCallback", "ListingWatch"]

logger = logging.getLogger("mrtrweb.mcp.connection")

#: ``async (kind) -> None``, ``kind`` one of :data:`KINDS`
ListChangedCallback = Callable[[str], Awaitable[None]]
#: the listings a server may say changed
KINDS: Final = ("tools", "prompts", "resources")

_NOTIFICATION_KIND: Final = {types.ToolListChangedNotification: "tools",
                             types.PromptListChangedNotification: "prompts",
                             types.ResourceListChangedNotification: "resources"}
_EVENT_KIND: Final = {ToolsListChanged: "tools", PromptsListChanged: "prompts", ResourcesListChanged: "resources"}


class ListingWatch:
    """The change-notification half of a connection (see the module doc)."""

    origin: str
    on_list_changed: ListChangedCallback | None
    _watch: asyncio.Task[None] | None

    async def _tell(self, kind: str) -> None:
        callback = self.on_list_changed
        if callback is None:
            return
        try:
            await callback(kind)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 -- a failing listener must not disturb the connection
            logger.exception("list_changed listener of %s failed", self.origin)

    async def _on_message(self, message: Any) -> None:
        """The SDK session's ``message_handler``: server notifications (and transport faults, which
        the requests in flight see themselves). A ``*/list_changed`` goes to :meth:`_tell`."""
        kind = _NOTIFICATION_KIND.get(type(message))
        if kind is not None:
            logger.info("server %s says its %s changed", self.origin, kind)
            await self._tell(kind)
        else:
            await asyncio.sleep(0)

    def watch_listings(self) -> bool:
        """On a 2026-07-28 connection with an ``on_list_changed``, open (once) a ``subscriptions/listen``
        stream for the listings whose capability declares ``listChanged``, in a background task
        that lives until :meth:`close`. Idempotent; returns whether a watch is running (a 2025-11-25
        connection needs none: its notifications come anyway)."""
        if self._watch is not None and not self._watch.done():
            return True
        client = getattr(self, "_client", None)
        if client is None or self.on_list_changed is None:
            return False
        session = client.session
        if session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        caps = session.server_capabilities
        wanted = {kind: bool(getattr(getattr(caps, kind, None), "list_changed", False)) for kind in KINDS}
        if not any(wanted.values()):
            return False
        self._watch = asyncio.get_running_loop().create_task(self._listen(session, wanted),
                                                             name=f"mcp-listen {self.origin}")
        return True

    async def _listen(self, session: Any, wanted: dict[str, bool]) -> None:
        try:
            async with listen(session, tools_list_changed=wanted["tools"], prompts_list_changed=wanted["prompts"],
                              resources_list_changed=wanted["resources"]) as subscription:
                async for event in subscription:
                    kind = _EVENT_KIND.get(type(event))
                    if kind is not None:
                        logger.info("server %s says its %s changed", self.origin, kind)
                        await self._tell(kind)
        except asyncio.CancelledError:
            raise
        except (MCPError, SubscriptionLost, TimeoutError, RuntimeError) as exc:
            # the page still shows a fresh listing on every load; only the live hint is lost
            logger.info("subscriptions/listen on %s ended (%s)", self.origin, type(exc).__name__)

    async def _stop_watching(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None and not watch.done():
            watch.cancel()
            await asyncio.wait([watch])
