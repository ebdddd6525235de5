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
the listing itself. A burst is coalesced (a hostile server may send thousands a second): per kind,
the callback runs at once for the first notification, then at most once per
:data:`COALESCE_S` seconds, once more after a burst for what came during it; one log line per
callback, with how many notifications it stands for.

:class:`ListingWatch` is a mixin of :class:`~mrtrweb.mcp.connection.McpConnection`.
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
#: per kind, the least time between two calls of ``on_list_changed`` (seconds): the notifications
#: of a burst in between make one more call after it
COALESCE_S: Final = 1.0


class ListingWatch:
    """The change-notification half of a connection (see the module doc)."""

    origin: str
    on_list_changed: ListChangedCallback | None
    _watch: asyncio.Task[None] | None
    _lc_pending: dict[str, int]  # kind -> notifications waiting for the call that is due
    _lc_last: dict[str, float]  # kind -> loop time of the last call
    _lc_tasks: set[asyncio.Task[None]]

    def _changed(self, kind: str) -> None:
        """A ``kind`` listing-changed notification arrived: tell the callback now, or once when the
        coalescing window (:data:`COALESCE_S`) ends. Never blocks the session's reader. A tools
        listing the connection kept (:meth:`~mrtrweb.mcp.listing.Listings.tools_known`) is dropped
        at once, whatever the callback."""
        if kind == "tools":
            forget = getattr(self, "forget_tools", None)
            if forget is not None:
                forget()
        if self.on_list_changed is None:
            return
        if kind in self._lc_pending:  # a call is already due: this one is part of it
            self._lc_pending[kind] += 1
            return
        self._lc_pending[kind] = 1
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._lc_last.get(kind, -COALESCE_S) + COALESCE_S - loop.time())
        task = loop.create_task(self._tell(kind, delay), name=f"mcp-list-changed {self.origin}")
        self._lc_tasks.add(task)
        task.add_done_callback(self._lc_tasks.discard)

    async def _tell(self, kind: str, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        count = self._lc_pending.pop(kind, 1)
        self._lc_last[kind] = asyncio.get_running_loop().time()
        callback = self.on_list_changed
        logger.info("server %s says its %s changed (%d notification%s)", self.origin, kind, count,
                    "" if count == 1 else "s")
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
        the requests in flight see themselves). A ``*/list_changed`` goes to :meth:`_changed`, a
        2025-11-25 ``notifications/resources/updated`` to the connection's
        :meth:`~mrtrweb.mcp.resource_watch.ResourceWatch._updated`."""
        kind = _NOTIFICATION_KIND.get(type(message))
        if kind is not None:
            self._changed(kind)
        elif isinstance(message, types.ResourceUpdatedNotification):  # a followed resource (.resource_watch)
            updated = getattr(self, "_updated", None)
            if updated is not None:
                updated(message.params.uri)
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
                # acknowledged: from here on a change is heard (a tools listing made now may be kept)
                self._listening = object() if wanted["tools"] else None
                async for event in subscription:
                    kind = _EVENT_KIND.get(type(event))
                    if kind is not None:
                        self._changed(kind)
        except asyncio.CancelledError:
            raise
        except (MCPError, SubscriptionLost, TimeoutError, RuntimeError) as exc:
            # the page still shows a fresh listing on every load; only the live hint is lost
            logger.info("subscriptions/listen on %s ended (%s)", self.origin, type(exc).__name__)
        finally:  # a change from now on would go unheard: a kept tools listing is not trusted
            self._listening = None
            forget = getattr(self, "forget_tools", None)
            if forget is not None:
                forget()

    async def _stop_watching(self) -> None:
        tasks = list(self._lc_tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for kind in list(self._lc_pending):  # a burst's last call, due later: made now
            await self._tell(kind, 0.0)
        watch, self._watch = self._watch, None
        if watch is not None and not watch.done():
            watch.cancel()
            await asyncio.wait([watch])
