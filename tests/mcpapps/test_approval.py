"""Approval of an MCP App's HTML by its digest (issue 31, item 1): with ``apps_require_approval``
an app's document is never handed over until a tenant admin approved exactly that HTML; a member
sees "waiting for approval"; the admin's page lists it (tool, URI, digest, domains, permissions),
approves or revokes it (a CSRF'd POST, an ``app_approved`` / ``app_revoked`` event of the tenant's
chain); a changed HTML waits for a new approval. The hostile app server of :mod:`tests.mcpapps.hostile_apps`
serves the app; the operations are real (gate, binding, audit)."""

from __future__ import annotations

import asyncio
import hashlib

from django.test import AsyncClient

from mrtrweb.models import AppApproval, AuditEvent, McpServer, Operation
from tests.mcpapps import hostile_apps


async def _login(user, **kw) -> AsyncClient:
    client = AsyncClient(**kw)
    await client.aforce_login(user)
    await client.get("/mcp/")
    return client


async def _document(client: AsyncClient, server: McpServer, call: str) -> dict:
    """Start the app of the call ``call`` and wait for its document's answer (JSON)."""
    started = await client.post(f"/mcp/operations/{call}/app/")
    assert started.status_code == 200, started.content
    read = started.json()["read"]
    for _ in range(200):
        answer = await client.get(f"/mcp/operations/{read}/app/document/?call={call}")
        body = answer.json()
        if body.get("status") != "running":
            return body
        await asyncio.sleep(0.05)
    raise AssertionError("the app's read did not end")


def _digest(version: int) -> str:
    html = hostile_apps.page(f"hostile versioned {version}", hostile_apps.PLAIN_APP)
    return "sha256:" + hashlib.sha256(html.encode()).hexdigest()


