"""Workers that come and go: leases in the database, and the reaper that judges a worker dead.

Each ASGI worker process has an id (:data:`WORKER_ID`, ``host:pid:random``) and a lease, a
:class:`~mrtrweb.models.WorkerLease` row renewed every ``MRTRWEB["HEARTBEAT_S"]`` seconds with
the **database's** clock (``Now()``: hosts drift, the database is the one clock every worker
shares) by a thread of its own (:mod:`mrtrweb.runtime.leases`), while this module's heartbeat loop runs
on the event loop; the loop does the period's duties (reaper, expiry sweep). The lease is
written before the worker names itself in ``Operation.worker``, and ``Operation.worker`` is set
only while a worker drives a call (sends a request, waits for its
result, sends a state-only retry) or holds a legacy (2025-11-25) server's call open for the
person; it is cleared when an MRTR round is handed to the person and when the operation ends.

**A worker is judged dead only on evidence** (:func:`judged_dead`):

* its lease is present and was not renewed for :data:`STALE_PERIODS` periods, or
* its lease is absent although an operation names it (a lease is deleted only by its own worker
  as it exits, after it settled its operations, or by a reaper once it has been stale for
  :data:`FORGET_S` seconds).

A lease that cannot be read counts as alive, and a worker's reaper acts only when its **own**
last :data:`TRUSTED_RENEWALS` renewals succeeded in a row (:func:`trusted`): after a database
outage every lease is stale, and the other workers get a period to renew theirs first. Nothing
here reads the cache: a restart of Redis (empty) never makes a live worker look dead.

What happens when a worker dies:

* **during a call** (``running``, named worker dead): any worker's reaper
  (:func:`mrtrweb.operations.reap_interrupted`, a registered duty of the heartbeat) -- every heartbeat,
  and when the operation is viewed -- marks it ``interrupted`` (code ``worker_lost``), closes its
  binding (a late result can never be accepted), writes the ``failed`` event, pushes the page;
* **while a legacy server holds its call open for the person** (``awaiting_input``, named worker
  dead, the round is a legacy round): the same -- the server's call died with the worker;
* **while an MRTR round waits for the person**: nothing. No worker is named; the binding is in
  the binding store, the answer may come through any worker. The reaper's query also requires a
  legacy round before it touches an operation awaiting input.

A worker that exits on SIGTERM drains first (:mod:`mrtrweb.runtime.drain`).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from typing import Any

from asgiref.sync import sync_to_async

from .leases import (WORKER_ID, keep_renewing, lease_call, note_failure, period, renew, renewal_failed, renewing_with,
                     renewal_succeeded, trusted)
from .leases import TRUSTED_RENEWALS, _state, ensure_lease, release, reset  # noqa: F401 -- re-exported

logger = logging.getLogger("mrtrweb.workers")

#: the operation's worker stopped during the call (judged dead by another worker)
WORKER_LOST = "worker_lost"
#: a lease not renewed for this many periods is stale: its worker is dead
STALE_PERIODS = 3
#: a lease stale this long (seconds) is deleted by any trusted reaper
FORGET_S = 3600.0
#: at most this many operations are settled by one reaper round
REAP_BATCH = 200


#: the heartbeat loop of each event loop (one in a uvicorn worker)
_beats: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}


def stale_after() -> datetime.timedelta:
    """How long a lease may go unrenewed before its worker counts as dead."""
    return datetime.timedelta(seconds=period() * STALE_PERIODS)


def fresh_leases():
    from django.db.models.functions import Now

    from ..models import WorkerLease

    return WorkerLease.objects.filter(beat_at__gte=Now() - stale_after())


def live_workers(within: datetime.timedelta | None = None) -> set[str]:
    """The ids of the workers whose lease was renewed within ``within`` (default
    :func:`stale_after`), by the database's clock (sync; one query)."""
    from django.db.models.functions import Now

    from ..models import WorkerLease

    return set(WorkerLease.objects.filter(beat_at__gte=Now() - (within or stale_after())).values_list("pk", flat=True))


def judged_dead(worker_id: str) -> bool:
    """Whether there is evidence that ``worker_id`` is dead (sync): this worker is :func:`trusted`
    and the lease is stale or absent. Never this worker itself, never an empty id; a lease that
    cannot be read counts as alive."""
    if not worker_id or worker_id == WORKER_ID or not trusted():
        return False
    try:
        return not fresh_leases().filter(pk=worker_id).exists()
    except Exception as exc:  # noqa: BLE001 -- never interrupt on an outage
        logger.warning("cannot read the lease of worker %s (%s); it counts as alive", worker_id,
                       exc.__class__.__name__)
        return False


