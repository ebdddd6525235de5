"""Rounds that expire by themselves: no command needs to run.

When a round opens (an MRTR ``input_required`` the gate accepted, or a legacy server's request
held open: its hold's deadline), ``Operation.round_expires_at`` is set to the gate's round ``expires_at``;
it is cleared when the round is answered or the operation ends otherwise, and kept when it expires (the
deadline the round closed at, which its page shows). Every worker's heartbeat loop
(:mod:`mrtrweb.runtime.workers`, every ``HEARTBEAT_S`` seconds) runs :func:`sweep`:

* operations ``awaiting_input`` whose ``round_expires_at`` is more than :data:`GRACE_S` seconds
  in the past (the database's clock) become ``expired`` -- by a conditional update, so exactly
  one worker settles each -- then the binding is closed, the ``expired`` audit event written
  once, and the person's pages are pushed;
* :func:`mrtrweb.bindings.database.sweep` deletes binding rows past their lifetime (database
  store only).

When nothing is due the sweep is one query on the ``(status, round_expires_at)`` index (plus the
binding store's indexed deletes). The operation page and panel settle their own operation when
it is read (:func:`settle_if_due`), and ``mrtr_reconcile`` reuses :func:`expire` for rounds it
finds past their lifetime in the audit trail.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.utils.translation import gettext_noop

logger = logging.getLogger("mrtrweb.expiry")

#: seconds after ``round_expires_at`` before a round is swept: the gate refuses an answer from
#: ``expires_at`` on (each worker's clock); the sweep (the database's clock, which
#: ``round_expires_at`` is written by too: :func:`expires_at`) comes later, so an answer the gate
#: accepted just in time is never overtaken by the sweep
GRACE_S = 2.0
#: at most this many operations settled by one sweep
SWEEP_BATCH = 200
EXPIRED_CODE = "expired"
EXPIRED_MESSAGE = gettext_noop("The round expired without an answer; nothing was sent.")


def expires_at(epoch_s: float) -> Any:
    """The gate's ``expires_at`` (seconds since the epoch, this worker's clock) as the row's
    ``round_expires_at``: an expression for ``update()``, the round's **remaining** lifetime (by
    this worker's clock, the one the gate used) from the **database's** now -- the clock the sweep
    judges by (:func:`_due`). A worker whose clock is off by a minute then neither shortens nor
    stretches the round by a minute (issue 26)."""
    from django.db.models import DateTimeField, ExpressionWrapper
    from django.db.models.functions import Now

    left = datetime.timedelta(seconds=float(epoch_s) - time.time())
    expression = ExpressionWrapper(Now() + left, output_field=DateTimeField())
    expression.now_plus = left  # what :func:`mrtrweb.operations.rows.move_sql` binds in its compiled text
    return expression


def _due():
    from django.db.models.functions import Now

    from ..models import Operation

    return Operation.objects.filter(status=Operation.Status.AWAITING_INPUT,
                                    round_expires_at__lt=Now() - datetime.timedelta(seconds=GRACE_S))


def due_ids(limit: int = SWEEP_BATCH) -> list[Any]:
    """Ids of operations whose open round is past its lifetime (sync; one indexed query)."""
    return list(_due().order_by().values_list("pk", flat=True)[:limit])


def expire(op_id: Any, round_number: int | None = None, *, due_only: bool = True) -> Any:
    """End the operation ``expired`` because its round was not answered in time (sync).

    Args:
        op_id: the operation.
        round_number: the round the ``expired`` event is written for (default: the operation's
            current round).
        due_only: only if it still awaits input and its round is past ``round_expires_at`` by the
            database's clock, checked before the round is retired (the
            sweep, a page view); False: any operation that has not ended (``mrtr_reconcile``,
            which judges by the audit trail; it writes the event even when the row had already
            ended without an outcome event).

    Returns:
        the operation (with ``server`` and ``tenant``) when this call ended it (its page is then
        to be pushed), else None.
    """
    from django.utils import timezone

    from ..audit import events as audit
    from ..models import Operation

    # due by the database's clock before anything is retired: a worker whose own clock runs ahead
    # (settle_if_due judges by it, cheaply) must not take the claim of a round that is still live
    op = (_due() if due_only else Operation.objects).select_related("server", "tenant").filter(pk=op_id).first()
    if op is None:
        return None
    if due_only:
        # the round's single-use claim first: an answer the gate accepted a moment before the
        # expiry holds it (its retry may be going out while the row still awaits input): leave it
        from ..runtime.gates import get_gate, handle_of

        try:
            if not get_gate().retire_round(handle_of(op), op.rounds):
                logger.info("operation %s: round %s is being answered; not expired", op.id, op.rounds)
                return None
        except Exception as exc:  # noqa: BLE001 -- the store is down: the next sweep tries again
            logger.warning("operation %s: round not retired (%s); expiry retried", op.id, exc.__class__.__name__)
            return None
    qs = _due().filter(pk=op.pk) if due_only else Operation.objects.filter(pk=op.pk).exclude(
        status__in=Operation.TERMINAL)
    # round_expires_at stays: it is the deadline the round closed at, the one its card said ("Answer
    # before ...") and its expired page says ("closed at ..."), not the moment a sweep came by
    won = qs.update(status=Operation.Status.EXPIRED, error_code=EXPIRED_CODE, error_message=EXPIRED_MESSAGE,
                    worker="", updated_at=timezone.now())
    if not won and due_only:
        return None  # answered, ended or settled by another worker meanwhile
    number = op.rounds if round_number is None else round_number
    try:
        from ..runtime.gates import get_gate, handle_of

        get_gate().close(handle_of(op))
    except Exception:  # noqa: BLE001 -- the binding expires on its own
        logger.warning("binding of expired operation %s not closed; it expires on its own", op.id)
    try:
        # once: two settlers of the same round at the same moment write one outcome
        audit.record(op, "expired", round_number=number, request_id=op.latest_request_id, once=("round_number",))
    except audit.AuditUnavailable:
        pass  # logged by audit.record; mrtr_reconcile writes it later
    if won:
        logger.info("operation %s: round %s expired without an answer", op.id, number)
        op.status = Operation.Status.EXPIRED
        return op
    return None


async def _push(op: Any) -> None:
    from ..runtime.push import operation_changed

    await operation_changed(op.user_id, op.id)


def push(op: Any) -> None:
    """Push an expired operation's page from sync code (``mrtr_reconcile``); never raises."""
    from asgiref.sync import async_to_sync

    try:
        async_to_sync(_push)(op)
    except Exception as exc:  # noqa: BLE001 -- a lost push is recovered by a page reload
        logger.warning("push for expired operation %s failed: %s", op.id, exc.__class__.__name__)


async def settle_if_due(op: Any) -> bool:
    """On read (the operation page or panel): expire ``op`` when its round is past its lifetime.
    Returns whether it was expired now. Cheap when it is not due (no query)."""
    from django.utils import timezone

    when = getattr(op, "round_expires_at", None)
    if op.status != "awaiting_input" or when is None:
        return False
    if (timezone.now() - when).total_seconds() <= GRACE_S:
        return False
    ended = await sync_to_async(expire)(op.pk)
    if ended is not None:
        await _push(ended)
    return ended is not None


async def sweep() -> int:
    """Expire every due round (each settled by exactly one worker), then sweep the database binding
    store. Returns how many operations this worker expired.

    Raises:
        django.db.DatabaseError: the database is unreachable (the heartbeat loop logs it).
    """
    from .. import conf

    count = 0
    for op_id in await sync_to_async(due_ids)():
        ended = await sync_to_async(expire)(op_id)
        if ended is not None:
            count += 1
            await _push(ended)
    if conf.get("BINDING_STORE") == "database":
        from ..bindings.database import sweep as sweep_bindings

        await sync_to_async(sweep_bindings)()
    return count
