"""The "Test" endpoint of the add and edit pages: ``POST tenants/<slug>/servers/test/``
(:data:`test_urlpatterns`, name ``mrtrweb:server-test``; the pages' ``urls`` include it).

Form fields: ``url``, ``protocol`` (``McpServer.Protocol``; anything else is ``auto``), ``bearer``
(optional, a person's own server's token: used for this test only, never kept, logged or shown),
``server`` (optional: the id of a saved server the test is about -- its last test is then kept on
it when ``url`` and ``protocol`` are the saved ones, and it is tested under that server's policy).

Who: signed in (else the sign-in redirect), CSRF checked (Django's middleware), a tenant admin of
the tenant or a member where it allows personal servers (else 404, as for a tenant one is not in);
a ``server`` must be one they may edit: a tenant server for its admins, a personal server for its
owner (else 404). Rate-limited per person (``SERVER_TESTS_PER_MINUTE``: 429 with the report).

Answer: the report (:mod:`.probe`) rendered by ``mrtrweb/serverconfig/_test_report.html``
(``text/html``, a fragment to put into the page), or the report itself as JSON when the request
``Accept``\\ s ``application/json``. A test that failed is still a 200: the report says why.
A missing or over-long ``url`` is a 400 with the fragment of a policy refusal, never a 500.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.decorators import user_passes_test
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.template.loader import render_to_string
from django.urls import path

from ..models import McpServer, Membership, Tenant
from . import testing
from .probe import refused_report

__all__ = ["test_server", "test_urlpatterns"]

logger = logging.getLogger("mrtrweb.serverconfig")


async def _signed_in(user: Any) -> bool:
    return user.is_authenticated


async def _editable(user: Any, tenant: Tenant, server_id: str) -> McpServer:
    """The saved server ``server_id`` of ``tenant`` that ``user`` may edit. Raises Http404."""
    try:
        pk = int(server_id)
    except ValueError:
        raise Http404 from None
    server = await McpServer.objects.filter(pk=pk, tenant=tenant).afirst()
    if server is None:
        raise Http404
    if server.owner_id is not None:
        if server.owner_id != user.pk:
            raise Http404
        return server
    admin = await Membership.objects.filter(user=user, tenant=tenant, role=Membership.Role.ADMIN).aexists()
    if not admin:
        raise Http404
    return server


def _answer(request: HttpRequest, report: dict[str, Any], status: int = 200) -> HttpResponse:
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(report, status=status)
    html = render_to_string("mrtrweb/serverconfig/_test_report.html", {"report": report}, request=request)
    return HttpResponse(html, status=status)


@user_passes_test(_signed_in)
async def test_server(request: HttpRequest, slug: str) -> HttpResponse:
    """See the module doc."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    user = await request.auser()
    tenant = await Tenant.objects.filter(slug=slug).afirst()
    if tenant is None or not await testing.may_test(user, tenant):
        raise Http404
    server = await _editable(user, tenant, request.POST["server"]) if request.POST.get("server") else None
    url = request.POST.get("url", "").strip()
    protocol = request.POST.get("protocol", McpServer.Protocol.AUTO)
    if not url or len(url) > 4096:
        report = refused_report(url[:4096], protocol, "policy", "no URL, or one far too long")
        report["policy_code"] = "url" if not url else "too_long"
        return _answer(request, report, status=400)
    report = await testing.run_test(user, tenant, url, protocol, request.POST.get("bearer") or None, server=server)
    if report["reason"] == "rate_limited":
        return _answer(request, report, status=429)
    if server is not None and url == server.url and report["protocol"] == server.protocol:
        await testing.arecord_test(server, report)
    return _answer(request, report)


#: include in the pages' URL patterns (namespace ``mrtrweb``)
test_urlpatterns = [
    path("tenants/<slug:slug>/servers/test/", test_server, name="server-test"),
]