def is_alive(worker_id: str) -> bool:
    """``not judged_dead(worker_id)`` (sync)."""
    return not judged_dead(worker_id)


def forget_stale_leases() -> int:
    """Delete leases stale for :data:`FORGET_S` seconds (sync; by a trusted reaper). Returns how
    many went. An operation still naming such a worker is judged by the absence: dead."""
    from django.db.models.functions import Now

    from ..models import WorkerLease

    if not trusted():
        return 0
    return WorkerLease.objects.filter(beat_at__lt=Now() - datetime.timedelta(seconds=FORGET_S)).delete()[0]


async def renew_once() -> bool:
    """Renew the lease (in the lease thread); returns whether it succeeded. Never raises (a
    failure resets the streak and is logged, rate-limited)."""
    try:
        await lease_call(renew)
    except Exception as exc:  # noqa: BLE001 -- the loop must survive outages
        renewal_failed(exc)
        return False
    renewal_succeeded()
    return True


#: the period's duties besides the lease, in order: ``(what, async () -> Any)``; registered by the
#: modules that own them when the app is ready (:meth:`mrtrweb.apps.MrtrwebConfig.ready`: the
#: reaper, :func:`mrtrweb.operations.reap_interrupted`; the expiry sweep, :func:`mrtrweb.operations.expiry.sweep`),
#: so this module depends on neither
_duties: dict[str, Any] = {}


def register_duty(what: str, step: Any) -> None:
    """Run ``step`` (an ``async`` callable without arguments) every period, as ``what`` (a fixed
    phrase for the log line of a failure). Idempotent per ``what``."""
    _duties[what] = step


async def duties_once() -> None:
    """The other work of a period: the registered duties (reap if trusted, sweep expired rounds),
    then forget long-stale leases. Never raises (each failure is logged, rate-limited)."""
    await fresh_connections()
    for what, step in (*_duties.items(), ("lease clean-up", sync_to_async(forget_stale_leases))):
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            note_failure(what, exc)


async def beat_once() -> None:
    """One period done in sequence: :func:`renew_once`, then :func:`duties_once` if the database
    answered (tests; in a worker the lease thread renews on its own schedule and the heartbeat
    loop runs the duties)."""
    if await renew_once():
        await duties_once()


async def fresh_connections() -> None:
    """Give back the database connections of the sync thread this task's ORM calls run in: one
    broken by an outage is discarded, and the next query gets a working one (with
    ``CONN_MAX_AGE = 0`` each is closed anyway). Never raises."""
    from django.db import close_old_connections

    try:
        await sync_to_async(close_old_connections)()
    except Exception:  # noqa: BLE001
        pass


async def ensure_heartbeat() -> None:
    """Start this worker's heartbeat on the running event loop (idempotent): the lease is written
    first (a failure is logged; it is retried), then the lease thread renews it every period and
    this loop runs the duties (reaper, expiry sweep) every period."""
    loop = asyncio.get_running_loop()
    task = _beats.get(loop)
    if task is not None and not task.done():
        if not renewing_with(_beating):  # every operation calls this: wake the lease thread only for a change
            keep_renewing(_beating)
        return
    try:
        await lease_call(renew)
    except Exception as exc:  # noqa: BLE001
        renewal_failed(exc)
    _beats[loop] = loop.create_task(_heartbeat_loop(), name="mrtrweb-heartbeat")
    keep_renewing(_beating)


async def stop_heartbeat() -> None:
    """Stop this loop's heartbeat (the drain does, before it releases the lease)."""
    task = _beats.pop(asyncio.get_running_loop(), None)
    keep_renewing(_beating)
    if task is not None and not task.done():
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001
            pass


async def _heartbeat_loop() -> None:
    """Every period: the duties, while the database answers the lease's renewals (which the lease
    thread does on its own schedule, :func:`mrtrweb.runtime.leases.keep_renewing`)."""
    while True:
        await asyncio.sleep(period())
        if _state.streak:  # the database answered the last renewal
            await duties_once()


def _after_fork_in_child() -> None:
    """A forked child is another worker (see :func:`mrtrweb.runtime.leases._after_fork_in_child`, which
    runs first): its id, and none of the parent's heartbeats."""
    global WORKER_ID
    from . import leases

    WORKER_ID = leases.WORKER_ID
    _beats.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _beating() -> bool:
    """Whether a heartbeat loop of this process runs (the lease thread renews while one does)."""
    return any(not task.done() and not task.get_loop().is_closed() for task in list(_beats.values()))
