"""Judging a result (MCP 2026-07-28, Multi Round-Trip Requests): a final result is checked
against the SDK's types and completes the operation; anything else goes to the gate
(``Gate.receive``), and an accepted ``input_required`` round is audited (``received``) and handed to
the person (the operation awaits input, the card is pushed). A ``requestState``-only round is
retried at once (:mod:`.retries`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from .. import audit
from ..gate import GateRejection, Retry, Round, StoreUnavailable
from ..gates import get_gate
from ..models import Operation
from .authorization import _authorization_changed
from .messages import AUDIT_UNAVAILABLE, AUTHORIZATION_CHANGED, INVALID_RESULT, message_for, STATE_REUSED, STATE_REUSED_REASON, STORE_UNAVAILABLE
from .retries import _build_and_record
from .runtime import _audit, _finish, notify
from .stopping import _last_answer_was_cancel, deny

logger = logging.getLogger("mrtrweb.operations")


def _is_final(raw: Any) -> bool:
    """A result that claims to be final: an object with ``resultType`` absent (older servers) or
    ``"complete"`` and no MRTR payload. Anything else goes to the gate."""
    if not isinstance(raw, dict):
        return False
    if "inputRequests" in raw or "requestState" in raw:
        return False
    return "resultType" not in raw or raw["resultType"] == "complete"


#: per method: the list of a final result that may be long (checked item by item, see _parse_final)
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


def _parse_final(method: str, raw: dict[str, Any]) -> bool:
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


def _state_seen(op: Operation, state_digest: str, round_number: int) -> tuple[bool, bool]:
    """Where the tenant's audit trail already holds ``state_digest`` (a ``received`` row), sync.

    Returns ``(replayed, reused)``: *replayed* -- another round of **this** operation received it,
    so its retry already sent that state back (denied: ``request_state_replayed``); *reused* --
    another operation of the tenant (same or another user) received it (recorded as
    :data:`STATE_REUSED`, not denied)."""
    from ..models import AuditEvent

    rows = AuditEvent.objects.filter(tenant_id=op.tenant_id, event="received", state_digest=state_digest)
    replayed = rows.filter(operation_id=op.id).exclude(round_number=round_number).exists()
    return replayed, rows.exclude(operation_id=op.id).exists()


async def _handle_result(op: Operation, request_id: str, raw: Any, *, received_code: str = "") -> Retry | None:
    """Judge one result. Returns the retry to send next (state-only rounds), or None.

    ``received_code``: the ``code`` of the round's ``received`` row when the result was not on the
    wire but made from something else the server sent (:data:`~.messages.URL_REQUIRED`: a
    ``-32042`` error, :mod:`.url_required`)."""
    gate = get_gate()
    if _is_final(raw):
        # off the event loop: a result may hold hundreds of thousands of blocks
        if not await sync_to_async(_parse_final, thread_sensitive=False)(op.method, raw):
            logger.info("operation %s: final result refused by the SDK types", op.id)
            await _finish(op, Operation.Status.FAILED, code=INVALID_RESULT, message=message_for(INVALID_RESULT))
            return None
        cancelled = await sync_to_async(_last_answer_was_cancel)(op.id)
        await _finish(op, Operation.Status.COMPLETED, result=raw, event="cancelled" if cancelled else "completed")
        return None
    try:
        rnd: Round = await sync_to_async(gate.receive)(
            tenant=str(op.tenant_id), user=str(op.user_id), request_id=request_id, origin=op.server.origin, result=raw)
    except GateRejection as exc:
        logger.info("operation %s: round refused (%s): %s", op.id, exc.code, exc.reason)
        try:
            await _audit(op, "rejected", code=exc.code, reason=exc.reason, round_number=op.rounds + 1,
                         request_id=request_id)
        except audit.AuditUnavailable:
            pass
        # The gate's reason names the refused check (never a value), e.g. which method was asked.
        await _finish(op, Operation.Status.FAILED, code=exc.code,
                      message=f"{message_for(exc.code)} Reason: {exc.reason}.")
        return None
    except StoreUnavailable:
        await _finish(op, Operation.Status.FAILED, code=STORE_UNAVAILABLE, message=message_for(STORE_UNAVAILABLE))
        return None
    op.rounds = rnd.number
    replayed, reused = (await sync_to_async(_state_seen)(op, rnd.state_digest, rnd.number)) if rnd.state_digest \
        else (False, False)
    changed = await _authorization_changed(op)
    try:
        await _audit(op, "received", code=STATE_REUSED if reused else received_code,
                     reason=STATE_REUSED_REASON if reused else "",
                     round_number=rnd.number, request_id=request_id, state_digest=rnd.state_digest,
                     schema_digests={k: v.schema_digest for k, v in rnd.requests.items() if v.schema_digest},
                     config_digest=op.server.config_digest(), auth=changed)
    except audit.AuditUnavailable:
        await deny(op, AUDIT_UNAVAILABLE)
        return None
    if changed is not None:  # a retry could only go out under another identity than the original request's
        await Operation.objects.filter(pk=op.pk).aupdate(rounds=rnd.number)
        await deny(op, AUTHORIZATION_CHANGED)
        return None
    if replayed:
        await Operation.objects.filter(pk=op.pk).aupdate(rounds=rnd.number)  # the page counts the replayed round
        await deny(op, "request_state_replayed")
        return None
    if rnd.state_only:
        await asyncio.sleep(rnd.backoff_s)
        if await _authorization_changed(op) is not None:  # changed during the back-off
            await deny(op, AUTHORIZATION_CHANGED)
            return None
        return await _build_and_record(op, None)
    from ..expiry import expires_at

    # handed to the person: no worker drives it now (any worker may take the answer), and it
    # expires by itself (mrtrweb.expiry)
    moved = await Operation.objects.filter(pk=op.pk, status=Operation.Status.RUNNING).aupdate(
        status=Operation.Status.AWAITING_INPUT, rounds=rnd.number, worker="",
        round_expires_at=expires_at(rnd.expires_at), updated_at=timezone.now())
    if not moved:  # ended meanwhile (stopped, access ended): its round is never shown
        logger.info("operation %s ended while its round %s arrived; the round is not shown", op.id, rnd.number)
        return None
    op.status = Operation.Status.AWAITING_INPUT
    await notify(op)
    return None
