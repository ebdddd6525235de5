"""Building a retry once: the gate builds it (``Gate.respond``: validated, consumed once), its
``submitted`` event is written and read back, and the row says it goes out, before anything is sent.
A database lost in between is waited for; past that the retry is kept and sent when it is back
(:class:`~.messages.AnswerPending`, sent by :func:`.calls._send_when_back`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.utils import timezone

from ..audit import events as audit
from ..text import results
from ..gate import codes, Retry, StoreUnavailable
from ..runtime.gates import get_gate, handle_of
from ..models import Operation
from .hops import round_hop
from .messages import AnswerPending, AUDIT_UNAVAILABLE, DENY_MESSAGES, LEGACY, message_for, OperationRefused, STORE_UNAVAILABLE
from .rows import move, move_sql
from .runtime import new_request_id
from .stopping import deny

logger = logging.getLogger("mrtrweb.operations")


async def build_and_record(op: Operation, responses: dict[str, Any] | None, *, retry_id: str | None = None,
                            code: str = "", digests: dict[str, Any] | None = None,
                            round_number: int | None = None) -> Retry:
    """Build the retry with the gate, write + read back its ``submitted`` event, then return it.
    The operation is running again; an MRTR retry names this worker (it sends it), a legacy
    answer leaves the worker holding the server's call named (``code`` :data:`LEGACY`).

    Raises:
        GateRejection: the gate refused the answer (nothing changed, nothing sent).
        OperationRefused: the store or the audit failed (nothing sent; the operation ends when
            its round was already consumed).
        AnswerPending: consumed and audited, but the database stayed away for
            :data:`ANSWER_DB_WAIT_S`: the caller keeps the retry and sends it once it is back
            (:func:`mrtrweb.operations.calls._send_when_back`).

    ``digests``: the round's ``state_digest`` / ``schema_digests`` when the caller has them (the
    ``submitted`` event carries them; else the audit looks them up). Thread hops: one for the gate,
    the event and the row (:func:`record_and_move`); more only while the database is away.
    """
    driver = await driver_of(op, code)
    try:
        recorded = await round_hop(record_and_move)(op, get_gate(), retry_id, responses, code, digests,
                                                        round_number, driver)
    except StoreUnavailable:
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    except audit.AuditUnavailable:
        await deny(op, AUDIT_UNAVAILABLE, digests=digests)
        raise OperationRefused(AUDIT_UNAVAILABLE, DENY_MESSAGES[AUDIT_UNAVAILABLE]) from None
    return await after_recorded(op, recorded, code=code, digests=digests)


async def driver_of(op: Operation, code: str) -> dict[str, str]:
    """What the row names as the retry's driver: this worker for an MRTR retry (its lease made
    sure of first), nobody new for a legacy answer (``code`` :data:`LEGACY`).

    Raises:
        OperationRefused: the lease could not be written (nothing consumed, nothing sent).
    """
    from ..runtime.workers import WORKER_ID, ensure_lease

    if code == LEGACY:
        return {}
    try:
        await ensure_lease()  # before the operation names this worker
    except Exception:  # noqa: BLE001 -- the database is down: nothing consumed, nothing sent
        logger.warning("operation %s: answer refused, this worker's lease could not be written", op.id)
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    return {"worker": WORKER_ID}


@dataclasses.dataclass
class Recorded:
    """What :func:`record_and_move` did: the ``retry`` built and audited, the row's ``fields``
    it goes out with, ``moved`` (rows moved; None: the database failed the move), and ``cause``
    when the move checked access and the owner's access had ended (nothing moved)."""

    retry: Retry
    fields: dict[str, Any]
    moved: int | None
    cause: str = ""
    access_checked: bool = False


