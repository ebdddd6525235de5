"""The page of the rounds waiting for the person ("Waiting for you" in the navigation): each with
its server, tool and expiry, linking to its operation page (:mod:`mrtrweb.consent.pending`)."""

from __future__ import annotations

from datetime import datetime

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..consent import pending
from .common import _user, login_required


@login_required
async def waiting_rounds(request: HttpRequest) -> HttpResponse:
    """Every round awaiting the signed-in person's answer that they may still answer (up to
    :data:`mrtrweb.consent.pending.LISTED`, soonest to expire first; the count is all of them)."""
    user = await _user(request)
    count, rounds = await sync_to_async(pending.waiting_rounds)(user.pk)
    for r in rounds:  # the page shows the expiry through |when (the viewer's zone), the push the ISO text
        r["expires_at"] = datetime.fromisoformat(r["expires"]) if r["expires"] else None
    return TemplateResponse(request, "mrtrweb/waiting.html", {"count": count, "rounds": rounds,
                                                               "listed": pending.LISTED})
