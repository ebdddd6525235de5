"""What an MCP App asks to put into a conversation (issue 32, item 5): ``ui/message`` and
``ui/update-model-context`` of an app shown on the page of a call the model proposed (the
operation's ``initiator_detail`` names its conversation) become **offers** the person accepts or
discards in that conversation; nothing of them reaches the model before.

* :func:`offer` -- the host page hands an app's request over (never the sandbox: the request comes
  from the person's own page, CSRF-checked), bounded (:data:`MAX_TEXT`, :data:`MAX_PENDING`); a
  ``context`` replaces the same app's (operation's) ``context`` still waiting, which is discarded
  (the extension: each ``ui/update-model-context`` replaces the previous one);
* :func:`decide` -- accepted once, while the conversation is not busy: a ``message`` becomes an
  ``app_message`` (given to the model as the person's message, saying it came from that server's
  app) and starts a turn; a ``context`` becomes an ``app_context`` (given to the model as data from
  that app, not instructions) without starting one.

The host side: ``static/mrtrweb/apps-requests.js`` on the operation page of such a call (the page
names the conversation only when the tenant has a model: :mod:`mrtrweb.views.operation`) hands
the app's text over through :mod:`mrtrweb.views.chat_offers` and answers the app with an
acknowledgement only; elsewhere it answers ``-32601`` (not offered).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..models import AppOffer, ChatMessage, Conversation, Operation
from ..tenancy import access
from . import choice
from .turns import clean, next_seq

#: the longest text an app may offer, characters
MAX_TEXT = 8000
#: the most offers waiting in one conversation
MAX_PENDING = 20
KINDS = {"message": "app_message", "context": "app_context"}


class OfferRefused(Exception):
    """``code``: ``not_found``, ``not_from_conversation``, ``no_model`` (the tenant has no model now),
    ``bad_offer``, ``too_many``, ``busy``, ``already_decided``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def offer(user_id: Any, operation_id: Any, kind: Any, text: Any,
          admit: Callable[[Any], None] | None = None) -> AppOffer:
    """Sync: an app's request on the page of ``operation_id`` kept as a pending offer of its conversation.

    ``admit(operation_id)``: called once the operation is the person's and of a conversation, before
    the request is looked at (the caller's per-app rate: it raises to refuse).

    Raises:
        OfferRefused: see the class; or what ``admit`` raises.
    """
    op = access.visible_operation_sync(user_id, operation_id)
    if op is None:
        raise OfferRefused("not_found")
    detail = op.initiator_detail if isinstance(op.initiator_detail, dict) else {}
    if op.initiator != Operation.Initiator.MODEL or not detail.get("conversation"):
        raise OfferRefused("not_from_conversation")
    conv = Conversation.objects.filter(pk=detail["conversation"], user_id=user_id).first()
    if conv is None:
        raise OfferRefused("not_from_conversation")
    if choice.current(op.tenant_id) is None:  # the tenant's model removed since the page was rendered
        raise OfferRefused("no_model")
    if admit is not None:
        admit(op.pk)
    if kind not in KINDS or not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
        raise OfferRefused("bad_offer")
    with transaction.atomic():
        if kind == "context":  # a newer context replaces the app's older one still waiting (ext-apps spec)
            AppOffer.objects.filter(conversation=conv, operation=op, kind="context",
                                    status=AppOffer.Status.PENDING).update(status=AppOffer.Status.DISCARDED)
        if AppOffer.objects.filter(conversation=conv, status=AppOffer.Status.PENDING).count() >= MAX_PENDING:
            raise OfferRefused("too_many")
        return AppOffer.objects.create(conversation=conv, operation=op, kind=kind, text=clean(text, MAX_TEXT))


def decide(user_id: Any, offer_id: Any, accept: bool, worker: str = "") -> tuple[AppOffer, bool]:
    """Sync: the person's decision, taken once; ``(offer, turn)``, ``turn``: a turn was started
    (an accepted ``message``: the caller runs it).

    Raises:
        OfferRefused: ``not_found``, ``already_decided``, ``busy`` (a step runs or proposals wait:
            decide it once they are done; nothing changed).
    """
    from django.core.exceptions import ValidationError

    try:
        found = AppOffer.objects.select_related("conversation", "operation__server").get(
            pk=offer_id, conversation__user_id=user_id)
    except (AppOffer.DoesNotExist, ValueError, ValidationError):
        raise OfferRefused("not_found") from None
    if access.denial(user_id, found.conversation.tenant_id):
        raise OfferRefused("not_found")
    with transaction.atomic():
        conv = Conversation.objects.select_for_update().get(pk=found.conversation_id)
        if accept and conv.state in (Conversation.State.THINKING, Conversation.State.WAITING):
            raise OfferRefused("busy")
        status = AppOffer.Status.ACCEPTED if accept else AppOffer.Status.DISCARDED
        if not AppOffer.objects.filter(pk=found.pk, status=AppOffer.Status.PENDING).update(status=status):
            raise OfferRefused("already_decided")
        found.status = status
        if not accept:
            return found, False
        ChatMessage.objects.create(conversation=conv, seq=next_seq(conv.pk), role=KINDS[found.kind], text=found.text,
                                   server_id=found.operation.server_id)
        if found.kind != "message":
            return found, False
        Conversation.objects.filter(pk=conv.pk).update(state=Conversation.State.THINKING, step_started_at=timezone.now(),
                                                       steps=0, error_code="", error_message="",
                                                       updated_at=timezone.now(), worker=worker)
    return found, True
