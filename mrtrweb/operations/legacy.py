"""Legacy servers (2025-11-25): requests the server sends while its call is open.

A 2025-11-25 server asks its questions as server-to-client requests (``elicitation/create``,
form or URL mode; ``sampling/createMessage``; ``roots/list``) on the open call. The worker
driving the call (A) turns each one into a gate round, exactly as if the server had answered
``input_required`` with that one input request: ``gate.receive`` against the operation's current
request id (schema subset, URL checks, deprecated-method policy, TTL, single use, identity), the
``received`` event, the operation awaiting input, the card pushed. The person's answer comes
through ``answer_round`` on any worker (B): consent receipt, configuration check, ``gate.respond``
(validation, consumed once), the ``submitted`` event; then, instead of a retry, the validated
response goes to A as a sealed ``LegacyAnswer`` row (taken once), and A returns it to the server
as the result of its request. The call goes on; its final result completes the operation.

One settle key per round (a claim in the binding store; :mod:`mrtrweb.runtime.handover`) is taken by
whoever settles the round first: B before it consumes the round, A before it gives up on it
(deadline, stop, operation ended). So an answer that was consumed is always delivered (a restart
of the cache in between loses nothing), and a round that A gave up on can no longer be consumed.
B gives the key back when the gate refuses the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from ..audit import events as audit
from .. import conf
from ..text import stored_text
from ..gate import codes, GateRejection, Retry, Round, StoreUnavailable
from ..runtime.gates import get_gate
from ..runtime.handover import put_answer as _put_answer, settle as _settle, take_answer as _take_answer, unsettle as _unsettle
from ..models import Operation
from .messages import AUDIT_UNAVAILABLE, DENY_MESSAGES, LEGACY, LEGACY_KEYS, message_for, OperationRefused, STORE_UNAVAILABLE
from .retries import build_and_record
from .runtime import _answer_refused, _audit, finish_operation, load_operation, notify
from .revocation import _access_ended
from .stopping import stop_requested, deny, finish_interrupted, STOP_POLL_S

logger = logging.getLogger("mrtrweb.operations")

#: seconds A keeps waiting for an answer that B is submitting when the hold ends
LEGACY_SETTLE_GRACE_S = 30.0
#: seconds between two reads of the operation's row while a call is held
_STATUS_POLL_S = 1.0


@dataclasses.dataclass
class _Call:
    """One request of an operation in flight on this worker.

    ``gate_id`` is the id the gate's binding awaits a result for: the wire id, then, after each
    legacy round, that round's retry id (never sent: the call goes on under its wire id).
    """

    op: Operation
    wire_id: str
    gate_id: str = ""
    holding: bool = False
    rounds: int = 0
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.gate_id = self.gate_id or self.wire_id


def legacy_hold_s() -> float:
    """``MRTRWEB["LEGACY_HOLD_S"]``: the longest a legacy server's call is held open for one round."""
    return float(conf.get("LEGACY_HOLD_S"))


def _hold_key(op_id: Any) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:legacy:{op_id}:hold"


def _cache():
    from django.core.cache import caches

    return caches[conf.get("BINDING_CACHE")]


def legacy_hold(op: Operation) -> dict[str, Any] | None:
    """The hold of an operation's open legacy round, for its panel (sync): ``{"deadline": aware
    datetime, "method": ..., "round": n}``, or None when the server is not holding a call for it."""
    import datetime

    if op.status != Operation.Status.AWAITING_INPUT:
        return None
    try:
        hold = _cache().get(_hold_key(op.id))
    except Exception:  # noqa: BLE001 -- the card still shows; only the notice is missing
        logger.warning("legacy hold of operation %s unreadable", op.id)
        return None
    if not isinstance(hold, dict) or hold.get("round") != op.rounds:
        return None
    deadline = datetime.datetime.fromtimestamp(float(hold["deadline"]), tz=datetime.timezone.utc)
    return {"deadline": deadline, "method": hold.get("method", ""), "round": hold["round"]}


def _is_legacy_round(op_id: Any, round_number: int) -> bool:
    from ..models import AuditEvent

    return AuditEvent.objects.filter(operation_id=op_id, round_number=round_number, event="received",
                                     code=LEGACY).exists()


def _refusal(method: str, why: str) -> Any:
    import mcp_types

    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=f"{method} refused by the client: {why}")


def _cancelled(method: str) -> Any:
    """What the server gets when the person did not answer (stopped, ended, timed out)."""
    if method == "elicitation/create":
        return {"action": "cancel"}
    return _refusal(method, "the person did not approve it")


def _clock(ts: float) -> str:
    """``ts`` (seconds since the epoch) as the clock time the pages write (``13:04:54 UTC``,
    :func:`mrtrweb.templatetags.mrtrweb_time.utc_text`)."""
    import datetime

    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime("%H:%M:%S UTC")


