"""Ending an operation early: the person's Stop (:func:`stop_operation`, from any worker: a stop
request that the worker driving the call polls -- in the cache, read every :data:`STOP_POLL_S`, and
durable on the operation's row, read every :data:`STOP_DB_POLL_S` while the cache has none, so a
Redis restarted empty just after the click forgets nothing), a deny with its reason (:func:`deny`),
an operation whose access ended (:func:`_access_ended`, :mod:`mrtrweb.tenancy.access`), and one whose worker
died (:func:`finish_interrupted`), and one that nothing follows any more
(:func:`settle_unfollowed`: :mod:`.untracked`, or a Stop of it). Where such an operation had a task (:mod:`.tasks`) and no worker
follows it any more, the server is told ``tasks/cancel`` (:mod:`.task_cancel`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone
from django.utils.translation import gettext_noop

from .. import conf
from ..runtime import outage
from ..models import Operation
from .holding import followed
from .messages import DENY_MESSAGES, message_for, STOP_UNDELIVERED, STOPPED_BY, STOPPED_BY_AT_ROUND, UNTRACKED
from .runtime import finish_operation, load_operation, _spawn
from .task_cancel import cancel_detached

logger = logging.getLogger("mrtrweb.operations")


async def finish_interrupted(op: Operation, code: str = "") -> None:
    """Settle an operation whose worker died during a call (already marked ``interrupted``, with
    ``code``: ``worker_lost`` by default)."""
    from ..runtime.workers import WORKER_LOST

    code = code or WORKER_LOST
    await finish_operation(op, Operation.Status.INTERRUPTED, code=code, message=message_for(code),
                  event="failed", already_marked=True)
    if op.task_id:  # nobody follows its task any more: the server is told (.task_cancel)
        _spawn(cancel_detached(op.pk))


async def deny(op: Operation, reason: str, *, digests: dict[str, Any] | None = None) -> None:
    """End the operation with a ``denied`` outcome for ``reason``; nothing more is sent for it.
    ``digests``: the round's digests when the caller has them (see :func:`~.runtime.finish_operation`)."""
    logger.info("operation %s denied: %s", op.id, reason)
    await finish_operation(op, Operation.Status.DENIED, code="denied", reason=reason,
                  message=DENY_MESSAGES.get(reason, gettext_noop("The answer was denied.")), event="denied", digests=digests)


def last_answer(op_id: Any) -> tuple[bool, dict[str, Any]]:
    """(whether the person's last answer was Cancel on every request -- the outcome is then
    ``cancelled``: the server was told, and finished --, the digests its round's events carry: ``state_digest`` /
    ``schema_digests``, empty when nothing was answered), from the last ``submitted`` event (sync;
    one query)."""
    from ..models import AuditEvent

    row = AuditEvent.objects.filter(operation_id=op_id, event="submitted").order_by("-sequence") \
        .values("actions", "state_digest", "schema_digests", "round_number").first()
    if row is None:
        return False, {}
    actions = row["actions"]
    cancelled = bool(actions) and set(actions.values()) == {"cancel"}
    return cancelled, {"state_digest": row["state_digest"], "schema_digests": row["schema_digests"],
                       "round_number": row["round_number"]}


async def stop_operation(op: Operation, *, by: str = "person") -> bool:
    """Stop an operation: the person's Stop, or ``by="headless_timeout"`` (see :data:`STOPPED_BY`).
    A round waiting for an answer: its binding is closed, nothing is sent, the outcome is
    ``denied`` (reason ``cancelled``). A call in flight: the worker driving it (any worker) cancels
    the request within ``STOP_POLL_S`` and ends it the same way. Returns False when the operation
    had already ended.

    Raises:
        ValueError: ``by`` is not a key of :data:`STOPPED_BY`.
        mrtrweb.runtime.outage.ServiceUnavailable: a call in flight, and its stop request cannot be
            written (the cache is down): nothing changed (:data:`STOP_UNDELIVERED`, a 503)."""
    if by not in STOPPED_BY:
        raise ValueError(f"by must be one of {sorted(STOPPED_BY)}")
    op = await load_operation(op.pk)
    if op.status == Operation.Status.AWAITING_INPUT:
        logger.info("operation %s denied: cancelled (by: %s)", op.id, by)
        await finish_operation(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                      message=STOPPED_BY_AT_ROUND[by])
        if op.task_id:  # a task's round (2026-07-28): the task waits for it at the server; cancel it
            _spawn(cancel_detached(op.pk))
        # a legacy server may be holding its call open for this round: the worker holding it
        # answers the server "cancel" when it sees the stop (see _hold)
        try:
            await sync_to_async(request_stop)(op.id, by)
        except Exception:  # noqa: BLE001 -- the holder still sees the operation ended within a second
            logger.warning("could not write the stop request of operation %s", op.id)
        return True
    if op.status == Operation.Status.RUNNING:
        from ..runtime.workers import WORKER_ID

        try:
            await sync_to_async(request_stop)(op.id, by)
        except Exception as exc:
            if outage.kind(exc) is None:
                raise
            raise outage.ServiceUnavailable("cache", STOP_UNDELIVERED) from exc
        if op.worker in ("", WORKER_ID) and str(op.pk) not in followed():
            # nothing here follows it (and an empty worker means nobody does): ended now, as stopped
            await settle_unfollowed(op.pk, op.worker)
        return True
    return False


