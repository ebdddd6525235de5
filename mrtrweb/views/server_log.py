"""The level of a server's log messages a person asks for on their operations with it (issue 28):
``POST servers/<id>/log-level/`` with ``level`` one of the protocol's levels, or empty for none
(:class:`~mrtrweb.models.ServerLogLevel`; applied by :mod:`mrtrweb.operations.serverlog`). Anyone
who may use the server sets their own; a level not in the list is a 400, never a 500. The form is
on the server page, where the server declares ``logging``."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.utils.translation import gettext as _

from ..models import ServerLogLevel
from .common import _server_for, _user, login_required

logger = logging.getLogger("mrtrweb.views")


async def level_of(user: object, server: object) -> str:
    """The level ``user`` asks of ``server`` (``""``: none)."""
    row = await ServerLogLevel.objects.filter(user=user, server=server).values_list("level", flat=True).afirst()
    return row or ""


@login_required
async def log_level(request: HttpRequest, server_id: int) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    user = await _user(request)
    server = await _server_for(user, server_id)
    level = request.POST.get("level", "")
    if level and level not in ServerLogLevel.Level.values:
        logger.info("log level of user %s on server %s refused: not a level", user.pk, server.pk)
        return HttpResponseBadRequest(_("Not a log level."))
    if level:
        await ServerLogLevel.objects.aupdate_or_create(user=user, server=server, defaults={"level": level})
    else:
        await ServerLogLevel.objects.filter(user=user, server=server).adelete()
    logger.info("user %s asks log messages of server %s at %s", user.pk, server.pk, level or "no level")
    return redirect("mrtrweb:server", server_id=server.pk)
