"""Watching the channel layer under this worker's WebSockets: a restart that emptied it closes them.

A Redis restart without persistence empties the channel layer: every group membership is gone,
so a WebSocket that did not notice -- redis-py reconnects and retries by itself, and only the one
socket whose blocking read was cut sees an error -- stays open but deaf: no push reaches it
again, and its page believes it is live. So each worker process keeps, per event loop, the set
of its open sockets and, while there is one, a task that every :data:`WATCH_S` seconds reads a
marker key it shares with the other workers in each channel-layer Redis (``<layer prefix>
mrtrweb-epoch``, a random value set once, no expiry). When the marker is gone or changed (Redis
restarted empty, flushed, failed over) or the read fails (Redis unreachable), every socket of the
process is closed with code 1011: their pages say "Live updates paused", reconnect with back-off,
join their groups again and re-read their panels (:mod:`mrtrweb.live.consumers`). A socket that saw
the outage itself does the same at once (:func:`outage_seen`). One WARNING line per event and
process; each socket's own close is logged at DEBUG.

Only channels-redis' ``RedisChannelLayer`` (which has groups in Redis) is watched; the in-memory
layer cannot lose its groups while the process lives, and other layers are left alone.

Cost: one ``GET`` per channel-layer host every :data:`WATCH_S` seconds per worker process, only
while it has open sockets.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from typing import Any

logger = logging.getLogger("mrtrweb.consumers")

#: seconds between two reads of the marker (a restart is noticed within about this long)
WATCH_S = 2.0
#: the marker's key, after the layer's own prefix
MARKER = "mrtrweb-epoch"


class _Watch:
    """The open sockets of one event loop, and the task reading the layer's markers."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.sockets: set[Any] = set()
        self.task: asyncio.Task | None = None
        self.markers: dict[int, bytes] = {}  # host index -> the marker value seen last
        #: bumped whenever the markers are forgotten (:meth:`forget`): a check that was reading
        #: when it happened judges nothing (its reads may predate the event; the next one adopts)
        self.generation = 0

    def forget(self) -> None:
        """Forget the markers seen: the next check adopts what is there then."""
        self.markers = {}
        self.generation += 1

    def add(self, consumer: Any) -> None:
        self.sockets.add(consumer)
        if self.task is None or self.task.done():
            self.forget()  # after a quiet time: adopt what is there now
            self.task = asyncio.get_running_loop().create_task(self._run(), name="mrtrweb-layer-watch")

    async def _run(self) -> None:
        while self.sockets:
            try:
                lost = await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 -- never let the watch die on a surprise
                lost = f"unreadable ({exc.__class__.__name__})"
            if lost:
                await self.close_all(lost)
            await asyncio.sleep(WATCH_S)

    async def check(self) -> str:
        """``""`` while every host keeps its marker; else why the layer's groups may be gone. A
        check during which the markers were forgotten (a socket saw the outage meanwhile and closed
        the others) judges nothing: what it read may be from before the event."""
        generation = self.generation
        for index in range(self.layer.ring_size):
            conn = self.layer.connection(index)
            key = f"{self.layer.prefix}{MARKER}"
            try:
                value = await asyncio.wait_for(conn.get(key), WATCH_S)
                if value is None:
                    await asyncio.wait_for(conn.set(key, uuid.uuid4().hex, nx=True), WATCH_S)
                    value = await asyncio.wait_for(conn.get(key), WATCH_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 -- unreachable: its pushes cannot arrive either
                # every socket is closed for it; whoever joins after it is back joins the layer
                # as it is then: adopt its markers afresh
                if generation != self.generation:
                    return ""  # already handled by the socket that saw it
                self.forget()
                return f"unavailable ({exc.__class__.__name__})"
            if generation != self.generation:
                return ""
            seen = self.markers.get(index)
            self.markers[index] = value
            if seen is not None and value != seen:
                return "restarted or emptied (its groups are gone)"
        return ""

    async def close_all(self, why: str, *, but: Any = None) -> None:
        """Close every open socket of this loop (but ``but``) with code 1011."""
        victims = [c for c in self.sockets if c is not but]
        self.sockets.difference_update(victims)
        if victims:
            logger.warning("the channel layer is %s: closing %d WebSocket(s) of this worker (code 1011); their "
                           "pages reconnect", why, len(victims))
        for consumer in victims:
            await consumer.close_for_outage()


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()


def _watch_for(layer: Any) -> _Watch | None:
    if not (hasattr(layer, "connection") and isinstance(getattr(layer, "ring_size", None), int)
            and isinstance(getattr(layer, "prefix", None), str)):
        return None  # not channels-redis' RedisChannelLayer: nothing to watch
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None or watch.layer is not layer:
        watch = _watches[loop] = _Watch(layer)
    return watch


def watch(consumer: Any) -> None:
    """Count ``consumer`` (accepted, in its groups) among the sockets the watch closes; it must
    have ``channel_layer`` and ``async close_for_outage()``."""
    w = _watch_for(consumer.channel_layer)
    if w is not None:
        w.add(consumer)


def unwatch(consumer: Any) -> None:
    """``consumer`` closed: forget it."""
    w = _watches.get(asyncio.get_running_loop())
    if w is not None:
        w.sockets.discard(consumer)


async def outage_seen(consumer: Any, why: str) -> None:
    """``consumer`` met a channel-layer outage: the other sockets of this loop are closed too (their
    groups may be gone with it, though redis-py's retries hide that from them)."""
    w = _watches.get(asyncio.get_running_loop())
    if w is not None:
        w.sockets.discard(consumer)
        w.forget()  # as after an unreadable marker (see check)
        await w.close_all(why, but=consumer)
