"""The reaper: operations whose worker died are settled by any other worker (see
:mod:`mrtrweb.workers` for how a worker is judged dead, on evidence only). It runs as a duty of
every worker's heartbeat (registered in :meth:`mrtrweb.apps.MrtrwebConfig.ready`) and when an
operation's page is viewed.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async

from ..models import AuditEvent, Operation
from .. import workers
from ..workers import REAP_BATCH, WORKER_LOST, _fresh_leases, stale_after, trusted
from .messages import LEGACY, message_for
from .stopping import finish_interrupted

logger = logging.getLogger("mrtrweb.workers")


def _dead_candidates(operation_id: Any = None) -> list[Any]:
    """Non-terminal operations naming a dead worker (sync, one query on a partial index): calls in
    flight, and legacy rounds held open; never an MRTR round waiting for the person."""
    from django.db.models import Exists, OuterRef, Q


    legacy_round = AuditEvent.objects.filter(operation_id=OuterRef("pk"), round_number=OuterRef("rounds"),
                                             event="received", code=LEGACY)
    qs = (Operation.objects.filter(status__in=Operation.LIVE).exclude(worker="").exclude(worker=workers.WORKER_ID)  # read now: a forked worker has its own
          .exclude(Exists(_fresh_leases().filter(pk=OuterRef("worker"))))
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
        claimed = await Operation.objects.filter(pk=op.pk, status=op.status, worker=op.worker).aupdate(
            status=Operation.Status.INTERRUPTED, error_code=WORKER_LOST, error_message=message_for(WORKER_LOST),
            worker="", round_expires_at=None)
        if claimed:
            count += 1
            logger.warning("operation %s interrupted (%s): its worker %s has no lease renewed in the last %gs",
                           op.id, WORKER_LOST, op.worker, stale_after().total_seconds())
            await finish_interrupted(op)
    return count
