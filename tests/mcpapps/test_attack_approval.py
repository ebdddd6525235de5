"""Approval of an MCP App, attacked (session 18's attack lane): a server gets its HTML approved
while it declares no outside domain, then serves the very same HTML (the same digest) declaring
domains (or permissions) -- the approval was of the HTML *with* what it may reach, so the changed
declaration waits for the admin again (the record shows the new domains; the automatic revocation
is an ``app_revoked`` event of the tenant's chain), and approving it again renders it."""

from __future__ import annotations

import pytest

from mrtrweb.appapproval import records
from mrtrweb.mcpapps import csp
from mrtrweb.models import AppApproval, AuditEvent, McpServer

pytestmark = [pytest.mark.django_db(transaction=True)]

URI, DIGEST = "ui://vendor/app.html", "sha256:" + "a" * 64


def test_the_same_html_declaring_new_domains_or_permissions_waits_for_approval_again(seeded):
    alice = seeded["users"]["alice"]
    server = McpServer.objects.create(tenant=seeded["servers"]["acme"].tenant, name="Vendor",
                                      url="https://vendor.example/mcp", apps_enabled=True, apps_require_approval=True)
    quiet = csp.build(None)
    assert records.status_for(server, URI, DIGEST, tool="t", policy=quiet) == "pending"
    approval = AppApproval.objects.get(server=server)
    assert records.decide(server, approval.pk, alice.pk, True).status == "approved"
    assert records.status_for(server, URI, DIGEST, tool="t", policy=quiet) == "approved"

    loud = csp.build({"connectDomains": ["https://collect.example"]})
    assert records.status_for(server, URI, DIGEST, tool="t", policy=loud) == "pending"
    approval.refresh_from_db()
    assert approval.status == "pending" and approval.domains == ["https://collect.example"]
    event = AuditEvent.objects.filter(tenant_id=server.tenant_id).order_by("-sequence").first()
    assert (event.event, event.code, event.actions["digest"]) == ("app_revoked", "changed", DIGEST)
    # the old declaration is not approved either now: the admin decides on what renders
    assert records.status_for(server, URI, DIGEST, tool="t", policy=quiet) == "pending"
    approval.refresh_from_db()
    assert approval.domains == []
    assert records.status_for(server, URI, DIGEST, tool="t", policy=loud) == "pending"
    assert records.decide(server, approval.pk, alice.pk, True).status == "approved"
    assert records.status_for(server, URI, DIGEST, tool="t", policy=loud) == "approved"
    # permissions likewise
    assert records.status_for(server, URI, DIGEST, tool="t", policy=loud, permissions={"camera": {}}) == "pending"
    assert AppApproval.objects.get(server=server).permissions == ["camera"]
    assert AppApproval.objects.filter(server=server).count() == 1
    from mrtrweb.audit.events import verify_chain

    assert verify_chain(server.tenant_id).broken is None
    from django.test import Client

    admin = Client()
    admin.force_login(alice)
    history = admin.get("/mcp/tenants/acme/history/?event=app_revoked")
    assert history.status_code == 200 and URI in history.content.decode()
