"""Judging a result (MCP 2026-07-28, Multi Round-Trip Requests): a final result is checked
against the SDK's types and completes the operation; anything else goes to the gate
(``Gate.receive``), and an accepted ``input_required`` round is audited (``received``) and handed to
the person (the operation awaits input, the card is pushed). A ``requestState``-only round is
retried at once (:mod:`.retries`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from typing import Any

from asgiref.sync import sync_to_async

from ..audit import events as audit
from ..text import results, stored_text
from ..gate import GateRejection, Retry, Round, StoreUnavailable, id_key
from ..runtime.gates import get_gate
from ..models import Operation
from .authorization import _authorization_changed
from .messages import STOPPED_BY, AUDIT_UNAVAILABLE, AUTHORIZATION_CHANGED, INVALID_RESULT, message_for, STORE_UNAVAILABLE
from .received import Received, joining_audit, prepare_received
from .result_reads import access_server_and_trail
from .retries import build_and_record
from .ending import joined_end, mark_ended_joined
from .rows import move
from .revocation import end_operation
from .holding import database_back
from .hops import round_hop
from .runtime import (connections_checked, end_and_close, finish_operation, discard_unusable, leaves_connections_checked,
                      mark_ended, notify, settle_ended)
from .stopping import stop_requested, deny, last_answer

logger = logging.getLogger("mrtrweb.operations")


def _is_final(raw: Any) -> bool:
    """A result that claims to be final: an object with ``resultType`` absent (older servers) or
    ``"complete"`` and no MRTR payload. Anything else goes to the gate."""
    if not isinstance(raw, dict):
        return False
    if "inputRequests" in raw or "requestState" in raw:
        return False
    return "resultType" not in raw or raw["resultType"] == "complete"


#: per method: the list of a final result that may be long (checked item by item, see parse_final)
_FINAL_LISTS = {"tools/call": "content", "prompts/get": "messages", "resources/read": "contents"}


@functools.cache
def _final_adapters(method: str) -> tuple[Any, Any] | None:
    """The SDK model of ``method``'s final result and a TypeAdapter of one item of its long list."""
    import mcp_types
    from pydantic import TypeAdapter

    model = {"tools/call": mcp_types.CallToolResult, "prompts/get": mcp_types.GetPromptResult,
             "resources/read": mcp_types.ReadResourceResult}.get(method)
    if model is None:
        return None
    field = model.model_fields[_FINAL_LISTS[method]]
    return model, TypeAdapter(field.annotation.__args__[0])


def parse_final(method: str, raw: dict[str, Any]) -> bool:
    """Whether the SDK accepts the final result for ``method``.

    Blocking; run it off the event loop. The long list (``content``, ``messages``, ``contents``) is
    checked one item at a time, so a result of many thousands of blocks never holds the GIL (and
    so the event loop) for the whole check."""
    from pydantic import ValidationError

    adapters = _final_adapters(method)
    if adapters is None:
        return True
    model, item = adapters
    body = {k: v for k, v in raw.items() if k != "resultType"}
    key = _FINAL_LISTS[method]
    listed = body.get(key)
    try:
        if isinstance(listed, list):
            model.model_validate({**body, key: []})
            for value in listed:
                item.validate_python(value)
        else:
            model.model_validate(body)
    except (ValidationError, ValueError, TypeError):
        return False
    return True


@dataclasses.dataclass
class _Judged:
    """What :func:`_judge_round` decided (``outcome``) and what the async side needs for it."""

    outcome: str  # access_ended | rejected | store_unavailable | audit_unavailable | authorization_changed
    #             | replayed | state_only | awaiting | ended
    rnd: Round | None = None
    cause: str = ""
    exc: GateRejection | None = None


