"""The reaper: operations whose worker died are settled by any other worker (see
:mod:`mrtrweb.runtime.workers` for how a worker is judged dead, on evidence only). It runs as a duty of
every worker's heartbeat (registered in :meth:`mrtrweb.apps.MrtrwebConfig.ready`) and when an
operation's page is viewed.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async

from ..models import AuditEvent, Operation
from ..runtime import workers
from ..runtime.workers import REAP_BATCH, WORKER_LOST, fresh_leases, stale_after, trusted
from .holding import held_by
from .messages import HELD_OUTCOME_LOST, LEGACY, message_for
from .stopping import finish_interrupted

logger = logging.getLogger("mrtrweb.workers")


def _dead_candidates(operation_id: Any = None) -> list[Any]:
    """Non-terminal operations naming a dead worker (sync, one query on a partial index): calls in
    flight, and legacy rounds held open; never an MRTR round waiting for the person."""
    from django.db.models import Exists, OuterRef, Q


    legacy_round = AuditEvent.objects.filter(operation_id=OuterRef("pk"), round_number=OuterRef("rounds"),
                                             event="received", code=LEGACY)
    qs = (Operation.objects.filter(status__in=Operation.LIVE).exclude(worker="").exclude(worker=workers.WORKER_ID)  # read now: a forked worker has its own
          .exclude(Exists(fresh_leases().filter(pk=OuterRef("worker"))))
          .filter(Q(status=Operation.Status.RUNNING) | Exists(legacy_round)))
    if operation_id is not None:
        qs = qs.filter(pk=operation_id)
    return list(qs.select_related("server", "tenant").order_by()[:REAP_BATCH])


async def reap_interrupted(operation_id: Any = None) -> int:
    """Mark the operations whose named worker is dead ``interrupted`` (``worker_lost``): a
    conditional update per operation (so exactly one reaper settles it), then its binding is
    closed, the ``failed`` event written and the page pushed. Does nothing unless this worker is
    :func:`trusted`.

    Args:
        operation_id: check only this operation (the operation page does that on view).

    Returns:
        how many operations this call marked.
    """
    if not trusted():
        return 0
    count = 0
    for op in await sync_to_async(_dead_candidates)(operation_id):
        if await _settle(op, status=op.status):
            count += 1
    return count


async def settle_dead(op_id: Any, worker_id: str) -> bool:
    """Mark one live operation naming ``worker_id``, a worker the caller found dead (no lease
    renewed in :func:`stale_after`), ``interrupted`` (``worker_lost``) and settle it, as the reaper
    does (``manage.py mrtr_reconcile``, :mod:`.untracked`). Returns whether it was marked here."""
    op = await Operation.objects.select_related("server", "tenant").filter(
        pk=op_id, status__in=Operation.LIVE, worker=worker_id).afirst()
    return op is not None and await _settle(op, status=op.status)


async def _settle(op: Operation, *, status: str) -> bool:
    """The conditional update (exactly one reaper settles it), then :func:`finish_interrupted`;
    ``held_outcome_lost`` when the dead worker said it held the call's outcome for the database
    (:func:`.holding.held_by`), else ``worker_lost``."""
    code = HELD_OUTCOME_LOST if op.worker and await sync_to_async(held_by)(op.pk) == op.worker else WORKER_LOST
    claimed = await Operation.objects.filter(pk=op.pk, status=status, worker=op.worker).aupdate(
        status=Operation.Status.INTERRUPTED, error_code=code, error_message=message_for(code),
        worker="", round_expires_at=None)
    if not claimed:
        return False
    logger.warning("operation %s interrupted (%s): its worker %s has no lease renewed in the last %gs",
                   op.id, code, op.worker, stale_after().total_seconds())
    await finish_interrupted(op, code)
    return True