async def _on_server_request(call: _Call, method: str, params: dict[str, Any]) -> Any:
    """Answer a request the server sent during ``call`` (runs on the worker holding the call).
    Requests arriving together are taken one after the other: each is a round of its own."""
    async with call.lock:
        return await _legacy_round(call, method, params)


async def _legacy_round(call: _Call, method: str, params: dict[str, Any]) -> Any:
    op = await load_operation(call.op.pk)
    if op.status != Operation.Status.RUNNING:
        logger.info("operation %s: %s from the server refused: the operation is %s", op.id, method, op.status)
        return _refusal(method, "the operation has ended")
    if await _access_ended(op):
        return _refusal(method, "the operation has ended")
    key = LEGACY_KEYS.get(method, "request")
    result = {"resultType": "input_required", "inputRequests": {key: {"method": method, "params": params}}}
    try:
        rnd: Round = await sync_to_async(get_gate().receive)(
            tenant=str(op.tenant_id), user=str(op.user_id), request_id=call.gate_id, origin=op.server.origin,
            result=result)
    except GateRejection as exc:
        logger.info("operation %s: server request %s refused (%s): %s", op.id, method, exc.code, exc.reason)
        try:
            await _audit(op, "rejected", code=exc.code, reason=exc.reason, round_number=op.rounds + 1,
                         request_id=call.gate_id)
        except audit.AuditUnavailable:
            pass
        await finish_operation(op, Operation.Status.FAILED, code=exc.code,
                      message=stored_text.WITH_REASON % {"message": message_for(exc.code), "reason": exc.reason})
        return _refusal(method, exc.code)
    except StoreUnavailable:
        await finish_operation(op, Operation.Status.FAILED, code=STORE_UNAVAILABLE, message=message_for(STORE_UNAVAILABLE))
        return _refusal(method, STORE_UNAVAILABLE)
    call.rounds += 1
    deadline = min(time.time() + legacy_hold_s(), rnd.expires_at)
    try:
        await _audit(op, "received", code=LEGACY, reason=f"{method} during the open call {call.wire_id}"[:200],
                     round_number=rnd.number, request_id=call.gate_id,
                     schema_digests={k: v.schema_digest for k, v in rnd.requests.items() if v.schema_digest},
                     config_digest=op.server.config_digest())
    except audit.AuditUnavailable:
        op.rounds = rnd.number
        await deny(op, AUDIT_UNAVAILABLE)
        return _cancelled(method)
    try:
        await sync_to_async(_cache().set)(_hold_key(op.id), {"round": rnd.number, "deadline": deadline,
                                                             "method": method}, timeout=int(legacy_hold_s()) + 120)
    except Exception as exc:  # noqa: BLE001 -- only the panel's notice reads it
        logger.warning("legacy hold of operation %s not recorded: %s", op.id, exc.__class__.__name__)
    from .expiry import expires_at

    # the worker holding the call stays named (Operation.worker): if it dies, the reaper ends this
    moved = await Operation.objects.filter(pk=op.pk, status=Operation.Status.RUNNING).aupdate(
        status=Operation.Status.AWAITING_INPUT, rounds=rnd.number, round_expires_at=expires_at(deadline),
        updated_at=timezone.now())  # the hold's deadline: the one the card, the Waiting list and the end show
    op.rounds = rnd.number
    if not moved:  # stopped between the check above and now
        await finish_operation(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                      message=DENY_MESSAGES["cancelled"])
        return _cancelled(method)
    op.status = Operation.Status.AWAITING_INPUT
    await notify(op)
    logger.info("operation %s: legacy round %s (%s) held until %s", op.id, rnd.number, method, _clock(deadline))
    call.holding = True
    try:
        return await _hold(call, op, rnd, method, deadline)
    finally:
        call.holding = False
        try:
            await sync_to_async(_cache().delete)(_hold_key(op.id))
        except Exception:  # noqa: BLE001 -- it expires on its own
            pass