@leaves_connections_checked
def _judge_round(op: Operation, request_id: str, raw: Any, received_code: str, first_try: bool = True) -> _Judged:
    """The sync half of judging a result that is not final, in one thread hop: a Stop that came
    before the result, the owner's access (:func:`mrtrweb.tenancy.access.denial`), the gate
    (``Gate.receive``), the tenant's trail for the ``requestState`` (:func:`.result_reads.state_seen`, read with the access), the
    authorization identity, the ``received`` (or ``rejected``) event, and the row moved for the
    person. Ending the operation, pushes and back-offs are left to :func:`_handle_result`.

    The database may have gone away during the call: when its first read fails (nothing written
    yet), the outcome is ``database_down`` on a ``first_try`` (the caller waits for it and judges
    again); after that the error propagates."""
    from ..tenancy import access

    by = stop_requested(op.id)
    if by:  # Stop came before the answer asking for more: no round after a Stop
        return _Judged("stopped", cause=by)
    # the owner's access and the server's row as it is now, in one statement: the authorization
    # check and the round's configuration digest below judge the server an admin may have just changed
    found = _first_read(lambda: access_server_and_trail(op, raw, request_id), first_try)
    if found is _DOWN:
        return _Judged("database_down")
    cause, server, trail, bound = found
    if cause:
        return _Judged("access_ended", cause=cause)
    op.server = server
    gate = get_gate()
    # the binding read with the access (one statement): the gate judges the result against it
    primed = gate.store.primed_bound(str(op.tenant_id), str(op.user_id), id_key(request_id), bound) \
        if bound is not None else contextlib.nullcontext()
    prepared: list[Received] = []

    def before_write(rnd: Round) -> None:  # the round accepted, its claim not yet written
        prepared.append(prepare_received(op, rnd, trail, server, request_id, received_code, joinable=join is not None))
        if join is not None and prepared[0].joined is not None:
            join(prepared[0].joined)

    try:
        with primed, joining_audit(gate) as join:
            rnd: Round = gate.receive(tenant=str(op.tenant_id), user=str(op.user_id), request_id=request_id,
                                      origin=op.server.origin, result=raw, before_write=before_write)
    except GateRejection as exc:
        logger.info("operation %s: round refused (%s): %s", op.id, exc.code, exc.reason)
        try:
            audit.record(op, "rejected", code=exc.code, reason=exc.reason, round_number=op.rounds + 1,
                         request_id=request_id)
        except audit.AuditUnavailable:
            pass
        return _Judged("rejected", exc=exc)
    except StoreUnavailable:
        return _Judged("store_unavailable")
    op.rounds = rnd.number
    got = prepared[0]
    replayed, changed = got.replayed, got.changed
    # a round handed to the person: no worker drives it now (any worker may take the answer), and it
    # expires by itself (mrtrweb.operations.expiry). The row's move is made with the received event
    # (one statement with the claim and the record where the store joins it, else with the event alone:
    # PostgreSQL), else after it
    try:
        if got.joined is not None and got.joined.appended:  # its hash checked
            event = got.joined.event()
        else:
            event = audit.record(op, "received", then=got.then, **got.fields)
    except audit.AuditUnavailable:
        return _Judged("audit_unavailable", rnd)
    if changed is not None or replayed:  # the page counts the round all the same
        Operation.objects.filter(pk=op.pk).update(rounds=rnd.number)
        return _Judged("authorization_changed" if changed is not None else "replayed", rnd)
    if rnd.state_only:
        return _Judged("state_only", rnd)
    moved = getattr(event, "then_rows", None)
    if moved is None:
        moved = move(op.pk, got.awaiting, status_in=(Operation.Status.RUNNING,))
    return _Judged("awaiting" if moved else "ended", rnd)


_DOWN = object()


def _first_read(read, first_try: bool) -> Any:
    """``read()`` on a connection given back first when the database broke it during the call
    (:func:`~.runtime.discard_unusable`); :data:`_DOWN` when it fails on a ``first_try`` (a
    connection an outage killed unnoticed fails here, is marked, and is discarded by the wait)."""
    from django.db import DatabaseError

    try:
        discard_unusable()
        return read()
    except DatabaseError:
        if not first_try:
            raise
        return _DOWN


def _schema_digests(rnd: Round) -> dict[str, str]:
    """The round's ``requestedSchema`` digests by input request key (what its audit events carry)."""
    return {k: v.schema_digest for k, v in rnd.requests.items() if v.schema_digest}


