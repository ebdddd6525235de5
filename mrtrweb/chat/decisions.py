"""Approve, Edit, Deny (issue 32, items 3-4), and what a turn does once its proposals are decided.

* :func:`decide` -- the person's decision on a pending proposal of their own conversation, taken
  once (a second click, another tab: ``already_decided``), audited in the same transaction
  (an audit that cannot be written leaves the proposal pending and nothing starts);
* :func:`mrtrweb.chat.loop.start_call` -- an approved call is an operation started through
  :func:`mrtrweb.operations.start_operation` with ``initiator="model"`` and the conversation,
  proposal, provider and model in ``initiator_detail``: the gate, access at every phase, its rounds
  on the same consent card (pushed to the conversation's page), audit -- the one path;
* :func:`mrtrweb.chat.loop.advance` -- when every proposal of the model's last reply is decided and each call it
  started has ended, the results (or refusals) are given to the model, in its order, once, and
  the next step runs; until then the conversation waits (``follow`` watches its calls). This
  module holds their database parts (:func:`open_proposals`, :func:`give_results`).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from ..audit.events import AuditUnavailable
from ..models import ChatMessage, Conversation, Operation, Proposal
from ..tenancy import access
from . import context, events
from .turns import arguments_digest, clean, next_seq

logger = logging.getLogger("mrtrweb.chat")

#: seconds after an approval within which its operation must have started (else the worker starting
#: it is gone: the proposal is told to the model as not started)
START_GRACE_S = 30
#: the statuses of a proposal whose call was (or is being) started
STARTED = (Proposal.Status.APPROVED, Proposal.Status.EDITED, Proposal.Status.AUTO)


class DecisionRefused(Exception):
    """``code``: ``not_found`` (not the person's), ``already_decided``, ``audit_unavailable``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def proposal_for(user_id: Any, proposal_id: Any) -> Proposal:
    """Sync: the proposal of one of ``user_id``'s conversations (server, conversation loaded).

    Raises:
        DecisionRefused: ``not_found`` (another person's, another tenant's, none, or access ended).
    """
    try:
        p = Proposal.objects.select_related("conversation", "server", "message").get(
            pk=proposal_id, conversation__user_id=user_id)
    except (Proposal.DoesNotExist, ValueError, TypeError, ValidationError):  # a bad id too
        raise DecisionRefused("not_found") from None
    if access.denial(user_id, p.conversation.tenant_id):
        raise DecisionRefused("not_found")
    return p


def decide(user_id: Any, proposal_id: Any, status: str, arguments: dict[str, Any] | None = None) -> Proposal:
    """Sync: the person's decision (``approved``, ``edited`` with the changed ``arguments``, or
    ``denied``), taken once and audited in one transaction.

    Raises:
        DecisionRefused: see the class.
    """
    p = proposal_for(user_id, proposal_id)
    before = p.arguments_digest
    changes: dict[str, Any] = {"status": status, "decided_at": timezone.now()}
    if status == Proposal.Status.EDITED:
        changes.update(arguments=arguments, arguments_digest=arguments_digest(arguments))
    try:
        with transaction.atomic():
            if not Proposal.objects.filter(pk=p.pk, status=Proposal.Status.PENDING).update(**changes):
                raise DecisionRefused("already_decided")
            for key, value in changes.items():
                setattr(p, key, value)
            events.decided(p, user_id, p.message.provider, p.message.model,
                           before=before if status == Proposal.Status.EDITED else "")
    except AuditUnavailable:
        raise DecisionRefused("audit_unavailable") from None
    return p


def open_proposals(conversation_id: Any) -> tuple[str, list[Proposal]]:
    """Sync: ``(what, proposals)`` of the model's last reply: ``pending`` (the person decides),
    ``running`` (a call has not ended), ``ready`` (all decided and ended), ``none``."""
    last = ChatMessage.objects.filter(conversation_id=conversation_id, role="assistant").order_by("-seq").first()
    if last is None:
        return "none", []
    proposals = list(Proposal.objects.filter(message=last).select_related("operation", "server").order_by("position"))
    if not proposals:
        return "none", []
    if any(p.status == Proposal.Status.PENDING for p in proposals):
        return "pending", proposals
    started = STARTED
    lost_before = timezone.now() - timezone.timedelta(seconds=START_GRACE_S)
    for p in proposals:
        if p.status in started and p.operation is None and p.decided_at and p.decided_at < lost_before:
            # approved, but the worker that was starting it is gone: said to the model as not started
            logger.warning("chat: proposal %s was approved but never started; told as not started", p.pk)
            refuse(p.pk, "start_refused")
            p.status, p.refusal = Proposal.Status.REFUSED, "start_refused"
    for p in proposals:
        if p.status in started and (p.operation is None or p.operation.status in Operation.LIVE):
            return "running", proposals
    return "ready", proposals


def give_results(conversation_id: Any, proposals: list[Proposal], worker: str = "") -> bool:
    """Sync, one transaction: the conversation moves from ``waiting`` to ``thinking`` (once: the
    caller that moves it writes the results) and each proposal's result or refusal becomes a tool
    message, in the model's order. False: another caller did it, or it is not waiting."""
    with transaction.atomic():
        moved = Conversation.objects.filter(pk=conversation_id, state=Conversation.State.WAITING).update(
            state=Conversation.State.THINKING, step_started_at=timezone.now(), updated_at=timezone.now(),
            worker=worker)
        if not moved:
            return False
        for p in proposals:
            if p.answered:
                continue
            ChatMessage.objects.create(conversation_id=conversation_id, seq=next_seq(conversation_id), role="tool",
                                       text=clean(context.result_for_model(p, p.operation), 1_000_000), tool_call_id=p.call_id,
                                       server_id=p.server_id)
            Proposal.objects.filter(pk=p.pk).update(answered=True)
    return True


def refuse(proposal_id: Any, code: str) -> None:
    """Sync: the product refused the approved call (``code``: a key of :data:`mrtrweb.chat.messages.REFUSALS`)."""
    Proposal.objects.filter(pk=proposal_id).update(status=Proposal.Status.REFUSED, refusal=code)
