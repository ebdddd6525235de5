"""Service outages: which exceptions are one, how a request refuses for one, and logging them
without flooding the log.

An outage is a backing service that cannot be reached right now -- the database (PostgreSQL,
SQLite locked for too long), the binding store, Redis (the cache or the channel layer), or a
network timeout on the way to one of them. None of them may turn into a 500, a traceback in the
log or an exception out of the ASGI application (issue 14):

* :func:`kind` names the service an exception says is down (``"database"``, ``"round store"``,
  ``"cache"``...), or ``None`` for anything else (a bug stays a bug: it is not swallowed);
* :class:`ServiceUnavailable` is raised by mrtrweb where an action cannot be done safely while a
  service is down (a Stop that cannot be delivered, a sign-in whose attempts cannot be counted);
  :class:`mrtrweb.middleware.FailClosedMiddleware` answers it, like every outage :func:`kind`
  recognises, with the 503 page;
* :class:`LogLimiter` writes one WARNING (or INFO) line per key and period (the next one says how many it
  held back), so a push failing five times a second during an outage logs one line, not a flood.
"""

from __future__ import annotations

import asyncio
import os

from ..mcp.loglimit import LogLimiter  # Django-free, so the MCP client below uses it too

__all__ = ["ServiceUnavailable", "kind", "LogLimiter"]


class ServiceUnavailable(Exception):
    """An action refused because a service it needs is down (HTTP 503, nothing done).

    Args:
        what: the service, as the 503 page names it ("cache", "database"...).
        message: what the person reads on the page (one or two plain sentences), or "" for the
            page's standard text ("Nothing was sent to any MCP server...").
    """

    def __init__(self, what: str, message: str = "") -> None:
        super().__init__(f"{what} unavailable")
        self.what = what
        self.message = message


def _redis_errors() -> tuple[type[BaseException], ...]:
    """Redis errors that mean "cannot be reached or cannot serve now" (not a bug such as a
    WRONGTYPE reply): connection and timeout errors (loading, too many connections included),
    a read-only replica, out of memory, a cluster that is down."""
    try:
        from redis import exceptions as e
    except ImportError:  # a project without redis-py: no Redis errors to recognise
        return ()
    errors: tuple[type[BaseException], ...] = (e.ConnectionError, e.TimeoutError, e.ReadOnlyError,
                                               e.OutOfMemoryError, e.ClusterDownError, e.TryAgainError)
    try:
        from django_redis.exceptions import ConnectionInterrupted
    except ImportError:
        return errors
    return (*errors, ConnectionInterrupted)


def kind(exc: BaseException, *, redis: str = "cache") -> str | None:
    """The service ``exc`` says is unreachable, or ``None`` when it is no outage.

    Args:
        exc: any exception.
        redis: the name of the Redis service where it came from (``"cache"`` in a request,
            ``"channel layer"`` in a WebSocket consumer).

    Returns:
        ``"round store"`` (:class:`~mrtrweb.gate.StoreUnavailable`), ``"database"`` (any
        :class:`django.db.Error`), ``redis`` (a redis-py connection, timeout, read-only, out of
        memory or cluster-down error, django-redis' ``ConnectionInterrupted``), ``ServiceUnavailable.what``, ``"network"`` (a connection
        refused, reset or timed out: :class:`ConnectionError`, :class:`TimeoutError`), or None.
    """
    from django.db import Error as DatabaseError

    from ..gate import StoreUnavailable

    if isinstance(exc, ServiceUnavailable):
        return exc.what
    if isinstance(exc, StoreUnavailable):
        return "round store"
    if isinstance(exc, DatabaseError):
        return "database"
    if isinstance(exc, _redis_errors()):
        return redis
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return "network"
    if isinstance(exc, RuntimeError) and _raised_in_redis_connection(exc):
        # a command written on a connection whose transport the event loop had just closed (the
        # server restarted under it): uvloop's "unable to perform operation on <TCPTransport
        # closed=True ...>; the handler is closed", raised inside redis-py's connection
        return redis
    return None


#: redis-py's connection modules: a RuntimeError raised inside them is a connection that broke
_REDIS_CONNECTION_FILES = (os.path.join("redis", "asyncio", "connection.py"), os.path.join("redis", "connection.py"))


def _raised_in_redis_connection(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(_REDIS_CONNECTION_FILES):
            return True
        tb = tb.tb_next
    return False
