"""The person's answer to a round (from the browser or the headless client, on any worker):
access, consent receipt (``shown``), authorization and server configuration re-checked, then the
retry built once (:mod:`.retries`) and sent in the background (:mod:`.calls`), or, for a legacy
round, handed to the worker holding the server's call (:mod:`.legacy`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from asgiref.sync import sync_to_async

from ..gate import GateRejection, Retry
from ..models import Operation
from .authorization import _authorization_changed
from .calls import _drive, _send_when_back
from .legacy import _answer_legacy, _is_legacy_round
from .messages import AnswerPending, AUTHORIZATION_CHANGED, DENY_MESSAGES, OperationRefused
from .retries import _build_and_record
from .runtime import _answer_refused, _load, _spawn, notify
from .revocation import _access_ended
from .stopping import deny
from .url_required import all_accepted, end_unaccepted, is_url_required_round, resend_params, URL_REQUIRED

logger = logging.getLogger("mrtrweb.operations")


def _shown_exists(op_id: Any, round_number: int) -> bool:
    from ..models import AuditEvent

    return AuditEvent.objects.filter(operation_id=op_id, round_number=round_number, event="shown").exists()


def _received_config(op_id: Any, round_number: int) -> str | None:
    from ..models import AuditEvent

    row = AuditEvent.objects.filter(operation_id=op_id, round_number=round_number, event="received") \
        .order_by("-sequence").values_list("config_digest", flat=True).first()
    return row


async def answer_round(op: Operation, responses: dict[str, Any]) -> Retry:
    """Answer the operation's open round (the person's validated answers) and send the retry in
    the background. The caller has checked that ``op`` belongs to the requesting user.

    Raises:
        GateRejection: refused by the gate (recorded as ``rejected``; nothing sent).
        OperationRefused: store or audit unavailable, or a deny condition (nothing sent).
    """
    op = await _load(op.pk)
    if await _access_ended(op):
        raise OperationRefused("denied", DENY_MESSAGES["access_revoked"])
    if not await sync_to_async(_shown_exists)(op.id, op.rounds):
        await deny(op, "missing_consent_receipt")
        raise OperationRefused("denied", DENY_MESSAGES["missing_consent_receipt"])
    # before the configuration check: a replaced tenant credential also changes the config digest,
    # and the person should read that the authorization changed
    if await _authorization_changed(op) is not None:
        await deny(op, AUTHORIZATION_CHANGED)
        raise OperationRefused("denied", DENY_MESSAGES[AUTHORIZATION_CHANGED])
    if await sync_to_async(_received_config)(op.id, op.rounds) != op.server.config_digest():
        await deny(op, "server_config_changed")
        raise OperationRefused("denied", DENY_MESSAGES["server_config_changed"])
    if await sync_to_async(_is_legacy_round)(op.id, op.rounds):
        return await _answer_legacy(op, responses)
    # a round made from a -32042 error: accepted, the original request goes again; else it ends
    url_round = await sync_to_async(is_url_required_round)(op.id, op.rounds)
    try:
        retry = await _build_and_record(op, responses, code=URL_REQUIRED if url_round else "")
    except GateRejection as exc:
        await _answer_refused(op, exc)
        raise
    except AnswerPending as pending:  # kept by this worker, sent once the database is back
        if not url_round:
            _spawn(_send_when_back(op.id, pending.retry, pending.fields))
        elif all_accepted(pending.retry):
            _spawn(_send_when_back(op.id, dataclasses.replace(pending.retry, params=resend_params(pending.retry)),
                                   pending.fields))
        # a URL round declined or cancelled: nothing to send; its row was not moved, it expires
        raise
    params = retry.params
    if url_round:
        if not all_accepted(retry):
            await end_unaccepted(op, retry)
            return retry
        params = resend_params(retry)
    await notify(op)
    _spawn(_drive(op.id, str(retry.id), params))
    return retry
