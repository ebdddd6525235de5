"""This worker process's lease (:class:`~mrtrweb.models.WorkerLease`), as :mod:`mrtrweb.workers`
judges workers by it.

* :data:`WORKER_ID` -- ``host:pid:random``, the id an operation names while this worker drives it.
* :func:`renew` -- write the lease with the **database's** clock (``Now()``), creating it when
  absent; run in a thread of its own (:func:`lease_call`) on a connection of its own when the
  project's database uses a pool, so that neither a busy sync thread nor a pool backing off after
  an outage delays it.
* :func:`ensure_lease` -- before this worker names itself on an operation.
* :func:`release` -- on exit, after the drain settled this worker's operations.
* :func:`trusted` -- whether this worker may judge others: its own last :data:`TRUSTED_RENEWALS`
  renewals of the heartbeat loop succeeded in a row, the last one recently.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import logging
import os
import socket
import time
import uuid
from typing import Any, Callable

from . import conf

logger = logging.getLogger("mrtrweb.workers")

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
#: a worker's reaper judges others only after this many of its own renewals succeeded in a row
TRUSTED_RENEWALS = 3


class _State:
    """This process's view of its own lease."""

    def __init__(self) -> None:
        self.streak = 0  #: renewals of the loop that succeeded in a row
        self.last_ok = -1e9  #: monotonic time of the last one
        self.written = False  #: the lease row exists (written by this process at least once)
        self.failing_since: float | None = None  #: monotonic time the renewals started failing
        self.warned: dict[str, float] = {}  #: what failed -> monotonic time of its last warning


_state = _State()
#: the lease is renewed in a thread of its own, with its own database connection: a slow query
#: or a blocked sync thread elsewhere in the worker never delays the renewal
_lease_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mrtrweb-lease")


def period() -> float:
    """``MRTRWEB["HEARTBEAT_S"]``: seconds between two renewals (and reaper/expiry rounds)."""
    return float(conf.get("HEARTBEAT_S"))


#: the alias of the lease thread's own connection when the project's database uses a pool
LEASE_ALIAS = "mrtrweb-lease"


def _lease_db() -> str:
    """The database alias renewals use (in the lease thread).

    With a connection pool (``OPTIONS["pool"]``, the production settings) the lease gets a
    connection of its own outside the pool: after an outage a pool waits longer and longer
    between reconnection attempts (psycopg_pool: 1, 2, 4... s), and a live worker whose pool is
    still waiting must not look dead to a worker whose pool came back first. That connection is
    persistent, bounded by ``connect_timeout`` / ``tcp_user_timeout`` (PostgreSQL), and closed on
    any error. Without a pool: the project's own connection (``default``, routed for writes)."""
    from django.db import connections, router
    from django.db.utils import ConnectionDoesNotExist, load_backend

    from .models import WorkerLease

    alias = router.db_for_write(WorkerLease)
    base = connections.settings[alias]
    if not (base.get("OPTIONS") or {}).get("pool"):
        return alias
    try:
        connections[LEASE_ALIAS]
    except ConnectionDoesNotExist:  # once per thread: thread-local, like every Django connection
        settings_dict = copy.deepcopy(connections[alias].settings_dict)
        options = settings_dict.setdefault("OPTIONS", {})
        options.pop("pool", None)
        if settings_dict["ENGINE"].endswith("postgresql"):
            bound = max(1, int(period() * 2))
            options.setdefault("connect_timeout", bound)
            options.setdefault("tcp_user_timeout", bound * 1000)
        settings_dict.update(CONN_MAX_AGE=None, CONN_HEALTH_CHECKS=False)
        connections[LEASE_ALIAS] = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, LEASE_ALIAS)
    return LEASE_ALIAS


def _close_lease_db() -> None:
    from django.db import connections
    from django.db.utils import ConnectionDoesNotExist

    try:
        connections[LEASE_ALIAS].close()
    except ConnectionDoesNotExist:
        pass
    except Exception:  # noqa: BLE001 -- a broken connection: dropped either way
        pass