def record_and_move(op: Operation, gate: Any, retry_id: str | None, responses: dict[str, Any] | None, code: str,
                    digests: dict[str, Any] | None, round_number: int | None, driver: dict[str, str],
                    check_access: bool = False) -> Recorded:
    """In the sync thread: the retry built, its ``submitted`` event written and read back
    (:func:`_respond_and_record`), and the row moved for the retry (running, its request id, the
    driver) -- with ``check_access``, only while the owner may act on the server (the access check
    right before the retry leaves, in the move's ``WHERE``). On PostgreSQL the move is a step of the
    ``submitted`` append's own statement, made only with the event (one statement, one
    transaction: the event and the move are both written or neither; the read-back follows, and
    the retry leaves only after it); elsewhere (SQLite, or inside a caller's transaction) it is a
    statement of its own after the read-back, and a move the database fails is left to
    :func:`after_recorded` (``moved`` None).

    Raises:
        as :func:`_respond_and_record`.
    """
    from django.db import DatabaseError

    from ..tenancy import access

    fresh_id = not retry_id  # a UUID4 made here: no live binding can hold it (the gate binds it all the same)
    retry_id = retry_id or new_request_id()
    fields = dict(latest_request_id=str(retry_id), status=Operation.Status.RUNNING, rounds=op.rounds,
                  round_expires_at=None, **driver)
    allowed = (op.user_id, op.tenant_id, op.server_id) if check_access else None
    values = {"updated_at": timezone.now(), **fields}
    # None when the access conditions cannot go into the WHERE: the move is then made on its own
    then = move_sql(op.pk, values, status_not_in=Operation.TERMINAL, allowed=allowed)
    retry, event = _respond_and_record(op, gate, retry_id, responses, code, digests, round_number, fresh_id,
                                       then=then)
    moved = getattr(event, "then_rows", None)  # None: not made with the event (the caller makes it)
    try:
        if moved is None:
            moved = move(op.pk, values, status_not_in=Operation.TERMINAL, allowed=allowed)
    except DatabaseError as exc:
        logger.warning("operation %s: the database failed as an answer was recorded (%s); retrying", op.id,
                       exc.__class__.__name__)
        close_old_connections()
        return Recorded(retry, fields, None)
    try:
        cause = access.denial(*allowed) if allowed is not None and not moved else ""
    except DatabaseError as exc:  # not moved, and why not is unknown: nothing is sent (never moved without the check)
        logger.warning("operation %s: the database failed as the reason an answer's row did not move was read (%s)",
                       op.id, exc.__class__.__name__)
        close_old_connections()
        cause = ""
    return Recorded(retry, fields, moved, cause, access_checked=bool(allowed and moved))


async def after_recorded(op: Operation, recorded: Recorded, *, code: str,
                         digests: dict[str, Any] | None) -> Retry:
    """The async half after :func:`record_and_move`: a move the database failed is made again
    until it answers (:data:`ANSWER_DB_WAIT_S`), the operation ended when its owner's access
    ended, ``op`` updated as the row now says. Returns the retry to send.

    Raises:
        OperationRefused, AnswerPending: see :func:`build_and_record`.
    """
    from .revocation import end_operation

    retry, fields, moved = recorded.retry, recorded.fields, recorded.moved
    # The round is consumed and its answer audited: from here on the answer must go out. A
    # database lost at this moment is waited for (ANSWER_DB_WAIT_S); past that, an MRTR retry is
    # kept by this worker and sent once the database answers again (up to the round's TTL).
    if moved is None:
        moved = await _move_when_back(op.pk, fields, ANSWER_DB_WAIT_S)
    if moved is None:
        if code == LEGACY:
            logger.error("operation %s: legacy answer recorded but the database stayed unreachable; the holder "
                         "gives up at its deadline", op.id)
            raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE))
        raise AnswerPending(retry, fields)  # the caller keeps it: calls._send_when_back
    if recorded.cause:  # the owner's access ended before the retry could leave: nothing is sent
        await end_operation(op, recorded.cause)
        raise OperationRefused("denied", DENY_MESSAGES["access_revoked"])
    if not moved:  # ended meanwhile (stopped, access ended): the retry is not sent
        logger.info("operation %s ended while its answer was recorded; retry %s not sent", op.id, retry.id)
        raise OperationRefused(codes.INACTIVE_MRTR_ROUND, message_for(codes.INACTIVE_MRTR_ROUND))
    op.latest_request_id = str(retry.id)
    op.status = Operation.Status.RUNNING
    op.round_expires_at = None
    if "worker" in fields:
        op.worker = fields["worker"]
    # the retry's drive need not check access again before it sends, unless it waits for something first
    op.access_checked = recorded.access_checked
    if digests is not None:  # what stopping.last_answer would read back from the submitted event
        actions = dict(retry.actions)
        op.last_answer = (bool(actions) and set(actions.values()) == {"cancel"},
                          {"state_digest": digests.get("state_digest") or "",
                           "schema_digests": digests.get("schema_digests") or {}, "round_number": retry.round_number})
    return retry


