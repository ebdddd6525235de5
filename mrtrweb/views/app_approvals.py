"""The page where a tenant admin approves MCP Apps by their HTML's digest (issue 31, item 1;
:mod:`mrtrweb.appapproval`).

* ``app_approvals`` (GET) -- ``/mcp/servers/<id>/apps/``: the server's apps seen so far, pending
  first, then the :data:`MAX_DECIDED_SHOWN` newest decided ones: tool, ``ui://`` URI, digest, size, the outside domains it may reach (and those refused),
  the permissions it declared, who decided and when. Server text, shown escaped.
* ``app_decide`` (POST, CSRF) -- ``/mcp/servers/<id>/apps/<approval id>/``, ``decision=approve`` or
  ``revoke``: recorded with its audit event (``app_approved`` / ``app_revoked``), then back to the
  list (303). A bad decision: 400; no such record: 404.

Only a tenant admin of the server's tenant (for a personal server its owner): anyone else gets 404.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ..appapproval import records
from ..models import AppApproval

logger = logging.getLogger("mrtrweb.views")

#: the decided apps the page lists (the newest first, after every pending one)
MAX_DECIDED_SHOWN = 200


def _list_sync(request: HttpRequest, user: Any, server_id: int) -> HttpResponse:
    server = records.manageable_server(user, server_id)
    if server is None:
        raise Http404("No such server")
    apps = AppApproval.objects.filter(server=server).select_related("decided_by").order_by("-first_seen_at", "-pk")
    rows = list(apps.filter(status=AppApproval.Status.PENDING)[:records.MAX_PENDING]) + \
        list(apps.exclude(status=AppApproval.Status.PENDING)[:MAX_DECIDED_SHOWN])
    return TemplateResponse(request, "mrtrweb/app_approvals.html",
                            {"server": server, "approvals": rows, "decided": request.GET.get("decided", "")})


@login_required
@require_GET
async def app_approvals(request: HttpRequest, server_id: int) -> HttpResponse:
    """See the module doc."""
    user = await request.auser()
    return await sync_to_async(_list_sync)(request, user, server_id)


def _decide_sync(user: Any, server_id: int, approval_id: int, decision: str) -> HttpResponse:
    server = records.manageable_server(user, server_id)
    if server is None:
        raise Http404("No such server")
    if decision not in ("approve", "revoke"):
        logger.info("server %s: app decision refused (bad decision)", server.pk)
        return HttpResponseBadRequest("decision must be approve or revoke", content_type="text/plain")
    approval = records.decide(server, approval_id, user.pk, decision == "approve")
    if approval is None:
        raise Http404("No such app")
    return redirect(reverse("mrtrweb:app-approvals", args=[server.pk]) + f"?decided={approval.status}")


@login_required
@require_POST
async def app_decide(request: HttpRequest, server_id: int, approval_id: int) -> HttpResponse:
    """See the module doc."""
    user = await request.auser()
    response = await sync_to_async(_decide_sync)(user, server_id, approval_id, request.POST.get("decision", ""))
    if response.status_code == 302:
        response.status_code = 303
    return response
