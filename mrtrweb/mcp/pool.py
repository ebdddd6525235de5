"""The connection pool: one :class:`~mrtrweb.mcp.connection.McpConnection` per ``(user, server)``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from .connection import McpConnection

__all__ = ["ConnectionPool"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Slot:
    url: str
    connection: McpConnection
    declare: frozenset[str] = frozenset()
    auth_key: str = ""
    protocol: str = "auto"
    url_policy: Any = None

    def serves(self, url: str, declare: frozenset[str], auth_key: str, protocol: str, url_policy: Any) -> bool:
        """Whether this slot's open connection is what :meth:`ConnectionPool.get` hands out for
        these settings (else it replaces it)."""
        return (self.url == url and self.declare == declare and self.auth_key == auth_key
                and self.protocol == protocol and self.url_policy == url_policy and self.connection.is_open)


class ConnectionPool:
    """One :class:`McpConnection` per ``(user_key, server_key)``, reused across that user's operations.

    A connection is never shared between users: the key includes the user. The pool belongs to
    the event loop of its first :meth:`get` and must only be used from that loop. Connections
    idle (no request in flight) for ``idle_s`` seconds are closed by a background sweeper.

    Args:
        idle_s: idle lifetime in seconds (default 300).
        timeout_s: passed to each :class:`McpConnection`.
        factory: builds a connection (tests); default ``McpConnection(url, timeout_s=timeout_s)``.
    """

    def __init__(
        self,
        *,
        idle_s: float = 300.0,
        timeout_s: float = 30.0,
        factory: Callable[[str], McpConnection] | None = None,
    ) -> None:
        if not idle_s > 0:
            raise ValueError("idle_s must be positive")
        self.idle_s = float(idle_s)
        self.timeout_s = float(timeout_s)
        self._factory = factory or (lambda url, **kw: McpConnection(url, timeout_s=self.timeout_s, **kw))
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self._releasing: set[asyncio.Task[None]] = set()
        self.released = 0  # connections closed by release() (the benchmark and tests read it)

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("ConnectionPool used from a different event loop than the one it belongs to")

    async def get(self, user_key: str, server_key: str, url: str, *, declare: Collection[str] = (),
                  auth: Any = None, auth_key: str = "", outbound: Any = None, protocol: str = "auto",
                  on_list_changed: Any = None, session_roots: Any = None, url_policy: Any = None) -> McpConnection:
        """The open connection for this user and server, opening (or reopening) it if needed.

        A connection whose URL differs from ``url`` (the server was re-configured), that declares
        other capabilities than ``declare`` (see :class:`McpConnection`), speaks another ``protocol``
        setting (:data:`~mrtrweb.mcp.connection.PROTOCOLS`), whose ``auth_key`` differs (the
        credentials it was built with changed: a new auth mode, secret or client), that was opened
        under another ``url_policy`` (:class:`~mrtrweb.mcp.url_policy.UrlPolicy` or ``None``: the
        server's policy flag or the deployer's policy changed) or that died is
        closed and replaced: callers that declare differently use different ``server_key`` values.
        ``auth`` / ``outbound`` / ``on_list_changed`` / ``session_roots`` go to a newly opened
        connection only (an ``auth`` that reads its tokens from storage per request stays current
        on a kept one, and so does a ``session_roots`` that reads the server's row when asked).
        Concurrent calls for one key open at most one connection.

        Raises:
            McpCallError: opening failed (``transport_error``, ``timeout``, ``authorization_required``...).
            ValueError: ``url`` is not an http(s) URL.
            RuntimeError: the pool was closed, or is used from another event loop.
        """
        self._check_loop()
        if self._closed:
            raise RuntimeError("ConnectionPool is closed")
        key = (str(user_key), str(server_key))
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if self._closed:
                raise RuntimeError("ConnectionPool is closed")
            slot = self._slots.get(key)
            wanted = frozenset(declare)
            if slot is not None and slot.serves(url, wanted, auth_key, protocol, url_policy):
                slot.connection._last_activity = time.monotonic()  # a hand-out counts as activity
                return slot.connection
            if slot is not None:
                del self._slots[key]
                await slot.connection.close()
            kwargs: dict[str, Any] = {"declare": wanted} if wanted else {}
            if auth is not None:
                kwargs["auth"] = auth
            if outbound is not None:
                kwargs["outbound"] = outbound
            if protocol != "auto":
                kwargs["protocol"] = protocol
            if on_list_changed is not None:
                kwargs["on_list_changed"] = on_list_changed
            if session_roots is not None:
                kwargs["session_roots"] = session_roots
            if url_policy is not None:
                kwargs["url_policy"] = url_policy
            connection = self._factory(url, **kwargs)
            await connection.open()
            self._slots[key] = _Slot(url, connection, wanted, auth_key, protocol, url_policy)
            self._ensure_sweeper()
            return connection

    def matching_connection(self, user_key: str, server_key: str, url: str, *, declare: Collection[str] = (),
                            auth_key: str = "", protocol: str = "auto", url_policy: Any = None) -> McpConnection | None:
        """The open connection :meth:`get` would hand out for these settings without replacing it,
        or None (no wait, no change)."""
        slot = self._slots.get((str(user_key), str(server_key)))
        if slot is None or not slot.serves(url, frozenset(declare), auth_key, protocol, url_policy):
            return None
        return slot.connection

    def open_connection(self, user_key: str, server_key: str) -> McpConnection | None:
        """The open connection this pool holds for this user and server, or None (no wait, no
        change: what :meth:`get` would hand out unless the server's settings changed)."""
        slot = self._slots.get((str(user_key), str(server_key)))
        return slot.connection if slot is not None and slot.connection.is_open else None

    async def close(self, user_key: str, server_key: str) -> None:
        """Close and forget the connection for this user and server, if any."""
        key = (str(user_key), str(server_key))
        slot = self._slots.pop(key, None)
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            del self._locks[key]  # short-lived keys (one per operation) must not pile up
        if slot is not None:
            await slot.connection.close()

    def release(self, user_key: str, server_key: str, connection: McpConnection, *, after_s: float = 5.0,
                stateless: Collection[str] = ()) -> bool:
        """Close ``connection`` once it has been idle ``after_s`` seconds, if it is still the pooled
        one for this user and server -- an MCP session that nothing needs while a round waits for a
        person (the retry carries ``requestState``; a new session is opened for it).

        Only a connection whose negotiated protocol version is one of ``stateless`` is released
        (never a 2025-11-25 session, where a server's request is in flight on the session), and only
        if, ``after_s`` seconds later, it is still idle: no request in flight, not handed out by
        :meth:`get` since (a hand-out counts as activity), no ``subscriptions/listen`` watch open
        (a server page watching the listings), no :meth:`get` (re)opening the key. Otherwise it
        stays, under the pool's idle rule (``idle_s``). Never raises; returns whether a release
        was scheduled (``False``: not a stateless connection, or the pool is closed).
        """
        if self._closed or connection.protocol_version not in stateless or not after_s > 0:
            return False
        key = (str(user_key), str(server_key))
        loop = asyncio.get_running_loop()
        loop.call_later(after_s, self._release_now, key, connection, time.monotonic())
        return True

    def _release_now(self, key: tuple[str, str], connection: McpConnection, asked: float) -> None:
        """The release asked at ``asked`` (monotonic seconds), unless anything used the connection
        since then -- judged by when, not by how long ago: a timer that fires late must not turn a
        hand-out right after the ask into idleness."""
        slot = self._slots.get(key)
        lock = self._locks.get(key)
        watch = getattr(connection, "_watch", None)
        used_since = connection.idle_for() < time.monotonic() - asked  # (0 while a request is in flight)
        if (self._closed or slot is None or slot.connection is not connection or connection.in_flight
                or used_since or (lock is not None and lock.locked())
                or (watch is not None and not watch.done())):
            return
        del self._slots[key]  # synchronously: a get() from here on opens a new connection
        if lock is not None:
            self._locks.pop(key, None)
        self.released += 1
        task = asyncio.get_running_loop().create_task(connection.close(), name="mcp-pool-release")
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def close_all(self) -> None:
        """Close every connection and stop the sweeper. The pool cannot be used afterwards."""
        self._closed = True
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.wait([sweeper])
        slots = list(self._slots.values())
        self._slots.clear()
        await asyncio.gather(*(slot.connection.close() for slot in slots), *list(self._releasing),
                             return_exceptions=True)

    async def sweep(self) -> int:
        """Close connections idle for ``idle_s`` or dead; return how many were closed."""
        stale = [
            key
            for key, slot in self._slots.items()
            if not slot.connection.is_open
            or (slot.connection.in_flight == 0 and slot.connection.idle_for() >= self.idle_s)
        ]
        closed = 0
        for key in stale:
            lock = self._locks.get(key)
            if lock is not None and lock.locked():
                continue  # a get() is (re)opening it right now
            slot = self._slots.pop(key, None)
            if slot is None:
                continue
            await slot.connection.close()
            self._locks.pop(key, None)
            closed += 1
        return closed

    def __len__(self) -> int:
        return len(self._slots)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="mcp-pool-sweeper")

    async def _sweep_forever(self) -> None:
        period = min(max(self.idle_s / 4, 0.05), 30.0)
        while self._slots:
            await asyncio.sleep(period)
            try:
                await self.sweep()
            except Exception:  # pragma: no cover - close() does not raise; keep sweeping regardless
                logger.exception("MCP connection pool sweep failed")
