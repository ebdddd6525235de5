"""Operations whose state cannot be right (issue 26): live, naming a worker, and nothing there
follows them. Such an operation would say "Running…" for good: no result comes, Stop reaches
nobody, and the reaper leaves it alone while its worker lives.

* :func:`check_own` -- a duty of every worker's heartbeat (registered in
  :meth:`mrtrweb.apps.MrtrwebConfig.ready`): the operations naming **this** worker that no task of
  this process follows (:func:`.holding.followed`), seen so for at least one period (a task about
  to start is not mistaken for a missing one) and whose row has not changed for
  :data:`GRACE_PERIODS` periods by the database's clock, are ended
  (:func:`.stopping.settle_unfollowed`: ``denied`` when someone asked to stop them, else
  ``interrupted`` ``untracked``, logged as an error). It also publishes what this worker follows
  (:func:`publish`, in ``BINDING_CACHE``) for :func:`scan`.

  It judges only where its judgement can be right: once per period per **process** (every event
  loop of a process that drove a call runs a heartbeat of its own, and two loops' checks a moment
  apart are not "two periods"), and only while this worker is :func:`~mrtrweb.runtime.workers.trusted`
  (its own lease renewals succeed: the database answers, and this worker's view is current).
  Each operation it ends is one short conditional update of its own; nothing is held across a
  wait.
* :func:`scan` -- for ``manage.py mrtr_reconcile`` (:mod:`mrtrweb.audit.reconcile`), from outside any
  worker: live operations naming a dead worker (what the reaper settles), ``running`` naming no
  worker, live on a live worker whose published list leaves them out (for
  :data:`GRACE_PERIODS`), terminal still naming a worker; and, with ``settle``, repairs them.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from .. import conf
from ..runtime import outage
from ..models import Operation
from .holding import followed
from .stopping import settle_unfollowed

logger = logging.getLogger("mrtrweb.operations")
_limited = outage.LogLimiter(logger)

#: an operation left out of its live worker's published list is untracked once its row has not
#: changed for this many heartbeat periods (the list is re-published every period)
GRACE_PERIODS = 3

#: operation id -> monotonic time this process first saw it naming this worker with nothing following it
_missing_since: dict[str, float] = {}
#: monotonic time of this process's last check (whichever event loop's heartbeat ran it)
_last_check = -1e9


def _period() -> float:
    return float(conf.get("HEARTBEAT_S"))


def _key(worker_id: str) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:following:{worker_id}"


def publish() -> None:
    """Write what this worker follows to ``BINDING_CACHE`` (sync), for :func:`scan`; it expires
    after :data:`GRACE_PERIODS` periods (a worker that stops publishing is judged by its lease)."""
    from django.core.cache import caches

    from ..runtime.workers import WORKER_ID

    caches[conf.get("BINDING_CACHE")].set(_key(WORKER_ID), sorted(followed()),
                                          timeout=int(_period() * GRACE_PERIODS) + 1)


def published(worker_id: str) -> frozenset[str] | None:
    """What ``worker_id`` last published that it follows, or None when nothing is there (sync)."""
    from django.core.cache import caches

    ids = caches[conf.get("BINDING_CACHE")].get(_key(worker_id))
    return frozenset(str(i) for i in ids) if isinstance(ids, list) else None


def _naming(worker_id: str) -> list[tuple[str, bool]]:
    """The live operations naming ``worker_id``: ``(id, settled)``, ``settled`` when the row has not
    changed for :data:`GRACE_PERIODS` periods by the database's clock (sync; one read)."""
    from django.db.models import BooleanField, Case, Value, When
    from django.db.models.functions import Now

    quiet = Now() - datetime.timedelta(seconds=_period() * GRACE_PERIODS)
    rows = (Operation.objects.filter(status__in=Operation.LIVE, worker=worker_id)
            .annotate(settled=Case(When(updated_at__lt=quiet, then=Value(True)), default=Value(False),
                                   output_field=BooleanField()))
            .values_list("pk", "settled"))
    return [(str(pk), bool(settled)) for pk, settled in rows]


