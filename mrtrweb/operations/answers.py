"""The person's answer to a round (from the browser or the headless client, on any worker):
access, consent receipt (``shown``), authorization and server configuration re-checked, then the
retry built once (:mod:`.retries`) and sent in the background (:mod:`.calls`), or, for a legacy
round, handed to the worker holding the server's call (:mod:`.legacy`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any


from ..audit import events as audit
from ..gate import codes, GateRejection, Retry, StoreUnavailable
from ..models import Operation
from ..runtime.gates import get_gate
from .authorization import authorization_changed_sync
from .calls import _drive, _send_when_back
from .legacy import _answer_legacy
from .messages import (AnswerPending, AUDIT_UNAVAILABLE, AUTHORIZATION_CHANGED, DENY_MESSAGES, LEGACY, message_for,
                       OperationRefused, STORE_UNAVAILABLE)
from .retries import Recorded, after_recorded, driver_of, record_and_move
from .hops import round_hop
from .runtime import _answer_refused, _spawn, notify
from .revocation import end_operation
from .stopping import deny
from .url_required import all_accepted, end_unaccepted, resend_params, URL_REQUIRED

logger = logging.getLogger("mrtrweb.operations")


@dataclasses.dataclass
class _Checked:
    """What :func:`_check_answer` found: the operation (re-read), why the answer must be refused
    (``access`` with the access ``cause``, or a deny reason), the round's kind and digests."""

    op: Operation
    refusal: str = ""
    cause: str = ""
    legacy: bool = False
    url_round: bool = False
    digests: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the binding record read with the rest (sealed), when it was: (read, sealed)
    record: tuple[bool, str | None] = (False, None)


def _check_answer(op_id: Any, known: Operation | None = None) -> _Checked:
    """Every check before an answer is built, in one thread hop (sync): the operation re-read,
    the owner's access (:func:`mrtrweb.tenancy.access.denial`), the round's consent receipt (``shown``),
    the authorization identity, the server configuration the round was received under, and
    whether the round came from a legacy server or a ``-32042`` error. With ``known`` (the
    operation as the caller holds it) all of it is read in one statement
    (:func:`.answer_reads.read_for_answer`); else the row, the access and the round's audit
    events in three."""
    from ..tenancy import access
    from ..models import AuditEvent
    from .answer_reads import read_for_answer

    reads = read_for_answer(known, LEGACY, URL_REQUIRED) if known is not None else None
    if reads is not None:
        op = reads.op
        if reads.cause:
            return _Checked(op, "access", reads.cause)
        checked = _Checked(op, legacy=reads.legacy, url_round=reads.url_round,
                           record=(reads.record_read, reads.record))
        if reads.received:
            checked.digests = {"state_digest": reads.state_digest, "schema_digests": reads.schema_digests}
        return _judge_answer(checked, reads.shown, reads.config_digest if reads.received else None)
    op = Operation.objects.select_related("server", "tenant", "user").get(pk=op_id)
    cause = access.denial(op.user_id, op.tenant_id, op.server_id)
    if cause:
        return _Checked(op, "access", cause)
    events = list(AuditEvent.objects.filter(operation_id=op.id, round_number=op.rounds, event__in=("shown", "received"))
                  .order_by("-sequence").values("event", "code", "config_digest", "state_digest", "schema_digests"))
    received = [e for e in events if e["event"] == "received"]
    checked = _Checked(op, legacy=any(e["code"] == LEGACY for e in received),
                       url_round=any(e["code"] == URL_REQUIRED for e in received))
    if received:
        checked.digests = {"state_digest": received[0]["state_digest"],
                           "schema_digests": received[0]["schema_digests"]}
    return _judge_answer(checked, any(e["event"] == "shown" for e in events),
                         received[0]["config_digest"] if received else None)


def _judge_answer(checked: _Checked, shown: bool, config_digest: str | None) -> _Checked:
    """The refusals that follow the reads: no consent receipt, another authorization identity,
    another server configuration than the round's (``config_digest``: its ``received`` event's)."""
    op = checked.op
    if not shown:
        checked.refusal = "missing_consent_receipt"
    # before the configuration check: a replaced tenant credential also changes the config digest,
    # and the person should read that the authorization changed
    elif authorization_changed_sync(op, server=op.server) is not None:  # the server as re-read above
        checked.refusal = AUTHORIZATION_CHANGED
    elif config_digest != op.server.config_digest():
        checked.refusal = "server_config_changed"
    return checked