def _in_lease_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (ORM code); on an error its connection is closed (a broken one is never
    reused), and the thread's pooled connections are given back afterwards."""
    from django.db import connections

    try:
        return fn()
    except BaseException:
        _close_lease_db()
        raise
    finally:
        connections.close_all()  # the project's aliases only (the lease's own stays open)


async def lease_call(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (sync, ORM) in the lease thread."""
    return await asyncio.get_running_loop().run_in_executor(_lease_thread, _in_lease_thread, fn)


def renew() -> None:
    """Renew this worker's lease with the database's clock, creating it if it is absent (sync).
    ``draining`` is written as :func:`mrtrweb.drain.is_draining` says.

    Raises:
        django.db.DatabaseError: the database is unreachable (the caller logs it).
    """
    from django.db.models.functions import Now

    from .drain import is_draining
    from .models import WorkerLease

    draining = is_draining()
    leases = WorkerLease.objects.using(_lease_db())
    if not leases.filter(pk=WORKER_ID).update(beat_at=Now(), draining=draining):
        # absent: never written, or forgotten by another worker after a long partition. Only
        # the lease thread writes this row, so no other insert of it can race this one.
        leases.create(worker_id=WORKER_ID, beat_at=Now(), started_at=Now(), draining=draining,
                                   host=socket.gethostname()[:255], pid=os.getpid())
    _state.written = True


def release() -> bool:
    """Delete this worker's lease (sync; when it exits after settling its operations). Returns
    whether the row was deleted; a database error is logged and False."""
    from .models import WorkerLease

    try:
        WorkerLease.objects.using(_lease_db()).filter(pk=WORKER_ID).delete()
    except Exception as exc:  # noqa: BLE001 -- then it goes stale, and other workers judge by that
        logger.warning("lease of worker %s not deleted (%s); it goes stale", WORKER_ID, exc.__class__.__name__)
        return False
    _state.written = False
    _close_lease_db()
    return True


async def ensure_lease() -> None:
    """Make sure this worker's lease exists before it names itself in an operation.

    Raises:
        django.db.DatabaseError: the lease could not be written (nothing may name this worker).
    """
    if not _state.written:
        await lease_call(renew)


def trusted() -> bool:
    """Whether this worker may judge other workers: its own last :data:`TRUSTED_RENEWALS`
    renewals succeeded in a row, the last one at most two periods ago (so the database is
    reachable, has been for long enough that live workers renewed their leases after any outage,
    and this worker's own loop is not stuck)."""
    recent = time.monotonic() - _state.last_ok <= period() * 2
    return _state.streak >= TRUSTED_RENEWALS and recent


def note_failure(what: str, exc: BaseException) -> None:
    """One warning line per kind of failure, at most one a minute while it goes on."""
    now = time.monotonic()
    if now - _state.warned.get(what, -1e9) >= 60.0:
        _state.warned[what] = now
        logger.warning("worker %s: %s failed (%s); retried every %ss", WORKER_ID, what, exc.__class__.__name__,
                       period())


def renewal_failed(exc: BaseException) -> None:
    """A renewal failed: the streak starts again from nothing (logged, rate-limited)."""
    _state.streak = 0
    if _state.failing_since is None:
        _state.failing_since = time.monotonic()
    note_failure("lease renewal", exc)


def renewal_succeeded() -> None:
    """A renewal of the heartbeat loop succeeded: one more in the streak."""
    _state.streak += 1
    _state.last_ok = time.monotonic()
    if _state.failing_since is not None:
        logger.warning("worker %s: lease renewed again after %.0fs of failures", WORKER_ID,
                       time.monotonic() - _state.failing_since)
        _state.failing_since = None
        _state.warned.pop("lease renewal", None)


def reset() -> None:
    """Forget this process's lease state (tests)."""
    _state.__init__()