async def check_own() -> int:
    """The heartbeat's duty (see the module docstring); returns how many operations it ended."""
    import time

    from ..runtime.workers import WORKER_ID, trusted

    global _last_check
    started = time.monotonic()
    if started - _last_check < _period() * 0.9:  # another event loop's heartbeat of this process checked
        return 0
    _last_check = started
    try:
        await sync_to_async(publish)()
    except Exception as exc:  # noqa: BLE001 -- a cache outage: the scan then says "unverified"
        _limited.warning("publish", "what this worker follows was not published (%s)", exc.__class__.__name__)
    if not trusted():  # the database does not answer this worker's renewals (yet): judge nothing
        _missing_since.clear()
        return 0
    naming = await sync_to_async(_naming)(WORKER_ID)
    now_followed = followed()
    seen = time.monotonic()
    missing = {op_id: settled for op_id, settled in naming if op_id not in now_followed}
    for op_id in list(_missing_since):
        if op_id not in missing:
            del _missing_since[op_id]
    ended = 0
    for op_id, settled in sorted(missing.items()):
        since = _missing_since.setdefault(op_id, seen)
        if not settled or seen - since < _period():
            continue
        if op_id not in followed() and await settle_unfollowed(op_id, WORKER_ID):
            _missing_since.pop(op_id, None)
            ended += 1
    return ended


def scan(*, settle: bool = True, now: datetime.datetime | None = None) -> dict[str, Any]:
    """Live operations whose state cannot be right, and terminal ones still naming a worker
    (sync). Returns ``{"dead_worker": [...], "no_worker": [...], "untracked": [...],
    "terminal_named": [...], "unverified": n}`` (entries ``{"operation", "status", "worker"}``;
    ``unverified``: live operations on live workers that published nothing, or on workers whose
    lease is only a little stale, so not judged). With
    ``settle``, each listed operation is repaired: the live ones ended (``worker_lost`` for a dead
    worker, else :func:`.stopping.settle_unfollowed`), the terminal ones' worker cleared. A worker is
    dead here when its lease is absent or was not renewed for twice :func:`stale_after` (one only a
    little stale counts as ``unverified``: it may be back from a database outage)."""
    from ..runtime.workers import live_workers, stale_after

    from .reaping import settle_dead

    now = now or timezone.now()
    report: dict[str, Any] = {"dead_worker": [], "no_worker": [], "untracked": [], "terminal_named": [],
                              "unverified": 0}
    fresh = live_workers()
    # a lease only a little stale is not judged from outside: after a database outage every lease is
    # stale until its worker's next renewal (a worker's own reaper waits for its trust the same way)
    recent = live_workers(stale_after() * 2)
    lists: dict[str, frozenset[str] | None] = {}
    before = now - datetime.timedelta(seconds=_period() * GRACE_PERIODS)
    live = Operation.objects.filter(status__in=Operation.LIVE).values_list("pk", "status", "worker", "updated_at")
    for pk, status, worker, updated_at in live.order_by("created_at").iterator():
        entry = {"operation": str(pk), "status": status, "worker": worker}
        if not worker:
            if status == Operation.Status.RUNNING and updated_at < before:
                report["no_worker"].append(entry)
            continue
        if worker not in fresh:
            if worker in recent:
                report["unverified"] += 1
            else:
                report["dead_worker"].append(entry)
            continue
        if worker not in lists:
            lists[worker] = published(worker)
        if lists[worker] is None:
            report["unverified"] += 1
        elif str(pk) not in lists[worker] and updated_at < before:
            report["untracked"].append(entry)
    report["terminal_named"] = [{"operation": str(pk), "status": status, "worker": worker} for pk, status, worker in
                                Operation.objects.filter(status__in=Operation.TERMINAL).exclude(worker="")
                                .values_list("pk", "status", "worker")]
    if settle:
        for entry in report["dead_worker"]:
            async_to_sync(settle_dead)(entry["operation"], entry["worker"])
        for entry in report["no_worker"] + report["untracked"]:
            async_to_sync(settle_unfollowed)(entry["operation"], entry["worker"])
        for entry in report["terminal_named"]:
            Operation.objects.filter(pk=entry["operation"], status__in=Operation.TERMINAL,
                                     worker=entry["worker"]).update(worker="")
    return report

