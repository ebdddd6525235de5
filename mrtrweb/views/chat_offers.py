"""An MCP App's offers to a conversation (issue 32, item 5; :mod:`mrtrweb.chat.app_offers`): the
host page hands an app's ``ui/message`` / ``ui/update-model-context`` over (a CSRF-checked POST of
the person's own page, never of the sandbox), and the person accepts or discards each offer in the
conversation. JSON answers for the hand-over: ``{"ok": true, "offer", "conversation"}``, or
``{"ok": false, "code"}`` with 404 (``not_found``), 409 (``not_from_conversation``, ``no_model``,
``too_many``), 403 (``apps_off``, ``not_rendered``: the app may not act now, as for its calls)
or 400 (``bad_offer``), or 429 (``rate_limited``: the hand-overs of one app -- its page's operation,
once it is the person's and of a conversation -- count in the same ``APPS_CALLS_PER_SECOND`` as its
calls and sampling, :func:`mrtrweb.appcalls.rights.take_slot`)."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from ..appcalls import AppCallRefused, rights
from ..appcalls.host import app_host
from ..chat import app_offers, loop, turns
from ..chat.app_offers import OfferRefused
from .common import _user, login_required

logger = logging.getLogger("mrtrweb.views")

_STATUS = {"not_found": 404, "not_from_conversation": 409, "no_model": 409, "too_many": 409, "bad_offer": 400}
OFFER_MESSAGES = {
    "busy": _("Wait until the model has replied and you have decided its proposals, then add the app's text."),
    "already_decided": _("This was already decided."),
}


@login_required
@require_POST
async def app_offer(request: HttpRequest) -> HttpResponse:
    user = await _user(request)
    try:
        # the app may still act now: apps on for its server, rendered, its approval not revoked (as
        # every request of an app: mrtrweb.views.app_calls); Http404 for another person's operation
        try:
            await app_host(user, request.POST.get("operation", ""))
        except Http404:
            raise OfferRefused("not_found") from None
        found = await sync_to_async(app_offers.offer)(user.pk, request.POST.get("operation"), request.POST.get("kind"),
                                                     request.POST.get("text"), admit=rights.take_slot)
    except AppCallRefused as exc:  # apps_off / not_rendered, or rate_limited (APPS_CALLS_PER_SECOND)
        logger.info("app of operation %s: hand-over refused (%s)", request.POST.get("operation", "")[:40], exc.code)
        return JsonResponse({"ok": False, "code": exc.code}, status=exc.status)
    except OfferRefused as exc:
        return JsonResponse({"ok": False, "code": exc.code}, status=_STATUS.get(exc.code, 400))
    from ..chat import push

    await push.changed(user.pk, found.conversation_id)
    return JsonResponse({"ok": True, "offer": str(found.pk), "conversation": str(found.conversation_id)})


async def _decide(request: HttpRequest, offer_id: Any, accept: bool) -> HttpResponse:
    user = await _user(request)
    try:
        found, turn = await sync_to_async(app_offers.decide)(user.pk, offer_id, accept,
                                                             await turns.step_worker() if accept else "")
    except OfferRefused as exc:
        if exc.code == "not_found":
            raise Http404("No such offer") from None
        messages.error(request, str(OFFER_MESSAGES.get(exc.code, "")))
        return await _back(user, offer_id)
    if turn:
        turns.spawn(loop.run(found.conversation_id, user.pk))
    return redirect("mrtrweb:chat", conversation_id=found.conversation_id)


async def _back(user: Any, offer_id: Any) -> HttpResponse:
    from ..models import AppOffer

    found = await AppOffer.objects.filter(pk=offer_id, conversation__user_id=user.pk).afirst()
    if found is None:
        raise Http404("No such offer")
    return redirect("mrtrweb:chat", conversation_id=found.conversation_id)


@login_required
@require_POST
async def offer_accept(request: HttpRequest, offer_id: Any) -> HttpResponse:
    return await _decide(request, offer_id, True)


@login_required
@require_POST
async def offer_discard(request: HttpRequest, offer_id: Any) -> HttpResponse:
    return await _decide(request, offer_id, False)