async def test_member_waits_admin_approves_by_digest_and_a_change_waits_again(seeded, hostile, sandbox):
    hostile_apps.STATE["version"] = 1
    tenant_id = seeded["servers"]["acme"].tenant_id
    server = await McpServer.objects.acreate(tenant_id=tenant_id, name="Hostile", url=hostile.url,
                                             apps_enabled=True, apps_require_approval=True)
    alice = await _login(seeded["users"]["alice"])  # the tenant's admin
    carol = await _login(seeded["users"]["carol"])  # a member
    called = await carol.post(f"/mcp/servers/{server.pk}/tools/?name=versioned", {})
    assert called.status_code == 302
    call = called["Location"].rstrip("/").rsplit("/", 1)[-1]

    # the member: waiting for approval, nothing handed over, no link to a page she may not open
    body = await _document(carol, server, call)
    assert body == {"status": "approval", "digest": _digest(1), "domains": [hostile_apps.ALLOWED], "approvals": ""}
    [pending] = [a async for a in AppApproval.objects.filter(server=server)]
    assert (pending.status, pending.resource_uri, pending.digest, pending.tool) == \
        ("pending", "ui://hostile/versioned.html", _digest(1), "versioned")
    assert pending.domains == [hostile_apps.ALLOWED] and pending.permissions == ["camera"] and pending.size > 0
    # the same HTML asked again: the same record, not another one
    assert (await _document(carol, server, call))["status"] == "approval"
    assert await AppApproval.objects.filter(server=server).acount() == 1

    # the page and the decision are the admin's alone
    url = f"/mcp/servers/{server.pk}/apps/"
    assert (await carol.get(url)).status_code == 404
    assert (await carol.post(f"{url}{pending.pk}/", {"decision": "approve"})).status_code == 404
    page = (await alice.get(url)).content.decode()
    for shown in ("ui://hostile/versioned.html", _digest(1), hostile_apps.ALLOWED, "camera", "versioned",
                  "waiting for approval"):
        assert shown in page, shown
    settings_page = (await alice.get(f"/mcp/servers/{server.pk}/settings/")).content.decode()
    assert "1 waits for approval" in settings_page
    # the admin's own page of a call links to it
    own = (await alice.post(f"/mcp/servers/{server.pk}/tools/?name=versioned", {}))["Location"].rstrip("/").rsplit("/", 1)[-1]
    assert (await _document(alice, server, own))["approvals"] == url
    # someone else's operation is not theirs to start an app of
    assert (await alice.post(f"/mcp/operations/{call}/app/")).status_code == 404

    # CSRF on the decision: refused without the token
    strict = await _login(seeded["users"]["alice"], enforce_csrf_checks=True)
    assert (await strict.post(f"{url}{pending.pk}/", {"decision": "approve"})).status_code == 403
    assert (await alice.post(f"{url}{pending.pk}/", {"decision": "sure"})).status_code == 400
    await pending.arefresh_from_db()
    assert pending.status == "pending"

    events_before = await AuditEvent.objects.filter(tenant_id=tenant_id).acount()
    decided = await alice.post(f"{url}{pending.pk}/", {"decision": "approve"})
    assert decided.status_code == 303 and decided["Location"] == f"{url}?decided=approved"
    await pending.arefresh_from_db()
    assert pending.status == "approved" and pending.decided_by_id == seeded["users"]["alice"].pk
    event = await AuditEvent.objects.filter(tenant_id=tenant_id).order_by("-sequence").afirst()
    assert (event.event, event.method, event.name, event.server_id) == \
        ("app_approved", "server/config", "ui://hostile/versioned.html", str(server.pk))
    assert event.actions == {"digest": _digest(1), "tool": "versioned"}
    assert await AuditEvent.objects.filter(tenant_id=tenant_id).acount() == events_before + 1
    # approving again changes nothing, appends nothing
    assert (await alice.post(f"{url}{pending.pk}/", {"decision": "approve"})).status_code == 303
    assert await AuditEvent.objects.filter(tenant_id=tenant_id).acount() == events_before + 1

    # approved: the member's page gets the document
    ready = await _document(carol, server, call)
    assert ready["status"] == "ready" and ready["digest"] == _digest(1)
    assert ready["document"].startswith("/mcp/apps/sandbox/doc/")

    # the server changes its HTML: a new digest waits for a new approval
    hostile_apps.STATE["version"] = 2
    changed = await _document(carol, server, call)
    assert changed["status"] == "approval" and changed["digest"] == _digest(2)
    assert await AppApproval.objects.filter(server=server, status="pending").acount() == 1
    page = (await alice.get(url)).content.decode()
    assert page.index(_digest(2)) < page.index(_digest(1))  # what waits comes first

    # revoked: the old HTML stops rendering too
    hostile_apps.STATE["version"] = 1
    assert (await alice.post(f"{url}{pending.pk}/", {"decision": "revoke"})).status_code == 303
    event = await AuditEvent.objects.filter(tenant_id=tenant_id).order_by("-sequence").afirst()
    assert event.event == "app_revoked" and event.actions["digest"] == _digest(1)
    assert (await _document(carol, server, call))["status"] == "approval"
    assert (await carol.get(f"/mcp/servers/{server.pk}/apps/999999/")).status_code in (404, 405)
    assert (await alice.post(f"{url}999999/", {"decision": "approve"})).status_code == 404
    assert await Operation.objects.filter(server=server, method="resources/read").acount() == 6
    # the chain holds with the decisions in it, and the tenant's history shows them
    from asgiref.sync import sync_to_async

    from mrtrweb.audit.events import verify_chain

    assert (await sync_to_async(verify_chain)(tenant_id)).broken is None
    history = (await alice.get("/mcp/tenants/acme/history/?event=app_approved")).content.decode()
    assert "approved an MCP App" in history and "ui://hostile/versioned.html" in history


async def test_without_approval_required_the_app_renders_and_nothing_is_recorded(seeded, hostile, sandbox):
    server = await McpServer.objects.acreate(tenant_id=seeded["servers"]["acme"].tenant_id, name="Hostile",
                                             url=hostile.url, apps_enabled=True)
    carol = await _login(seeded["users"]["carol"])
    called = await carol.post(f"/mcp/servers/{server.pk}/tools/?name=versioned", {})
    call = called["Location"].rstrip("/").rsplit("/", 1)[-1]
    assert (await _document(carol, server, call))["status"] == "ready"
    assert await AppApproval.objects.filter(server=server).acount() == 0


def test_pending_records_are_bounded(seeded):
    from mrtrweb.appapproval import records

    server = McpServer.objects.create(tenant=seeded["servers"]["acme"].tenant, name="Many", url="https://many.example/mcp",
                                      apps_enabled=True, apps_require_approval=True)
    for i in range(records.MAX_PENDING):
        assert records.status_for(server, f"ui://many/{i}.html", "sha256:" + f"{i:064x}") == "pending"
    assert records.status_for(server, "ui://many/more.html", "sha256:" + "f" * 64) == "pending"
    assert AppApproval.objects.filter(server=server).count() == records.MAX_PENDING  # not recorded past the bound
    assert records.status_for(server, "ui://many/x.html", "md5:abc") == "pending"  # not a digest: never recorded
    assert AppApproval.objects.filter(server=server).count() == records.MAX_PENDING
