"""The servers pages (issue 29, items 1, 2, 6 and 7's limits), in process against the real demo MCP
server on loopback: who may do what (every refusal a 404, CSRF on every POST), the URL policy on
Add and Edit, disabling and removing a server with a waiting round ends it as access that ended
does (nothing sent), a personal server seen and used by its owner alone in every access path,
the configuration events in the tenant's chain (which still verifies), and the limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from mrtrweb import operations
from mrtrweb.audit.events import keyed_digest, verify_chain
from mrtrweb.authz import crypto
from mrtrweb.models import AuditEvent, McpServer, Tenant
from mrtrweb.tenancy import access
from tests.answering import DEPLOY_OK
from tests.serverconfig.ownership import allow_personal, refused_and_nothing_sent, start_round
from tests.sockets import closed_with, csrf_client, denied_in_audit, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]

FIXTURE = Path(__file__).with_name("server.json")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _config_events(tenant_id) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(tenant_id=tenant_id, event__in=AuditEvent.CONFIG).order_by("sequence"))


# -- a tenant admin's servers -----------------------------------------------------------------------

def test_tenant_admin_adds_edits_disables_enables_and_removes_a_server(seeded, policy):
    alice, url = seeded["users"]["alice"], seeded["mcp"].url
    acme = Tenant.objects.get(slug="acme")
    client = _client(alice)
    page = client.get("/mcp/tenants/acme/servers/")
    assert page.status_code == 200 and b"Demo server" in page.content
    assert b"/mcp/tenants/acme/servers/" in client.get("/mcp/").content  # the index links to it

    resp = client.post("/mcp/tenants/acme/servers/add/", {"name": "Team tools", "url": url, "protocol": "auto"})
    assert resp.status_code == 302
    server = McpServer.objects.get(tenant=acme, name="Team tools")
    assert resp["Location"] == f"/mcp/servers/{server.pk}/settings/"  # authorization, sampling, roots next
    assert server.url_policy and server.added_by == alice and server.owner is None and server.enabled
    assert client.get(resp["Location"]).status_code == 200

    # the same name twice is refused with a message, not a 500
    again = client.post("/mcp/tenants/acme/servers/add/", {"name": "Team tools", "url": url, "protocol": "auto"})
    assert again.status_code == 400 and b"exists already" in again.content

    edit = client.post(f"/mcp/servers/{server.pk}/edit/", {"name": "Team tools 2", "url": url + "?v=2",
                                                             "protocol": "2026-07-28"})
    assert edit.status_code == 302
    server.refresh_from_db()
    assert (server.name, server.url, server.protocol) == ("Team tools 2", url + "?v=2", "2026-07-28")

    assert client.post(f"/mcp/servers/{server.pk}/state/", {"enabled": "0"}).status_code == 302
    server.refresh_from_db()
    assert not server.enabled and not server.disabled_by_admin
    assert client.post(f"/mcp/servers/{server.pk}/state/", {"enabled": "1"}).status_code == 302
    server.refresh_from_db()
    assert server.enabled

    confirm = client.get(f"/mcp/servers/{server.pk}/remove/")
    assert confirm.status_code == 200 and b"Remove the server" in confirm.content
    assert McpServer.objects.filter(pk=server.pk).exists()  # a GET removes nothing
    assert client.post(f"/mcp/servers/{server.pk}/remove/").status_code == 302
    assert not McpServer.objects.filter(pk=server.pk).exists()

    # every change is an event of the tenant's chain, by alice, with the fields changed (never values)
    events = _config_events(acme.pk)
    assert [e.event for e in events] == ["server_added", "server_changed", "server_disabled", "server_enabled",
                                         "server_removed"]
    assert {e.user_digest for e in events} == {keyed_digest(f"user:{alice.pk}")}
    assert {e.method for e in events} == {"server/config"} and len({e.operation_id for e in events}) == 5
    assert {e.server_id for e in events} == {str(server.pk)}
    assert events[1].actions == {"name": "changed", "url": "changed", "protocol": "changed"}
    assert "v=2" not in json.dumps([e.actions for e in events])
    report = verify_chain(acme.pk)
    assert report.broken is None and report.events >= 5

    # the tenant's history reads it: alice added a server
    history = client.get("/mcp/tenants/acme/history/?event=&per_page=50").content.decode()
    assert "added a server" in history and "removed a server" in history and "alice" in history
    own = client.get("/mcp/history/")  # alice's own history lists her changes too, without a 500
    assert own.status_code == 200 and b"server/config" in own.content
    timeline = client.get(f"/mcp/history/operations/{events[0].operation_id}/")
    assert timeline.status_code == 200 and b"added a server" in timeline.content
    # reconciliation pairs rounds with outcomes: configuration events are no rounds, nothing to settle
    from mrtrweb.audit.reconcile import reconcile

    assert reconcile(settle=False)["unsettled"] == 0


def test_only_the_tenants_admins_manage_its_servers(seeded, policy):
    carol, bob = seeded["users"]["carol"], seeded["users"]["bob"]  # a member of acme; globex's admin
    server = seeded["servers"]["acme"]
    for user in (carol, bob):
        client = _client(user)
        for path in ("/mcp/tenants/acme/servers/", "/mcp/tenants/acme/servers/add/", f"/mcp/servers/{server.pk}/edit/",
                     f"/mcp/servers/{server.pk}/remove/", f"/mcp/servers/{server.pk}/settings/"):
            assert client.get(path).status_code == 404, (user.username, path)
        for path, data in ((f"/mcp/servers/{server.pk}/state/", {"enabled": "0"}), (f"/mcp/servers/{server.pk}/remove/", {}),
                           ("/mcp/tenants/acme/servers/add/", {"name": "x", "url": seeded["mcp"].url}),
                           ("/mcp/tenants/acme/servers/personal/", {"allow": "1"})):
            assert client.post(path, data).status_code == 404, (user.username, path)
    server.refresh_from_db()
    assert server.enabled and McpServer.objects.filter(tenant__slug="acme").count() == 1
    assert not Tenant.objects.get(slug="acme").allow_personal_servers
    assert Client().get("/mcp/tenants/acme/servers/").status_code == 302  # signed out: to the login page


def test_every_post_needs_the_csrf_token(seeded, policy):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    for path, data in ((f"/mcp/servers/{server.pk}/state/", {"enabled": "0"}), (f"/mcp/servers/{server.pk}/remove/", {}),
                       (f"/mcp/servers/{server.pk}/edit/", {"name": "x", "url": seeded["mcp"].url, "protocol": "auto"}),
                       ("/mcp/tenants/acme/servers/add/", {"name": "x", "url": seeded["mcp"].url, "protocol": "auto"}),
                       ("/mcp/tenants/acme/servers/personal/", {"allow": "1"})):
        assert client.post(path, data).status_code == 403, path
    server.refresh_from_db()
    assert server.enabled and server.name == "Demo server" and not _config_events(server.tenant_id)


def test_the_url_policy_refuses_on_add_and_edit_with_a_reason(seeded, settings):
    settings.MRTRWEB = {}  # the default: https to public addresses only
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = _client(alice)
    for url, says in ((seeded["mcp"].url, b"Plain http is not allowed"),
                      ("https://127.0.0.1:9/mcp", b"private, loopback, link-local or reserved"),
                      ("https://10.1.2.3/mcp", b"private, loopback, link-local or reserved"),
                      ("https://user:pw@example.com/mcp", b"user name or password")):
        resp = client.post("/mcp/tenants/acme/servers/add/", {"name": "New", "url": url, "protocol": "auto"})
        assert resp.status_code == 400 and says in resp.content, url
    assert not McpServer.objects.filter(name="New").exists()
    # the superuser's server at a loopback URL: renaming it does not judge its URL; re-pointing it does
    assert client.post(f"/mcp/servers/{server.pk}/edit/", {"name": "Renamed", "url": server.url,
                                                            "protocol": "auto"}).status_code == 302
    server.refresh_from_db()
    assert server.name == "Renamed" and not server.url_policy
    resp = client.post(f"/mcp/servers/{server.pk}/edit/", {"name": "Renamed", "url": "https://10.0.0.7/mcp",
                                                            "protocol": "auto"})
    assert resp.status_code == 400 and b"10.0.0.7" in resp.content
    server.refresh_from_db()
    assert server.url == seeded["mcp"].url and not server.url_policy


# -- waiting rounds end as access that ended does ------------------------------------------------------

async def test_disabling_or_removing_from_the_page_ends_a_waiting_round_and_sends_nothing(seeded, policy):
    mcp = seeded["mcp"]
    carol = await csrf_client(seeded["users"]["carol"])
    alice = await csrf_client(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    op = await start_round(carol, server)
    ws = open_socket(carol)
    assert (await ws.connect())[0]
    assert (await alice.post(f"/mcp/servers/{server.pk}/state/", {"enabled": "0"})).status_code == 302
    await closed_with(ws, access.CLOSE_CODE)
    await denied_in_audit(op, access.SERVER_DISABLED)
    await refused_and_nothing_sent(carol, op, mcp)

    assert (await alice.post(f"/mcp/servers/{server.pk}/state/", {"enabled": "1"})).status_code == 302
    op2 = await start_round(carol, server)
    assert (await alice.post(f"/mcp/servers/{server.pk}/remove/")).status_code == 302
    await operations.wait_idle()
    await denied_in_audit(op2, access.SERVER_REMOVED)
    await refused_and_nothing_sent(carol, op2, mcp)
    report = await sync_to_async(verify_chain)(server.tenant_id)
    assert report.broken is None


# -- personal servers ----------------------------------------------------------------------------------

def test_personal_servers_are_off_by_default(seeded, policy):
    carol = _client(seeded["users"]["carol"])
    assert carol.get("/mcp/tenants/acme/my-servers/add/").status_code == 404
    assert carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": seeded["mcp"].url,
                                                              "protocol": "auto"}).status_code == 404
    assert b"do not allow personal servers" in carol.get("/mcp/tenants/acme/my-servers/").content
    assert not McpServer.objects.filter(owner__isnull=False).exists()


def test_a_personal_server_is_its_owners_alone(seeded, policy):
    allow_personal(seeded)
    carol_user, alice_user = seeded["users"]["carol"], seeded["users"]["alice"]
    carol, alice = _client(carol_user), _client(alice_user)
    resp = carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Carol's tools", "url": seeded["mcp"].url,
                                                             "protocol": "auto"})
    assert resp.status_code == 302
    mine = McpServer.objects.get(owner=carol_user)
    assert mine.tenant.slug == "acme" and mine.url_policy and mine.personal

    # carol sets a bearer token of her own: sealed, write-only, an auth_changed event without it
    settings_page = carol.get(f"/mcp/servers/{mine.pk}/settings/")
    assert settings_page.status_code == 200 and b"Your bearer token" in settings_page.content
    assert b'value="oauth_client"' not in settings_page.content  # no client credentials for a person
    token = "carol-own-token-5f2b"
    saved = carol.post(f"/mcp/servers/{mine.pk}/settings/", {"auth-auth_mode": "tenant", "auth-bearer_token": token})
    assert saved.status_code == 200 and token.encode() not in saved.content
    mine.refresh_from_db()
    assert mine.auth_mode == "tenant" and crypto.unseal(mine.auth_secret_sealed) == {"bearer": token}
    assert token not in mine.auth_secret_sealed
    client_credentials = carol.post(f"/mcp/servers/{mine.pk}/settings/", {"auth-auth_mode": "oauth_client",
                                                                          "auth-oauth_client_id": "x"})
    assert client_credentials.status_code == 400
    # OAuth per user: carol connects her own account (connections are keyed by tenant, user and
    # server); nobody else may start a connection to her server
    assert carol.post(f"/mcp/servers/{mine.pk}/settings/", {"auth-auth_mode": "oauth_user"}).status_code == 200
    mine.refresh_from_db()
    assert mine.auth_mode == "oauth_user" and not mine.auth_secret_sealed  # her token removed with the mode
    assert f'/mcp/oauth/connect/{mine.pk}/'.encode() in carol.get(f"/mcp/servers/{mine.pk}/").content
    assert alice.post(f"/mcp/oauth/connect/{mine.pk}/").status_code == 404
    mine.auth_mode = "none"  # the demo server needs none
    mine.save()

    # carol sees and uses it
    assert b"Carol&#x27;s tools" in carol.get("/mcp/").content or b"Carol's tools" in carol.get("/mcp/").content
    page = carol.get(f"/mcp/servers/{mine.pk}/")
    assert page.status_code == 200 and b"personal" in page.content

    # nobody else does: not the tenant's admin, not another member, not another tenant's admin
    for other in (alice, _client(seeded["users"]["bob"])):
        assert b"Carol" not in other.get("/mcp/").content
        for path in (f"/mcp/servers/{mine.pk}/", f"/mcp/servers/{mine.pk}/settings/", f"/mcp/servers/{mine.pk}/edit/",
                     f"/mcp/servers/{mine.pk}/remove/", f"/mcp/servers/{mine.pk}/tools/deploy/"):
            assert other.get(path).status_code == 404, path
        assert other.post(f"/mcp/servers/{mine.pk}/tools/deploy/", {"arg-env": "staging"}).status_code == 404
        assert other.post(f"/mcp/servers/{mine.pk}/remove/").status_code == 404
    assert access.denial(alice_user.pk, mine.tenant_id, mine.pk) == access.SERVER_REMOVED
    assert access.denial(carol_user.pk, mine.tenant_id, mine.pk) == ""
    assert McpServer.objects.filter(pk=mine.pk).exists()

    # the tenant admin sees that it exists (name, origin, owner), never its credentials
    listing = alice.get("/mcp/tenants/acme/servers/").content.decode()
    assert "Carol" in listing and "carol" in listing and token not in listing
    events = _config_events(mine.tenant_id)
    assert [e.event for e in events] == ["tenant_changed", "server_added", "auth_changed", "auth_changed"]
    assert events[1].code == "personal" and events[2].actions == {"auth_mode": "tenant", "secret": "replaced"}
    assert events[3].actions == {"auth_mode": "oauth_user", "secret": "removed"} and events[3].auth_digest == ""
    assert token not in json.dumps([[e.reason, e.actions, e.auth_digest, e.name] for e in events])
    assert verify_chain(mine.tenant_id).broken is None


async def test_the_personal_servers_rounds_are_its_owners_and_an_admin_can_disable_it(seeded, policy):
    await sync_to_async(allow_personal)(seeded)
    mcp = seeded["mcp"]
    carol_user = seeded["users"]["carol"]
    carol = await csrf_client(carol_user)
    alice = await csrf_client(seeded["users"]["alice"])
    resp = await carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": mcp.url, "protocol": "auto"})
    assert resp.status_code == 302
    mine = await McpServer.objects.aget(owner=carol_user)
    op = await start_round(carol, mine)
    # another member (the tenant's admin) cannot read or answer it
    assert (await alice.get(f"/mcp/operations/{op.id}/")).status_code == 404
    assert (await alice.post(f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept",
                                                                       round="1"))).status_code == 404
    assert not await access.visible_server(seeded["users"]["alice"].pk, mine.pk)
    assert await access.visible_server(carol_user.pk, mine.pk)
    assert await access.actionable_operations(carol_user.pk).filter(pk=op.pk).aexists()
    assert not await access.actionable_operations(seeded["users"]["alice"].pk).filter(pk=op.pk).aexists()
    page = await carol.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200 and b"personal" in page.content

    # the admin disables it: carol's round ends, nothing is sent; carol may not enable it again
    ws = open_socket(carol)
    assert (await ws.connect())[0]
    assert (await alice.post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "0"})).status_code == 302
    await closed_with(ws, access.CLOSE_CODE)
    await denied_in_audit(op, access.SERVER_DISABLED)
    await refused_and_nothing_sent(carol, op, mcp)
    await mine.arefresh_from_db()
    assert not mine.enabled and mine.disabled_by_admin
    assert (await carol.post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "1"})).status_code == 404
    await mine.arefresh_from_db()
    assert not mine.enabled
    # the admin may enable it again; then turning personal servers off disables it and ends its round
    assert (await alice.post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "1"})).status_code == 302
    op2 = await start_round(carol, mine)
    assert (await alice.post("/mcp/tenants/acme/servers/personal/", {"allow": "0"})).status_code == 302
    await operations.wait_idle()
    await denied_in_audit(op2, access.SERVER_DISABLED)
    await mine.arefresh_from_db()
    assert not mine.enabled
    assert (await carol.post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "1"})).status_code == 404
    kinds = [e.event async for e in AuditEvent.objects.filter(tenant_id=mine.tenant_id, event__in=AuditEvent.CONFIG)
             .order_by("sequence")]
    assert kinds == ["tenant_changed", "server_added", "server_disabled", "server_enabled", "tenant_changed",
                     "server_disabled"]
    report = await sync_to_async(verify_chain)(mine.tenant_id)
    assert report.broken is None


def test_the_headless_client_never_picks_a_personal_server(seeded, policy):
    from mrtrweb.headless.client import server_for

    allow_personal(seeded)
    carol = seeded["users"]["carol"]
    acme = Tenant.objects.get(slug="acme")
    url = seeded["mcp"].url + "?personal"
    mine = McpServer.objects.create(tenant=acme, owner=carol, name="Mine", url=url)
    picked = server_for(url, acme)
    assert picked.pk != mine.pk and picked.owner_id is None


# -- limits --------------------------------------------------------------------------------------------

def test_servers_per_tenant_and_per_person_are_bounded(seeded, policy):
    policy.MRTRWEB = dict(policy.MRTRWEB, MAX_TENANT_SERVERS=2, MAX_PERSONAL_SERVERS=1)
    allow_personal(seeded)
    url = seeded["mcp"].url
    alice, carol = _client(seeded["users"]["alice"]), _client(seeded["users"]["carol"])
    assert alice.post("/mcp/tenants/acme/servers/add/", {"name": "Second", "url": url, "protocol": "auto"}).status_code == 302
    third = alice.post("/mcp/tenants/acme/servers/add/", {"name": "Third", "url": url, "protocol": "auto"})
    assert third.status_code == 400 and b"This tenant has 2 servers, the most this deployment allows" in third.content
    assert carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "A", "url": url, "protocol": "auto"}).status_code == 302
    second = carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "B", "url": url, "protocol": "auto"})
    assert second.status_code == 400 and b"You have 1 servers of your own here" in second.content
    # personal servers do not count against the tenant's bound, nor others' against carol's
    assert McpServer.objects.filter(tenant__slug="acme", owner__isnull=True).count() == 2
    alices = alice.post("/mcp/tenants/acme/my-servers/add/", {"name": "A", "url": url, "protocol": "auto"})
    assert alices.status_code == 302
    assert not McpServer.objects.filter(name__in=("Third", "B")).exists()


# -- the registry's server.json -------------------------------------------------------------------------

def test_a_server_json_fills_in_the_add_form(seeded, policy):
    alice = _client(seeded["users"]["alice"])
    with FIXTURE.open("rb") as fh:
        resp = alice.post("/mcp/tenants/acme/servers/add/", {"import": "1", "server_json_file": fh})
    body = resp.content.decode()
    assert resp.status_code == 200
    assert 'value="https://eu.weather.example.org/mcp"' in body and 'value="Weather (Example Org)"' in body
    assert "X-Api-Key" in body and "never starts processes" in body and "SSE" in body
    pasted = alice.post("/mcp/tenants/acme/servers/add/", {"import": "1", "server_json": FIXTURE.read_text()})
    assert pasted.status_code == 200 and 'value="https://eu.weather.example.org/mcp"' in pasted.content.decode()
    bad = alice.post("/mcp/tenants/acme/servers/add/", {"import": "1", "server_json": "{oops"})
    assert bad.status_code == 400 and b"This is not valid JSON (line 1, column 2)." in bad.content
    assert not McpServer.objects.filter(name__startswith="Weather").exists()  # nothing saved, nothing fetched


def test_the_settings_page_names_each_authorization_fields_mode_and_explains_roots(seeded, policy):
    """Every authorization field is in the page (the form works without script) and names the modes it
    belongs to, so settings.js hides the others; the roots box says what it takes, with an example."""
    import re

    from mrtrweb.authz.forms import FIELD_MODES

    server = seeded["servers"]["acme"]
    page = _client(seeded["users"]["alice"]).get(f"/mcp/servers/{server.pk}/settings/").content.decode()
    assert "mrtrweb/settings.js" in page
    for name, modes in FIELD_MODES.items():
        widget = re.search(rf'<(?:input|textarea)[^>]*name="(?:\w+-)?{name}"[^>]*>', page)
        assert widget, name
        assert f'data-auth-modes="{" ".join(modes)}"' in widget.group(0), widget.group(0)
        assert " hidden" not in widget.group(0)  # hidden by the script only
    assert re.search(r'<select[^>]*name="(?:\w+-)?auth_mode"', page)
    assert "Roots (a JSON list)" in page
    assert "[{&quot;uri&quot;: &quot;file:///home/alice/project&quot;, &quot;name&quot;: &quot;Project&quot;}]" in page