def _final_checked(method: str, raw: dict[str, Any], op_id: Any) -> tuple[bool, Any]:
    """:func:`parse_final` and, when the SDK accepts it, the result as stored
    (:func:`mrtrweb.text.results.for_storage`): both CPU only, in one hop off the sync thread."""
    if not parse_final(method, raw):
        return False, None
    return True, results.for_storage(raw, op_id=op_id)


#: a final result at most this big (JSON values, characters of text) is checked and stored in the
#: completion's own thread hop (:func:`is_small`); a bigger one off the sync thread first
SMALL_RESULT_VALUES, SMALL_RESULT_CHARS = 512, 64 * 1024


def is_small(raw: Any) -> bool:
    """Whether ``raw`` holds at most :data:`SMALL_RESULT_VALUES` JSON values and
    :data:`SMALL_RESULT_CHARS` characters of strings (keys included): a walk that stops as soon as
    either bound is passed, so it costs at most that much whatever the result's size."""
    values, chars = 0, 0
    stack = [raw]
    while stack:
        value = stack.pop()
        values += 1
        if values > SMALL_RESULT_VALUES:
            return False
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                chars += len(key) if isinstance(key, str) else 0
                stack.append(item)
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        if chars > SMALL_RESULT_CHARS:
            return False
    return True


def _check_and_complete(op: Operation, raw: dict[str, Any]) -> tuple[bool, Any, tuple[bool, Any]]:
    """A small final result (:func:`is_small`) checked and stored (:func:`_final_checked`) and the
    operation completed with it (:func:`_complete`) in one thread hop. Returns (accepted, stored,
    what :func:`_complete` returned; (False, "") when the result was refused: nothing done)."""
    ok, stored = _final_checked(op.method, raw, op.id)
    if not ok:
        return False, None, (False, "")
    return True, stored, _complete(op, stored)


@leaves_connections_checked
def _complete(op: Operation, stored: Any, first_try: bool = True) -> tuple[bool, Any]:
    """End ``op`` completed with its stored result (sync): ``cancelled`` when the person's last
    answer was Cancel on every request. The row moves only while its owner may act on it: the
    access check is in the move's own ``WHERE`` (:func:`~.runtime.mark_ended`, one statement), and
    only when nothing moved is the cause asked. Then the binding and the terminal event
    (:func:`~.runtime.settle_ended`). Returns (ended here, the access cause when the owner's access
    ended first: then nothing is done here), or (False, :data:`_DOWN`) when the database failed
    its first statement on a ``first_try`` (see :func:`_judge_round`)."""
    from ..tenancy import access

    before = (op.status, op.error_code, op.error_message, op.result)
    op.status, op.error_code, op.error_message, op.result = Operation.Status.COMPLETED, "", "", stored
    # the answer this task sent (build_and_record keeps it with the row), else read back
    known = getattr(op, "last_answer", None)
    if known is None:
        known = _first_read(lambda: last_answer(op.id), first_try)
        if known is _DOWN:
            op.status, op.error_code, op.error_message, op.result = before
            return False, _DOWN
        first_try = False  # the database answered: a failure from here on propagates
    cancelled, answered = known
    # the terminal event carries the digests of the round it ends: the last answered one's
    digests = {k: v for k, v in answered.items() if k != "round_number"} \
        if answered.get("round_number") == op.rounds else None
    # the row's move, the binding's close and the terminal event in one statement where the store
    # can (then closed; the event's append says whether it was made there), else the row's move
    # and the event in one (the binding closed after), else each on its own
    joined = joined_end(op, "cancelled" if cancelled else "completed", digests)
    moved = _first_read(lambda: end_and_close(op, Operation.Status.COMPLETED, joined), first_try)
    closed = moved is not None and moved is not _DOWN
    if moved is None:
        moved = _first_read(lambda: mark_ended_joined(op, Operation.Status.COMPLETED, joined), first_try)
    if moved is None:
        moved = _first_read(lambda: mark_ended(op, Operation.Status.COMPLETED, while_allowed=True), first_try)
    if moved is _DOWN or not moved:  # the row as it was: the caller waits, ends it for its cause, or drops this
        op.status, op.error_code, op.error_message, op.result = before
    if moved is _DOWN:
        return False, _DOWN
    if not moved:
        cause = access.denial(op.user_id, op.tenant_id, op.server_id)
        if not cause:
            logger.info("operation %s was already ended; late outcome completed ignored", op.id)
        return False, cause
    settle_ended(op, Operation.Status.COMPLETED, event="cancelled" if cancelled else "completed", reason="",
                 digests=digests, closed=closed, joined=joined)
    return True, ""