async def answer_round(op: Operation, responses: dict[str, Any], *, round_number: int | None = None,
                       first: Callable[[], None] | None = None) -> Retry:
    """Answer the operation's open round (the person's validated answers) and send the retry in
    the background. The caller has checked that ``op`` belongs to the requesting user.
    ``round_number``: the round the person answered (the card they saw): when another round is
    open by the time the answer is checked or built, it is refused (``inactive_mrtr_round``,
    nothing sent, the operation goes on).

    Thread hops: one for every check, the retry built and recorded and the row moved for it
    (:func:`_answer_sync`; the access check right before the retry leaves is in that move's
    ``WHERE``), then the retry's own (:func:`~.calls._drive`). ``first``: sync work run in that same
    hop before the checks (the headless client's consent receipt; what it raises is raised here).

    Raises:
        GateRejection: refused by the gate (recorded as ``rejected``; nothing sent).
        OperationRefused: store or audit unavailable, or a deny condition (nothing sent).
    """
    driver = await driver_of(op, "")  # this worker's lease, before the row names it
    if first is None:
        checked, recorded = await round_hop(_answer_sync)(op, responses, round_number, driver)
    else:
        checked, recorded = await round_hop(_first_then_answer)(first, op, responses, round_number, driver)
    op = checked.op
    if round_number is not None and op.rounds != round_number:
        raise OperationRefused(codes.INACTIVE_MRTR_ROUND, message_for(codes.INACTIVE_MRTR_ROUND))
    if checked.refusal == "access":
        await end_operation(op, checked.cause)
        raise OperationRefused("denied", DENY_MESSAGES["access_revoked"])
    if checked.refusal:
        await deny(op, checked.refusal, digests=checked.digests or None)
        raise OperationRefused("denied", DENY_MESSAGES[checked.refusal])
    if checked.legacy:
        return await _answer_legacy(op, responses)
    # a round made from a -32042 error: accepted, the original request goes again; else it ends
    url_round = checked.url_round
    digests = checked.digests or None
    try:
        if isinstance(recorded, BaseException):
            raise recorded
        retry = await after_recorded(op, recorded, code=URL_REQUIRED if url_round else "", digests=digests)
    except GateRejection as exc:
        await _answer_refused(op, exc)
        raise
    except StoreUnavailable:
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    except audit.AuditUnavailable:
        await deny(op, AUDIT_UNAVAILABLE, digests=digests)
        raise OperationRefused(AUDIT_UNAVAILABLE, DENY_MESSAGES[AUDIT_UNAVAILABLE]) from None
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
    # read above, its owner's access checked by the row's move right before this: checked again
    # before the retry goes out only when something is waited for first (a connection, a token).
    # Started before the push, which it need not wait for (the drive runs at the push's first await;
    # the watchers' change is queued before that, so they see it before any change the drive makes)
    _spawn(_drive(op.id, str(retry.id), params, checked=op))
    await notify(op)
    return retry


def _first_then_answer(first: Callable[[], None], *args: Any) -> tuple[_Checked, Recorded | BaseException | None]:
    """``first()``, then :func:`_answer_sync` (``*args``), in one thread hop (sync)."""
    first()
    return _answer_sync(*args)


def _answer_sync(op: Operation, responses: dict[str, Any], round_number: int | None,
                 driver: dict[str, str]) -> tuple[_Checked, Recorded | BaseException | None]:
    """:func:`answer_round`'s database and binding work in one thread hop: every check
    (:func:`_check_answer`), then, when nothing refuses the answer and the round is not a legacy
    one, the retry built, its ``submitted`` event written and read back, and the row moved for it
    while the owner may act (:func:`~.retries.record_and_move`). The gate's, the store's and the
    audit's refusals come back as the exception (None: nothing was built)."""
    checked = _check_answer(op.pk, op)
    found = checked.op
    if (round_number is not None and found.rounds != round_number) or checked.refusal or checked.legacy:
        return checked, None
    gate = get_gate()
    read, sealed = checked.record
    # the binding record read with the checks (one statement): the retry is built from it
    primed = gate.store.primed(str(found.tenant_id), str(found.pk), sealed) if read else contextlib.nullcontext()
    try:
        with primed:
            return checked, record_and_move(found, gate, None, responses, URL_REQUIRED if checked.url_round else "",
                                            checked.digests or None, found.rounds, driver, check_access=True)
    except (GateRejection, StoreUnavailable, audit.AuditUnavailable) as exc:
        return checked, exc
