"""The round's thread hops (issue 30): where each phase's sync work runs (the database, the gate,
the audit), one hop per phase.

By default (``MRTRWEB["ROUND_THREADS"] = 0``) a hop goes to asgiref's one sync thread
(``thread_sensitive=True``), as the rest of the process's ``sync_to_async`` work: the phases of
concurrent rounds queue behind each other there. On PostgreSQL, ``ROUND_THREADS = N`` (1 or more)
runs them on N threads of their own, each hop on the least busy one. Each of those threads keeps
its own database connection (Django's are per thread; with a pool, one of the pool's for as long
as the thread lives): a pool's ``max_size`` must then exceed N + 1 + the requests a worker serves
at once, else a request holding a pool connection while it awaits a phase whose thread waits for
one fails after the pool's timeout (measured: twenty people answering through two workers with the
production pool of 10 and N = 4 got 503s; tests/audit/test_audit_topology.py). A phase's work checks
its thread's connection as before (:func:`.runtime.discard_unusable`,
:func:`.runtime.leaves_connections_checked`); :func:`close_connections` closes them (a test run's
end). On SQLite (one writer at a time, its in-memory test database shared between threads) the
hops always stay on asgiref's thread.

What a hop costs itself (handing the work to a thread and the result back) is 0.1-0.2 ms
(``./dev bench``, vs_sdk's hop table); a phase's time is the work inside it.

May import: django, asgiref, mrtrweb.conf.
"""

from __future__ import annotations

import concurrent.futures
import functools
import sys
import threading
import types
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from .. import conf

T = TypeVar("T")

_lock = threading.Lock()
#: the round's threads: one single-thread executor each (a hop can be sent to a given thread, and
#: each thread's connections closed by :func:`close_connections`); created on first use
_executors: list[concurrent.futures.ThreadPoolExecutor] = []
#: hops on their way or running, per executor (read and written on event loops' threads, under _lock)
_busy: list[int] = []


def _own_threads() -> bool:
    """Whether the round's hops run on threads of their own: the database is PostgreSQL and
    ``ROUND_THREADS`` is at least 1."""
    from django.db import connections, router

    from ..models import Operation

    return int(conf.get("ROUND_THREADS")) >= 1 and connections[router.db_for_write(Operation)].vendor == "postgresql"


def _pick() -> int:
    """The index of the least busy of the round's threads (created up to ``ROUND_THREADS``), its
    count raised."""
    with _lock:
        wanted = int(conf.get("ROUND_THREADS"))
        while len(_executors) < wanted:
            _executors.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"mrtrweb-round-{len(_executors)}"))
            _busy.append(0)
        i = min(range(wanted), key=_busy.__getitem__)
        _busy[i] += 1
        return i


def _done(i: int) -> None:
    with _lock:
        _busy[i] -= 1


#: module-level phase function -> its hop (built once: asgiref's wrapper and ours cost ~25 Python calls
#: to build, five times a round); closures and bound methods are not kept (that would keep them alive)
_hops: dict[Callable[..., Any], Callable[..., Awaitable[Any]]] = {}


def round_hop(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """``fn`` (a phase's sync work) as a coroutine function that runs it in one thread hop: on
    the least busy of the round's threads (PostgreSQL), else on asgiref's one sync thread."""
    known = _hops.get(fn) if isinstance(fn, types.FunctionType) else None
    if known is not None:
        return known  # type: ignore[return-value]
    on_sync_thread = sync_to_async(fn)

    @functools.wraps(fn)
    async def hop(*args: Any, **kwargs: Any) -> T:
        if not _own_threads():
            return await on_sync_thread(*args, **kwargs)
        i = _pick()
        try:
            return await sync_to_async(fn, thread_sensitive=False, executor=_executors[i])(*args, **kwargs)
        finally:
            _done(i)

    if _module_level(fn):  # lives as long as its module
        _hops[fn] = hop
    return hop


def _module_level(fn: Any) -> bool:
    """Whether ``fn`` is the function its module holds under its qualified name (a module-level
    function, or a module-level decorated one): only those are kept in :data:`_hops`. A wrapper
    made per call (``functools.wraps`` copies the name it wraps), a closure or a method is not."""
    if not isinstance(fn, types.FunctionType) or "<locals>" in fn.__qualname__:
        return False
    found: Any = sys.modules.get(fn.__module__)
    for part in fn.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is fn


def close_connections() -> None:
    """Close the database connections of every round thread (sync; each in its own thread, after
    the hops already given to it). For a test run's end (before its database is dropped) and a
    worker's drain."""
    from django.db import connections

    with _lock:
        executors = list(_executors)
    for executor in executors:
        executor.submit(connections.close_all).result()