async def _handle_result(op: Operation, request_id: str, raw: Any, *, received_code: str = "") -> Retry | None:
    """Judge one result. Returns the retry to send next (state-only rounds), or None.

    ``received_code``: the ``code`` of the round's ``received`` row when the result was not on the
    wire but made from something else the server sent (:data:`~.messages.URL_REQUIRED`: a
    ``-32042`` error, :mod:`.url_required`).

    Thread hops: a final result two (its check and storage off the sync thread, then the row, the
    binding and the audit event); a round one (:func:`_judge_round`), plus one for a push."""
    if _is_final(raw):
        if is_small(raw):  # checked and stored in the completion's own hop (less than a millisecond of CPU)
            ok, stored, (ended, cause) = await round_hop(_check_and_complete)(op, raw)
        else:  # off the event loop and off the sync thread: a result may hold hundreds of thousands of blocks
            ok, stored = await sync_to_async(_final_checked, thread_sensitive=False)(op.method, raw, op.id)
            if ok:
                ended, cause = await round_hop(_complete)(op, stored)
        if not ok:
            logger.info("operation %s: final result refused by the SDK types", op.id)
            await finish_operation(op, Operation.Status.FAILED, code=INVALID_RESULT, message=message_for(INVALID_RESULT))
            return None
        if cause is _DOWN:  # the database went away during the call: waited for, then once more
            await database_back(op.id)
            ended, cause = await round_hop(_complete)(op, stored, False)
        if cause:
            await end_operation(op, cause)
        elif ended:
            await notify(op, settled=True)
            connections_checked.set(True)  # _complete's hop was the drive's last
        return None
    judged = await round_hop(_judge_round)(op, request_id, raw, received_code)
    if judged.outcome == "database_down":  # the database went away during the call: waited for
        await database_back(op.id)
        judged = await round_hop(_judge_round)(op, request_id, raw, received_code, False)
    outcome = judged.outcome
    if outcome == "stopped":
        logger.info("operation %s stopped during the call (by: %s); the server's answer asked for more and was "
                    "dropped", op.id, judged.cause)
        await finish_operation(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                      message=STOPPED_BY[judged.cause])
        return None
    if outcome == "access_ended":
        await end_operation(op, judged.cause)
        return None
    if outcome == "rejected":
        exc = judged.exc
        # The gate's reason names the refused check (never a value), e.g. which method was asked.
        await finish_operation(op, Operation.Status.FAILED, code=exc.code,
                      message=stored_text.WITH_REASON % {"message": message_for(exc.code), "reason": exc.reason})
        return None
    if outcome == "store_unavailable":
        await finish_operation(op, Operation.Status.FAILED, code=STORE_UNAVAILABLE, message=message_for(STORE_UNAVAILABLE))
        return None
    rnd = judged.rnd
    digests = {"state_digest": rnd.state_digest, "schema_digests": _schema_digests(rnd)}
    if outcome in ("audit_unavailable", "authorization_changed", "replayed"):
        reason = {"audit_unavailable": AUDIT_UNAVAILABLE, "authorization_changed": AUTHORIZATION_CHANGED,
                  "replayed": "request_state_replayed"}[outcome]
        await deny(op, reason, digests=digests)
        return None
    if outcome == "state_only":
        await asyncio.sleep(rnd.backoff_s)
        if await _authorization_changed(op) is not None:  # changed during the back-off
            await deny(op, AUTHORIZATION_CHANGED, digests=digests)
            return None
        return await build_and_record(op, None, digests=digests)
    if outcome == "ended":  # ended meanwhile (stopped, access ended): its round is never shown
        logger.info("operation %s ended while its round %s arrived; the round is not shown", op.id, rnd.number)
        return None
    op.status = Operation.Status.AWAITING_INPUT
    await notify(op, round=rnd)
    connections_checked.set(True)  # _judge_round's hop was the drive's last
    return None