def _respond_and_record(op: Operation, gate: Any, retry_id: str, responses: dict[str, Any] | None, code: str,
                        digests: dict[str, Any] | None, round_number: int | None = None,
                        fresh_id: bool = False, then: tuple[str, list[Any]] | None = None) -> tuple[Retry, Any]:
    """The gate builds the retry (``Gate.respond``: validated, the round consumed once) and its
    ``submitted`` event is written and read back, in the sync thread. Returns (the retry, the
    event); ``then``: a write made in the append's own statement, only with the event
    (:func:`mrtrweb.audit.events.record`: the event's ``then_rows``, None when it was not made there).

    Raises:
        GateRejection: the gate refused the answer (nothing consumed).
        StoreUnavailable: the binding store failed.
        mrtrweb.audit.events.AuditUnavailable: the event could not be written or read back (the round is
            consumed; the caller denies, nothing is sent).
    """
    from django.db import connections, router

    from ..audit.joined import JoinedAppend
    from ..models import AuditEvent

    def submitted(retry: Retry) -> dict[str, Any]:
        return dict(code=code, round_number=retry.round_number, request_id=op.latest_request_id, retry_id=retry.id,
                    actions=dict(retry.actions), read_back=True, then=then, **(digests or {}))

    respond = functools.partial(gate.respond, handle_of(op), retry_id=retry_id, responses=responses,
                                user=str(op.user_id), tenant=str(op.tenant_id),
                                params=results.stored_params(op.params), round_number=round_number, fresh_id=fresh_id)
    joining, conn = getattr(gate.store, "joining", None), connections[router.db_for_write(AuditEvent)]
    joined: list[JoinedAppend] = []
    if joining is None or digests is None or not JoinedAppend.joins(conn):
        retry: Retry = respond()
    else:  # the event and the row's move in the consume's own statement (mrtrweb.audit.joined)
        with joining(conn.alias) as join:
            def before_write(built: Retry) -> None:
                joined.append(JoinedAppend(op, "submitted", **submitted(built)))
                join(joined[0])

            retry = respond(before_write=before_write)
    if joined and joined[0].appended:  # its hash checked and the row read back, as record's
        return retry, joined[0].event()
    # not made there (another store, no chain head yet, the head's lock wait): on its own, as before
    return retry, audit.record(op, "submitted", **submitted(retry))


#: the longest an answer's request waits for the database to record that its retry goes out
#: (a database lost just after the answer was consumed and audited), seconds
ANSWER_DB_WAIT_S: Final = 10.0


async def _move_when_back(op_id: Any, fields: dict[str, Any], wait_s: float) -> int | None:
    """Move the operation's row (``fields``; only if it has not ended), retrying with pauses while
    the database fails, up to ``wait_s`` seconds. Returns the rows moved (0: it had ended), or
    None when the database did not answer in time."""
    from django.db import DatabaseError

    deadline = time.monotonic() + wait_s
    pause = 0.1
    while True:
        try:
            return await sync_to_async(move)(op_id, {"updated_at": timezone.now(), **fields},
                                             status_not_in=Operation.TERMINAL)
        except DatabaseError as exc:
            if time.monotonic() >= deadline:
                logger.error("operation %s: the database did not answer for %ss after an answer was recorded (%s)",
                             op_id, wait_s, exc.__class__.__name__)
                return None
            logger.warning("operation %s: the database failed as an answer was recorded (%s); retrying", op_id,
                           exc.__class__.__name__)
            await sync_to_async(close_old_connections)()
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
