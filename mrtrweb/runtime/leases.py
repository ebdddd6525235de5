"""This worker process's lease (:class:`~mrtrweb.models.WorkerLease`), as :mod:`mrtrweb.runtime.workers`
judges workers by it.

* :data:`WORKER_ID` -- ``host:pid:random``, the id an operation names while this worker drives it.
* :func:`renew` -- write the lease with the **database's** clock (``Now()``), creating it when
  absent; every period in a thread of its own (:class:`_LeaseThread`, :func:`keep_renewing`),
  on a connection of its own when the project's database uses a pool, so that neither a busy
  event loop or sync thread nor a pool backing off after an outage delays it.
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
import queue
import socket
import threading
import time
import uuid
from typing import Any, Callable

from .. import conf

logger = logging.getLogger("mrtrweb.workers")


def _new_worker_id() -> str:
    """``host:pid:random`` for this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


#: this worker's id (a forked child gets one of its own: :func:`_after_fork_in_child`)
WORKER_ID = _new_worker_id()
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


class _LeaseThread:
    """The one thread of the process that writes its lease: it runs the jobs of
    :func:`lease_call` one at a time and, while :attr:`keep_renewing` says so, renews the lease
    every period on a fixed schedule of its own. Neither a busy event loop nor a busy sync thread
    (a burst of requests, a slow reaper) delays a renewal: only a dead process, or a database that
    does not answer, stops them -- the evidence :mod:`mrtrweb.runtime.workers` judges by. (A process whose
    event loop hangs keeps its lease: the liveness probe, ``/healthz``, served by that loop, is
    what finds it.)"""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        #: whether to renew (set by mrtrweb.runtime.workers: while a heartbeat loop of this process runs)
        self.keep_renewing: Callable[[], bool] = lambda: False

    def _ensure(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="mrtrweb-lease", daemon=True)
                self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run ``fn`` in the thread; its future."""
        self._ensure()
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fn, future))
        return future

    def running(self) -> bool:
        """Whether the thread is alive (a fork or a crash leaves none: :meth:`_ensure` starts one)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def wake(self) -> None:
        """Look at :attr:`keep_renewing` again now (renewals start or stop)."""
        self._ensure()
        self._jobs.put(None)

    def _run(self) -> None:
        due: float | None = None
        while True:
            if not self.keep_renewing():
                due = None
            else:  # (never further than one period away, should the period change)
                due = min(due if due is not None else float("inf"), time.monotonic() + period())
            try:  # not renewing: look at keep_renewing again every period anyway
                job = self._jobs.get(timeout=period() if due is None else max(0.0, due - time.monotonic()))
            except queue.Empty:
                if due is not None and self.keep_renewing():  # a renewal is due
                    self._renew()
                    due = max(due + period(), time.monotonic())  # late: once at once, then on time
                continue
            if job is None:
                continue
            fn, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(_in_lease_thread(fn))
                except BaseException as exc:  # noqa: BLE001 -- handed to the caller
                    future.set_exception(exc)

    @staticmethod
    def _renew() -> None:
        try:
            _in_lease_thread(renew)
        except Exception as exc:  # noqa: BLE001 -- the thread must survive outages
            renewal_failed(exc)
        else:
            renewal_succeeded()


_lease_thread = _LeaseThread()


def _after_fork_in_child() -> None:
    """A process forked after this module was imported (gunicorn ``--preload``, a fork-based
    process pool) is another worker: a new :data:`WORKER_ID` (:mod:`mrtrweb.runtime.workers` holds a
    copy, renewed by its own fork hook), no lease written yet, no renewal streak, a lease thread of its own (the
    parent's did not survive the fork; its lock and queue are not reused). Otherwise siblings
    would renew one lease -- a killed sibling's calls never reaped -- and one sibling's drain would
    mark the other's calls stopped."""
    global WORKER_ID
    WORKER_ID = _new_worker_id()
    _state.__init__()
    _lease_thread.__init__()
    # mrtrweb.runtime.workers' own fork hook (registered after this one) copies the new id and forgets
    # the parent's heartbeats


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


#: set once this worker process drains (:mod:`mrtrweb.runtime.drain`): its lease says so, new operations are refused
_draining = threading.Event()


def is_draining() -> bool:
    """Whether this worker process is draining (it will exit once its calls have finished)."""
    return _draining.is_set()


def begin_draining() -> None:
    """Mark this worker as draining (idempotent)."""
    _draining.set()


def end_draining() -> None:
    """Forget the flag (a new start-up; tests)."""
    _draining.clear()


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

    from ..models import WorkerLease

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
    """Run ``fn`` (sync, ORM) in the lease thread; its result (or its exception)."""
    return await asyncio.wrap_future(_lease_thread.submit(fn))


def keep_renewing(predicate: Callable[[], bool]) -> None:
    """Renew the lease every period while ``predicate()`` is true (checked before each renewal)."""
    _lease_thread.keep_renewing = predicate
    _lease_thread.wake()


def renewing_with(predicate: Callable[[], bool]) -> bool:
    """Whether the lease thread runs and already renews while ``predicate()`` is true: then
    :func:`keep_renewing` with it would change nothing (and wake the thread for nothing)."""
    return _lease_thread.keep_renewing is predicate and _lease_thread.running()


def renew() -> None:
    """Renew this worker's lease with the database's clock, creating it if it is absent (sync).
    ``draining`` is written as :func:`is_draining` says.

    Raises:
        django.db.DatabaseError: the database is unreachable (the caller logs it).
    """
    from django.db.models.functions import Now

    from ..models import WorkerLease

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
    from ..models import WorkerLease

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
        _check_pool()


def _check_pool() -> None:
    """The database answers again after renewals failed: the idle connections of the project's pool
    are tested at once (:func:`mrtrweb.prepared.check_pool`, in its own thread: the lease thread --
    or the event loop, where a renewal runs there -- does not wait for it), so that a request does
    not meet the ones the outage broke one by one (psycopg_pool waits 1, 2, 4... s between two
    failed checks of one ``getconn``). Without a pool: nothing."""
    from django.db import connections, router

    from .. import prepared
    from ..models import WorkerLease

    prepared.check_pool(connections[router.db_for_write(WorkerLease)], wait_s=0)


def reset() -> None:
    """Forget this process's lease state (tests)."""
    _state.__init__()