async def _hold(call: _Call, op: Operation, rnd: Round, method: str, deadline: float) -> Any:
    """Hold the server's request until the person's answer comes (from any worker), the person
    stops, the operation ends, or ``deadline``; return what the server gets."""
    loop = asyncio.get_running_loop()
    next_status = loop.time() + _STATUS_POLL_S
    giving_up: str | None = None  # why A wants to end the round without an answer
    give_up_at = 0.0
    while True:
        payload = await sync_to_async(_take_answer)(op, rnd.number)
        if payload is not None:
            call.gate_id = str(payload["retry_id"])
            logger.info("operation %s: legacy round %s answered; the server gets it now", op.id, rnd.number)
            return payload["response"]
        if giving_up is None:
            if await sync_to_async(stop_requested)(op.id):
                giving_up = "stopped"
            elif loop.time() >= next_status:
                next_status = loop.time() + _STATUS_POLL_S
                status = await Operation.objects.filter(pk=op.pk).values_list("status", flat=True).afirst()
                if status in Operation.TERMINAL:
                    giving_up = "ended"
            if giving_up is None and time.time() >= deadline:
                giving_up = "timeout"
            give_up_at = time.time()
        if giving_up is not None:
            try:
                won = await sync_to_async(_settle)(op, rnd.number, giving_up)
            except StoreUnavailable:
                won = False
            if won:
                return await _give_up(op, rnd, method, giving_up, deadline)
            if time.time() - give_up_at > LEGACY_SETTLE_GRACE_S:
                logger.error("operation %s: legacy round %s was being answered but no answer came in %ss; the "
                             "server is told cancel", op.id, rnd.number, LEGACY_SETTLE_GRACE_S)
                await finish_operation(op, Operation.Status.DENIED, code="denied", reason="legacy_handover_failed",
                              event="denied", message=DENY_MESSAGES["legacy_handover_failed"])
                return _cancelled(method)
            # an answer is being submitted right now (B holds the settle key): wait for it
        await asyncio.sleep(STOP_POLL_S)


async def _give_up(op: Operation, rnd: Round, method: str, why: str, deadline: float) -> Any:
    """End a held round without an answer; the server gets cancel (elicitation) or an error."""
    if why == "timeout":
        # the deadline as the row holds it (round_expires_at: what the card and the Waiting list showed,
        # by the database's clock), so the message names the same second
        stored = await Operation.objects.filter(pk=op.pk).values_list("round_expires_at", flat=True).afirst()
        clock = _clock(stored.timestamp() if stored is not None else deadline)
        logger.info("operation %s: legacy round %s not answered by %s; the server is told cancel", op.id,
                    rnd.number, clock)
        await finish_operation(op, Operation.Status.DENIED, code="denied", reason="timeout", event="denied",
                      message=stored_text.LEGACY_TIMEOUT % {"clock": clock})
    else:
        logger.info("operation %s: legacy round %s ended (%s); the server is told cancel", op.id, rnd.number, why)
        # stopped: the stop already ended the operation (denied, cancelled); this is a no-op then
        await finish_operation(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                      message=DENY_MESSAGES["cancelled"])
    return _cancelled(method)


async def _answer_legacy(op: Operation, responses: dict[str, Any]) -> Retry:
    """``answer_round`` for a legacy round: validate and consume it with the gate, record it, and
    hand the validated response to the worker holding the server's call (no retry is sent)."""
    from ..runtime.workers import WORKER_LOST, is_alive

    if not await sync_to_async(is_alive)(op.worker):
        # the worker holding the server's call is gone, and the call with it: nothing can reach the server
        claimed = await Operation.objects.filter(pk=op.pk, status=Operation.Status.AWAITING_INPUT).aupdate(
            status=Operation.Status.INTERRUPTED, error_code=WORKER_LOST,
            error_message=message_for(WORKER_LOST), worker="", round_expires_at=None)
        if claimed:
            await finish_interrupted(op)
        raise OperationRefused(WORKER_LOST, message_for(WORKER_LOST))
    try:
        won = await sync_to_async(_settle)(op, op.rounds, "answer")
    except StoreUnavailable:
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    if not won:
        logger.info("operation %s: answer to legacy round %s refused: the round was already settled", op.id, op.rounds)
        try:
            await _audit(op, "rejected", code=codes.INACTIVE_MRTR_ROUND, reason="the server's request was already "
                         "answered or given up", round_number=op.rounds, request_id=op.latest_request_id)
        except audit.AuditUnavailable:
            pass
        raise GateRejection(codes.INACTIVE_MRTR_ROUND, "the legacy round was already settled")
    try:
        retry = await build_and_record(op, responses, retry_id=f"mrtr-legacy-{uuid.uuid4()}", code=LEGACY)
    except GateRejection as exc:
        await sync_to_async(_unsettle)(op, op.rounds)
        await _answer_refused(op, exc)
        raise
    except BaseException:
        await sync_to_async(_unsettle)(op, op.rounds)
        raise
    (key, response), = retry.params["inputResponses"].items()
    try:
        await sync_to_async(_put_answer)(op, retry.round_number, {"retry_id": str(retry.id), "response": response})
    except Exception as exc:  # noqa: BLE001
        logger.error("operation %s: legacy answer not handed over (%s)", op.id, exc.__class__.__name__)
        await sync_to_async(_unsettle)(op, retry.round_number)
        await deny(op, "legacy_handover_failed")
        raise OperationRefused(STORE_UNAVAILABLE, DENY_MESSAGES["legacy_handover_failed"]) from None
    await notify(op)
    return retry
