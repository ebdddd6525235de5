"""Following resources a person looks at: a server's ``notifications/resources/updated`` for the
URIs pages watch, handed to those pages' listeners.

A page watches a URI with :meth:`ResourceWatch.watch_resource` (``uri``, an ``async (uri) -> None``
listener) and stops with :meth:`ResourceWatch.unwatch_resource`; the server is asked only while at
least one listener watches the URI, and only if it declares ``resources.subscribe``:

* **2025-11-25** ("Resources": *Subscriptions*): ``resources/subscribe`` for the first listener of a
  URI, ``resources/unsubscribe`` after the last; the server's ``notifications/resources/updated``
  reaches the session's ``message_handler`` (:meth:`ListingWatch._on_message
  <mrtrweb.mcp.list_changed.ListingWatch._on_message>` hands it to :meth:`ResourceWatch._updated`).
* **2026-07-28** (``subscriptions/listen``, SEP-2575): one listen stream with the watched URIs in
  its ``resourceSubscriptions``, opened again whenever that set changes (there is no replay: an
  update during the swap is missed, as on any re-listen), closed when nothing is watched.

At most :data:`MAX_WATCHED_URIS` URIs per connection (a URI over :data:`MAX_URI_CHARS` characters is
never watched): a page past the bound gets no live hint, only the read it shows. Updates are
coalesced per URI as list changes are (:data:`~mrtrweb.mcp.list_changed.COALESCE_S`: at once, then
at most once per window); an update for a URI nobody watches (a hostile server's thousands) costs a
dictionary look-up. The listener gets the URI it watched, never other server text. While a URI is
watched the connection is not idle (:meth:`idle_for`): the pool keeps it open for the page.

:class:`ResourceWatch` is a mixin of :class:`~mrtrweb.mcp.connection.McpConnection`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

from mcp.client.subscriptions import ResourceUpdated, SubscriptionLost, listen
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .errors import McpCallError
from .list_changed import COALESCE_S

__all__ = ["ASK_TIMEOUT_S", "MAX_URI_CHARS", "MAX_WATCHED_URIS", "ResourceListener", "ResourceWatch"]

logger = logging.getLogger("mrtrweb.mcp.connection")

#: ``async (uri) -> None``: told that the resource at ``uri`` (as watched) has a newer version
ResourceListener = Callable[[str], Awaitable[None]]
#: the most URIs one connection follows at once
MAX_WATCHED_URIS: Final = 16
#: the longest URI followed (characters)
MAX_URI_CHARS: Final = 2048
#: how long a ``resources/subscribe`` / ``resources/unsubscribe`` or a listen stream's
#: acknowledgement is waited for (seconds; the connection's own timeout when shorter): a server
#: that never answers holds the connection's watch lock, so every page of it, no longer than this
ASK_TIMEOUT_S: Final = 10.0


class ResourceWatch:
    """The resource-subscription half of a connection (see the module doc)."""

    origin: str
    timeout_s: float
    _client: Any
    send: Callable[..., Awaitable[dict[str, Any]]]  # the connection's (mrtrweb.mcp.sending.Sending)
    _rw_listeners: dict[str, list[ResourceListener]]  # uri -> listeners (each page's own)
    _rw_listen: asyncio.Task[None] | None
    _rw_pending: dict[str, int]
    _rw_last: dict[str, float]
    _rw_tasks: set[asyncio.Task[None]]
    _rw_lock: asyncio.Lock

    def _init_resource_watch(self) -> None:
        self._rw_listeners = {}
        self._rw_listen = None
        self._rw_pending = {}
        self._rw_last = {}
        self._rw_tasks = set()
        self._rw_lock = asyncio.Lock()

    def watching_resources(self) -> bool:
        """Whether a page watches a resource of this connection (it is then never idle)."""
        return bool(self._rw_listeners)

    def _subscribe_declared(self) -> tuple[Any, bool] | None:
        """``(session, modern)`` when the server declares ``resources.subscribe``, else None."""
        client = self._client
        if client is None:
            return None
        session = client.session
        caps = session.server_capabilities
        if not getattr(getattr(caps, "resources", None), "subscribe", False):
            return None
        return session, session.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def watch_resource(self, uri: str, listener: ResourceListener) -> bool:
        """Tell ``listener`` when the resource at ``uri`` changes, while it watches. Returns whether
        it is followed: False when the server does not declare ``resources.subscribe``, the URI is
        too long, :data:`MAX_WATCHED_URIS` are followed already, or the server refused the
        subscription or did not answer it within :data:`ASK_TIMEOUT_S` (logged). Never raises for the
        server's faults; cancelled meanwhile, it leaves nothing followed."""
        if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_CHARS:
            return False
        async with self._rw_lock:
            declared = self._subscribe_declared()
            if declared is None:
                return False
            session, modern = declared
            if uri in self._rw_listeners:
                self._rw_listeners[uri].append(listener)
                return True
            if len(self._rw_listeners) >= MAX_WATCHED_URIS:
                logger.info("server %s: %d resources followed already; one more is not", self.origin,
                            MAX_WATCHED_URIS)
                return False
            self._rw_listeners[uri] = [listener]
            followed = False
            try:
                followed = await (self._relisten(session) if modern else self._ask("resources/subscribe", uri))
            finally:  # refused, unanswered or cancelled (the page gone meanwhile): nothing of it stays
                if not followed:
                    self._rw_listeners.pop(uri, None)
                    if modern:
                        await self._relisten(session, wait=False)  # the others' stream, without it
            return followed

    async def unwatch_resource(self, uri: str, listener: ResourceListener) -> None:
        """``listener`` no longer watches ``uri``; after the last one the server is told (a
        ``resources/unsubscribe``, or a listen stream without it). Never raises."""
        async with self._rw_lock:
            listeners = self._rw_listeners.get(uri)
            if not listeners or listener not in listeners:
                return
            listeners.remove(listener)
            if listeners:
                return
            del self._rw_listeners[uri]
            declared = self._subscribe_declared()
            if declared is None:
                return
            session, modern = declared
            if modern:
                await self._relisten(session, wait=False)  # a page leaving never waits for the server
            else:
                await self._ask("resources/unsubscribe", uri)

    async def _ask(self, method: str, uri: str) -> bool:
        try:
            await self.send(method, {"uri": uri}, f"mrtrweb-{method.rsplit('/', 1)[1]}-{uuid.uuid4().hex[:12]}",
                            timeout_s=self._ask_timeout())
        except McpCallError as exc:
            logger.info("server %s: %s failed (%s)", self.origin, method, exc.code)
            return False
        return True

    def _ask_timeout(self) -> float:
        return min(self.timeout_s, ASK_TIMEOUT_S)

    async def _relisten(self, session: Any, *, wait: bool = True) -> bool:
        """(Re)open the 2026-07-28 listen stream for the URIs watched now (none: just close it).
        Returns once the server acknowledged it (True), or it failed or did not within
        :data:`ASK_TIMEOUT_S` (False, logged); at once (True) when not ``wait``."""
        old, self._rw_listen = self._rw_listen, None
        if old is not None and not old.done():
            old.cancel()
            await asyncio.wait([old])
        if not self._rw_listeners:
            return True
        acked = asyncio.Event()
        task = self._rw_listen = asyncio.get_running_loop().create_task(
            self._listen_resources(session, sorted(self._rw_listeners), acked), name=f"mcp-listen-resources {self.origin}")
        if not wait:
            return True
        waiter = asyncio.ensure_future(acked.wait())
        try:
            await asyncio.wait([waiter, task], timeout=self._ask_timeout(), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not acked.is_set():
            logger.info("server %s: subscriptions/listen for resources not acknowledged", self.origin)
            task.cancel()
            await asyncio.wait([task])
            self._rw_listen = None
            return False
        return True

    async def _listen_resources(self, session: Any, uris: list[str], acked: asyncio.Event) -> None:
        try:
            async with listen(session, resource_subscriptions=uris) as subscription:
                if not subscription.honored.resource_subscriptions:
                    logger.info("server %s did not honour the resource subscriptions", self.origin)
                    return
                acked.set()
                async for event in subscription:
                    if isinstance(event, ResourceUpdated):
                        self._updated(event.uri)
        except asyncio.CancelledError:
            raise
        except (MCPError, SubscriptionLost, TimeoutError, RuntimeError) as exc:
            # the page still shows what it read; only the live hint is lost
            logger.info("subscriptions/listen (resources) on %s ended (%s)", self.origin, type(exc).__name__)

    def _updated(self, uri: Any) -> None:
        """The server says the resource at ``uri`` changed: tell its listeners now, or once when the
        coalescing window ends. A URI nobody watches is dropped. Never blocks the session's reader."""
        uri = str(uri)
        if uri not in self._rw_listeners:
            return
        if uri in self._rw_pending:
            self._rw_pending[uri] += 1
            return
        self._rw_pending[uri] = 1
        loop = asyncio.get_running_loop()
        delay = max(0.0, self._rw_last.get(uri, -COALESCE_S) + COALESCE_S - loop.time())
        task = loop.create_task(self._tell_updated(uri, delay), name=f"mcp-resource-updated {self.origin}")
        self._rw_tasks.add(task)
        task.add_done_callback(self._rw_tasks.discard)

    async def _tell_updated(self, uri: str, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        count = self._rw_pending.pop(uri, 1)
        self._rw_last[uri] = asyncio.get_running_loop().time()
        listeners = list(self._rw_listeners.get(uri, ()))
        logger.info("server %s says a followed resource changed (%d notification%s, %d page%s)", self.origin, count,
                    "" if count == 1 else "s", len(listeners), "" if len(listeners) == 1 else "s")
        for listener in listeners:
            try:
                await listener(uri)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 -- a failing page must not disturb the others
                logger.exception("resource listener of %s failed", self.origin)

    async def _stop_resource_watch(self) -> None:
        """On close: nothing is followed any more (the server forgets with the session)."""
        tasks = list(self._rw_tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._rw_pending.clear()
        self._rw_listeners.clear()
        listen_task, self._rw_listen = self._rw_listen, None
        if listen_task is not None and not listen_task.done():
            listen_task.cancel()
            await asyncio.wait([listen_task])
