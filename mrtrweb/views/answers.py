"""Answering a round (POST): Accept (validate, then review), Send (the reviewed answers, once,
through :func:`mrtrweb.operations.answer_round`), Change, Decline, Cancel; sampling and roots
requests (the deprecated exception) answered only on the person's explicit approval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from ..tenancy import access
from ..audit import events as audit
from .. import conf, operations
from ..chat import withheld
from ..consent import sampling
from ..gate import ContentMismatch, GateRejection, StoreUnavailable
from ..gate.shapes import valid_create_message_result, valid_list_roots_result, within_depth
from ..gate.ids import is_strict_json
from ..models import AuditEvent, Operation
from ..consent.panels import consent_forms
from .common import (ANSWER_NOT_SENT, _panel_response, _record_foreign_attempt,
                     _record_refused_after_access, _user, login_required)
from .review import _check_review, _review_payload, _review_response, REVIEW_INVALID_MESSAGE

logger = logging.getLogger("mrtrweb.views")


@login_required
@require_POST
async def operation_answer(request: HttpRequest, op_id: Any) -> HttpResponse:
    """Answer the open round: ``action`` is ``accept``, ``decline`` or ``cancel`` (for every
    request of the card); form fields are validated by the form, then by the gate."""
    user = await _user(request)
    try:
        op, state = await operations.operation_and_state(user, op_id)  # the row, its access, its round: one hop
    except access.AccessEnded as exc:
        await _record_refused_after_access(exc, "answer")
        raise
    except Http404:
        await _record_foreign_attempt(user, op_id)
        raise
    action = request.POST.get("action")
    round_no = request.POST.get("round")
    if isinstance(state, StoreUnavailable):
        return await _panel_response(request, op, error=operations.message_for(operations.STORE_UNAVAILABLE),
                                     status=503)
    rnd = state.round if state else None
    if op.status == Operation.Status.AWAITING_INPUT and _expired(state, op):
        await operations.deny(op, "timeout")  # the round expired before this answer: denied, nothing sent
        return await _panel_response(request, op, error=operations.DENY_MESSAGES["timeout"], status=409)
    if rnd is None or op.status != Operation.Status.AWAITING_INPUT or round_no != str(rnd.number):
        return await _panel_response(request, op, error=gettext(ANSWER_NOT_SENT), status=409)
    if action not in ANSWER_ACTIONS:
        return await _panel_response(request, op, error=gettext("Choose Accept, Decline or Cancel."), status=400)
    if any(view.kind in sampling.DEPRECATED_KINDS for view in rnd.requests.values()):
        return await _answer_deprecated(request, op, rnd, action, user)
    if action in ("decline", "cancel"):  # no review: nothing but the action is sent
        return await _send(request, op, {key: {"action": action} for key in rnd.requests}, {},
                           round_number=rnd.number)
    forms = consent_forms(rnd, request.POST)
    if action == "change":
        return await _panel_response(request, op, forms=forms, status=200)
    if not all(f.is_valid() for f in forms.values()):
        await sync_to_async(_all_messages, thread_sensitive=False)(forms)  # patterns: off the event loop
        return await _panel_response(request, op, forms=forms, error=gettext("Some answers need attention."), status=400)
    responses: dict[str, Any] = {}
    for key, view in rnd.requests.items():
        if view.kind == "form":
            responses[key] = {"action": "accept", "content": forms[key].content()}
        elif view.kind == "url":
            responses[key] = {"action": "accept"}
        else:  # sampling/roots cards are answered by _answer_deprecated
            return await _panel_response(request, op, error=gettext("This request type cannot be answered here."),
                                         status=400)
    failed = await _precheck(op, rnd, forms, responses)
    if failed is not None:
        return await _panel_response(request, op, forms=forms, error=failed, status=400)
    if action == "accept":
        return await _review_response(request, op, rnd, forms, responses, {})
    refused = _check_review(request, op, rnd, responses, {})
    if refused is not None:
        return await _panel_response(request, op, forms=forms, error=refused, status=400)
    return await _send(request, op, responses, forms, round_number=rnd.number)


# -- the review step ---------------------------------------------------------------------------
# Accept with valid answers sends nothing: the person sees what will be sent (review) and chooses
# Send or Change. The review carries a signed token bound to the operation, the round and the
# digest of the exact answers; Send re-validates the posted answers and sends only if they are
# the reviewed ones.

#: the card's actions: ``accept`` (to the review), ``send`` / ``change`` (from the review),
#: ``decline`` / ``cancel`` (sent at once)
ANSWER_ACTIONS = ("accept", "send", "change", "decline", "cancel")


def _all_messages(forms: dict[str, Any]) -> None:
    """An invalid card: add the gate's messages for the fields Django accepted (see
    :meth:`SchemaForm.add_gate_errors_to_valid_fields`), so one Accept shows every problem."""
    for form in forms.values():
        if hasattr(form, "add_gate_errors_to_valid_fields"):
            form.add_gate_errors_to_valid_fields()


async def _precheck(op: Operation, rnd: Any, forms: dict[str, Any], responses: dict[str, Any]) -> str | None:
    """The gate's own checks of the answers, before they are reviewed (the gate checks them again
    when Send builds the retry): a form's content against its schema (pattern, bounds, item counts,
    formats: the per-field messages go on the form), a sampling/roots answer as a valid result.
    ``None`` when all pass; else the message shown, the refusal logged and audited (code only)
    as a refused answer is."""
    failed, code = None, ""
    for key, view in rnd.requests.items():
        response = responses.get(key)
        if view.kind == "form" and key in forms:
            try:
                await sync_to_async(forms[key].checked.validate, thread_sensitive=False)(response["content"])
            except ContentMismatch as exc:
                forms[key].add_gate_errors(exc.errors)
                failed, code = failed or gettext("Some answers need attention."), code or "input_response_schema_mismatch"
        elif view.kind in sampling.DEPRECATED_KINDS:
            valid = valid_list_roots_result if view.kind == "roots" else valid_create_message_result
            if not (valid(response) and within_depth(response) and is_strict_json(response)):
                failed, code = sampling.INVALID_ANSWER_MESSAGE, sampling.INVALID_ANSWER
    if failed is not None:
        logger.info("operation %s round %s: answer refused before review (%s)", op.id, rnd.number, code)
        try:
            await sync_to_async(audit.record)(op, "rejected", code=code, round_number=rnd.number,
                                              request_id=op.latest_request_id)
        except audit.AuditUnavailable:
            pass
    return failed


#: seconds an answer waits for its round's consent receipt while a socket that pushed the card is
#: writing it (:meth:`mrtrweb.live.consumers.OperationsConsumer.operation_update` marks that it is,
#: :func:`mrtrweb.runtime.push.receipt_pending`): a quick answer may arrive first. Then ``answer_round``
#: judges: without the receipt it refuses the answer and ends the operation (fail closed). With no
#: receipt being written nothing waits (an answer to a card never pushed is refused at once).
RECEIPT_WAIT_S = 3.0
#: seconds between two looks for it: the first, doubling up to the last
RECEIPT_POLL_S = (0.005, 0.02)


async def _await_receipt(op: Operation, round_number: int) -> None:
    """Return once the ``shown`` receipt of ``op``'s round ``round_number`` is written, or when no
    socket is writing it (:func:`mrtrweb.runtime.push.receipt_pending`), or after :data:`RECEIPT_WAIT_S`
    (never raises for its absence: ``answer_round`` refuses the answer)."""
    from ..runtime import push

    deadline = time.monotonic() + RECEIPT_WAIT_S
    shown = AuditEvent.objects.filter(operation_id=op.id, round_number=round_number, event="shown")
    pause, longest = RECEIPT_POLL_S
    while time.monotonic() < deadline and await push.receipt_pending(op.id, round_number):
        if await shown.aexists():
            return
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest)


async def _send(request: HttpRequest, op: Operation, responses: dict[str, Any], forms: dict[str, Any],
                *, round_number: int, deprecated: bool = False) -> HttpResponse:
    """Send ``responses`` as the retry of round ``round_number`` (the card answered; exactly once:
    the gate settles races, and refuses when another round is open by then)."""
    await _await_receipt(op, round_number)
    if op.initiator == Operation.Initiator.MODEL:  # before: the retry's result may come back at once
        await sync_to_async(withheld.remember)(op, responses)
    try:
        await operations.answer_round(op, responses, round_number=round_number)
    except GateRejection as exc:
        cause = exc.__cause__
        if exc.code == "input_response_schema_mismatch" and exc.key in forms and hasattr(cause, "errors"):
            forms[exc.key].add_gate_errors(cause.errors)
            return await _panel_response(request, op, forms=forms, error=gettext("Some answers need attention."), status=400)
        if deprecated and exc.code == sampling.INVALID_ANSWER:
            return await _panel_response(request, op, forms=forms, error=sampling.INVALID_ANSWER_MESSAGE, status=400)
        return await _panel_response(request, op, error=operations.message_for(exc.code), status=409)
    except operations.OperationRefused as exc:
        # 503 only when a service of ours is down; a denied or ended round is a 409
        logger.info("operation %s: answer refused (%s), HTTP %s", op.id, exc.code, exc.status)
        return await _panel_response(request, op, error=exc.message, status=exc.status)
    return redirect("mrtrweb:operation", op_id=op.id)


async def _answer_deprecated(request: HttpRequest, op: Operation, rnd: Any, action: str, user: Any) -> HttpResponse:
    """Answer a card holding an allowed sampling or roots request (the deprecated exception).

    Decline/Cancel ends the operation (denied, ``deprecated_request_refused``): no retry is sent.
    Accept needs every form valid and every sampling request approved; roots are answered with
    the server's configured roots, sampling by the configured provider (called once, for the
    review: Send sends the reviewed reply); the gate validates both."""
    if action in ("decline", "cancel"):
        await operations.deny(op, "deprecated_request_refused")
        return redirect("mrtrweb:operation", op_id=op.id)
    try:
        forms = await sync_to_async(consent_forms)(rnd, request.POST)
        valid = await sync_to_async(lambda: all(f.is_valid() for f in forms.values()))()
        if not valid:
            await sync_to_async(_all_messages)(forms)
    except (ImportError, TypeError, AttributeError) as exc:  # a misconfigured SAMPLING_PROVIDER
        logger.error("sampling provider unusable: %s", exc)
        return await _panel_response(request, op, error=sampling.PROVIDER_FAILED_MESSAGE, status=503)
    if action == "change":
        return await _panel_response(request, op, forms=forms, status=200)
    if not valid:
        return await _panel_response(request, op, forms=forms, error=gettext("Some answers need attention."), status=400)
    responses: dict[str, Any] = {}
    for key, view in rnd.requests.items():
        if view.kind == "form":
            responses[key] = {"action": "accept", "content": forms[key].content()}
        elif view.kind == "url":
            responses[key] = {"action": "accept"}
        elif view.kind == "roots":
            responses[key] = sampling.roots_answer(op.server)
    sampled = [key for key, view in rnd.requests.items() if view.kind == "sampling"]
    if action == "send":
        payload, reason = _review_payload(request, op, rnd)
        provided = payload["provided"] if payload is not None else {}
        if payload is not None and set(provided) != set(sampled):
            reason = "review token does not cover the round's sampling requests"
        if reason:
            logger.warning("operation %s round %s: Send refused, nothing sent (%s)", op.id, rnd.number, reason)
            return await _panel_response(request, op, forms=forms, error=REVIEW_INVALID_MESSAGE, status=400)
        responses.update({key: provided[key] for key in sampled})  # the reply the person reviewed
        refused = _check_review(request, op, rnd, responses, forms)
        if refused is not None:
            return await _panel_response(request, op, forms=forms, error=refused, status=400)
        return await _send(request, op, responses, forms, deprecated=True, round_number=rnd.number)
    provided = {}
    if sampled:
        provider = sampling.get_provider()
        for key in sampled:
            try:
                provided[key] = await sampling.provide(provider, dict(rnd.requests[key].params), user=user,
                                                       operation=op, form_data=forms[key].provider_data())
            except Exception:  # noqa: BLE001 -- a provider failure sends nothing
                logger.exception("sampling provider failed for operation %s", op.id)
                return await _panel_response(request, op, forms=forms, error=sampling.PROVIDER_FAILED_MESSAGE,
                                             status=502)
        responses.update(provided)
    failed = await _precheck(op, rnd, forms, responses)
    if failed is not None:
        return await _panel_response(request, op, forms=forms, error=failed, status=400)
    return await _review_response(request, op, rnd, forms, responses, provided)


def _expired(state: Any, op: Operation) -> bool:
    """Whether the open round of ``op`` is past its lifetime (not merely answered concurrently)."""
    if state is not None:
        return state.round is not None and state.round.expires_at <= time.time()
    # no binding at all: gone after its lifetime (the store keeps it TTL + a minute)
    return (timezone.now() - op.updated_at).total_seconds() > float(conf.get("TTL_S"))
