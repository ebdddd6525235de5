"""At most :data:`LIMIT` completion asks per person, and :data:`SERVER_LIMIT` per server (all its
people together), every :data:`WINDOW_S` seconds (a fixed window in the shared cache, so every
worker counts the same asks). The page asks at most once per pause
in typing (300 ms), so a person typing never meets it; a script hammering the endpoint does. A
cache that cannot be reached refuses (logged once a minute): no suggestion is better than an
unbounded stream of requests to a server."""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from django.core.cache import caches

from ..mcp.loglimit import LogLimiter

__all__ = ["LIMIT", "SERVER_LIMIT", "WINDOW_S", "allowed"]

logger = logging.getLogger("mrtrweb.completions")
_log = LogLimiter(logger, 60.0)

#: asks per person and window
LIMIT: Final = 30
#: asks per server and window, all its people together
SERVER_LIMIT: Final = 120
#: the window (seconds)
WINDOW_S: Final = 10


def allowed(user_id: Any, server_id: Any = None) -> bool:
    """Sync: count one ask of ``user_id`` (of ``server_id``); whether it is within both limits:
    :data:`LIMIT` for the person, :data:`SERVER_LIMIT` for the server, all its people together
    (a tenant's many people must not turn into a flood of one server)."""
    window = int(time.time() // WINDOW_S)
    try:
        if not _within(f"mrtrweb-complete:{user_id}:{window}", LIMIT):
            return False
        return server_id is None or _within(f"mrtrweb-complete-server:{server_id}:{window}", SERVER_LIMIT)
    except Exception as exc:  # noqa: BLE001 -- any cache failure: refuse, never guess unthrottled
        _log.warning("cache", "completion asks refused: the cache failed (%s)", type(exc).__name__)
        return False


def _within(key: str, limit: int) -> bool:
    cache = caches["default"]
    try:
        if cache.add(key, 1, WINDOW_S * 2):
            return limit >= 1
        return cache.incr(key) <= limit
    except ValueError:  # expired between add and incr: a new window
        return True