async def settle_unfollowed(op_id: Any, worker_id: str) -> bool:
    """End an operation that names ``worker_id`` (``""``: none) and that nothing follows: a
    conditional update (still live, still naming it), then the binding closed, the terminal event
    and the push (:func:`~.runtime.finish_operation`). Ended ``denied`` (``cancelled``) when someone asked
    to stop it, else ``interrupted`` (:data:`~.messages.UNTRACKED`). Returns whether it ended here."""
    by = await sync_to_async(stop_requested)(op_id, durable=True)
    if by:
        status, code, message, event, reason = Operation.Status.DENIED, "denied", STOPPED_BY[by], "denied", "cancelled"
    else:
        status, code, message, event, reason = (Operation.Status.INTERRUPTED, UNTRACKED, message_for(UNTRACKED),
                                                "failed", "")
    claimed = await Operation.objects.filter(pk=op_id, status__in=Operation.LIVE, worker=worker_id).aupdate(
        status=status, error_code=code, error_message=message, worker="", round_expires_at=None,
        updated_at=timezone.now())
    if not claimed:
        return False
    logger.error("operation %s named worker %r with nothing following it; ended %s (%s)", op_id, worker_id, status,
                 f"stopped by {by}" if by else UNTRACKED)
    op = await load_operation(op_id)
    await finish_operation(op, status, code=code, message=message, event=event, reason=reason, already_marked=True)
    if op.task_id:  # nobody follows its task any more: the server is told (.task_cancel)
        _spawn(cancel_detached(op.pk))
    return True


#: seconds between two checks of a stop request while a call is in flight
STOP_POLL_S = 0.25
#: seconds between two reads of the durable stop request (the operation's row) by one poller while
#: the cache has none: a Stop whose cache key was lost still stops the call within this
STOP_DB_POLL_S = 2.0
#: when each operation's row was last read for its stop request (monotonic seconds), this process
_row_read_at: dict[str, float] = {}


def _stop_key(op_id: Any) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:stop:{op_id}"


def request_stop(op_id: Any, by: str = "person") -> None:
    """Ask whichever worker drives the operation to abandon its in-flight call (sync); ``by`` is
    who stops it (a key of :data:`STOPPED_BY`). The cache's key first (read within
    :data:`STOP_POLL_S`; its failure raises and nothing is recorded), then the operation's row
    (durable: read when the cache has no key, e.g. after Redis restarted empty); a database failure
    there is logged and the stop goes on through the cache alone.

    Raises:
        Exception: the cache failed (a redis-py or django-redis error): nothing was recorded.
    """
    from django.core.cache import caches

    caches[conf.get("BINDING_CACHE")].set(_stop_key(op_id), by, timeout=int(conf.get("TTL_S")))
    try:
        Operation.objects.filter(pk=op_id).exclude(status__in=Operation.TERMINAL).update(stop_requested_by=by)
    except Exception as exc:  # noqa: BLE001 -- the cache's key carries it; only its durability is lost
        logger.warning("stop request of operation %s kept in the cache only: %s", op_id, exc.__class__.__name__)
        from ..bindings.database import drop_broken_connection

        drop_broken_connection(Operation)


def stop_requested(op_id: Any, *, durable: bool = False) -> str | None:
    """Who asked to stop the operation (a key of :data:`STOPPED_BY`), or None (sync). The cache
    first; when it has no stop (or is down), the operation's row -- every :data:`STOP_DB_POLL_S`
    per operation and process, the first time that long after this process first asked (a round's
    path costs no query: tests/operations/test_round_cost.py), or now with ``durable``. Never raises: an
    outage never stops a call by itself. (A stop whose cache key was lost in the first
    ``STOP_DB_POLL_S`` of a call that then asks for input may open that round: the person is asked,
    nothing is sent without them, and Stop ends it.)"""
    from django.core.cache import caches

    try:
        by = caches[conf.get("BINDING_CACHE")].get(_stop_key(op_id))
    except Exception:  # noqa: BLE001 -- a cache outage never stops a call by itself; the row may
        by = None
    if by is None:
        by = _stop_on_row(str(op_id), durable) or None
    if by is None:
        return None
    return by if by in STOPPED_BY else "person"


def _stop_on_row(key: str, now: bool) -> str:
    at = time.monotonic()
    if len(_row_read_at) > 4096:  # operations no longer polled: forget them
        for old, t in list(_row_read_at.items()):
            if at - t > 60.0:
                _row_read_at.pop(old, None)
    if not now and at - _row_read_at.setdefault(key, at) < STOP_DB_POLL_S:
        return ""
    _row_read_at[key] = at
    try:
        return Operation.objects.filter(pk=key).values_list("stop_requested_by", flat=True).first() or ""
    except Exception:  # noqa: BLE001 -- a database outage never stops a call by itself
        from ..bindings.database import drop_broken_connection

        drop_broken_connection(Operation)
        return ""
