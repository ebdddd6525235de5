"""Second attacker lane of issue 29 (servers people bring): a personal server's owner changing under
a waiting round (through the signals, and past them: the precompiled access SQL), the tenant's
allowance turned off while an add or an enable is in flight, the headless client's one-statement
server lookup, an admin's disable undone by remove-and-add, the superuser's admin paths (events,
the owner's token, the allowance box, disabling a personal server), and sampling on a person's
own server."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from mrtrweb import operations
from mrtrweb.audit.events import verify_chain
from mrtrweb.models import McpServer, Operation, Tenant
from mrtrweb.serverconfig import limits, views
from mrtrweb.tenancy import access
from tests.serverconfig.ownership import allow_personal, refused_and_nothing_sent, start_round
from tests.sockets import closed_with, csrf_client, denied_in_audit, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


async def test_a_personal_servers_new_owner_ends_the_old_owners_waiting_round(seeded, policy):  # noqa: F811
    """The superuser's admin gives carol's personal server to alice (``owner`` edited, a ``save``):
    carol's waiting round ends at once (denied, her socket closed) and she cannot answer it."""
    await sync_to_async(allow_personal)(seeded)
    mcp = seeded["mcp"]
    carol_user, alice_user = seeded["users"]["carol"], seeded["users"]["alice"]
    carol = await csrf_client(carol_user)
    resp = await carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": mcp.url, "protocol": "auto"})
    assert resp.status_code == 302
    mine = await McpServer.objects.aget(owner=carol_user)
    op = await start_round(carol, mine)
    ws = open_socket(carol)
    assert (await ws.connect())[0]

    mine.owner = alice_user  # what the Django admin's change form does
    await mine.asave()
    await operations.wait_idle()
    assert await access.adenial(carol_user.pk, mine.tenant_id, mine.pk) == access.SERVER_REMOVED
    await closed_with(ws, access.CLOSE_CODE)
    await denied_in_audit(op, access.SERVER_REMOVED)
    await refused_and_nothing_sent(carol, op, mcp)
    await op.arefresh_from_db()
    assert op.status == Operation.Status.DENIED
    assert (await sync_to_async(verify_chain)(mine.tenant_id)).broken is None


def test_a_personal_add_racing_the_allowance_turned_off_adds_nothing(seeded, policy, monkeypatch):  # noqa: F811
    """The admin turns personal servers off between the add's first look at the tenant and its
    locked write: the add must not leave an enabled personal server in a tenant that forbids them."""
    allow_personal(seeded)
    carol_user = seeded["users"]["carol"]
    real_lock = limits.lock_tenant

    def switched_off_meanwhile(tenant_id):
        Tenant.objects.filter(pk=tenant_id).update(allow_personal_servers=False)  # the switch committed
        return real_lock(tenant_id)

    monkeypatch.setattr(limits, "lock_tenant", switched_off_meanwhile)
    resp = _client(carol_user).post("/mcp/tenants/acme/my-servers/add/",
                                    {"name": "Late", "url": seeded["mcp"].url, "protocol": "auto"})
    assert resp.status_code in (400, 404)
    assert not McpServer.objects.filter(owner=carol_user).exists()


def test_an_owners_enable_racing_the_allowance_turned_off_enables_nothing(seeded, policy, monkeypatch):  # noqa: F811
    """Carol enables her own (self-disabled) server while the admin turns personal servers off:
    whichever commits last, her server must not end up enabled in a tenant that forbids them."""
    allow_personal(seeded)
    carol_user = seeded["users"]["carol"]
    acme = Tenant.objects.get(slug="acme")
    mine = McpServer.objects.create(tenant=acme, owner=carol_user, name="Mine", url=seeded["mcp"].url,
                                    enabled=False)
    real = views._server_as

    def switched_off_meanwhile(user, server_id):
        found = real(user, server_id)
        Tenant.objects.filter(pk=acme.pk).update(allow_personal_servers=False)  # the switch committed
        return found

    monkeypatch.setattr(views, "_server_as", switched_off_meanwhile)
    _client(carol_user).post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "1"})
    mine.refresh_from_db()
    assert not mine.enabled


async def test_an_owner_changed_past_the_signals_still_cannot_be_answered_by_the_old_owner(seeded, policy):  # noqa: F811
    """The same change made with ``QuerySet.update`` (no signal): the precompiled access SQL of the
    answer path (``access._query``: the owner condition) refuses carol's answer; nothing is sent."""
    await sync_to_async(allow_personal)(seeded)
    mcp = seeded["mcp"]
    carol_user, alice_user = seeded["users"]["carol"], seeded["users"]["alice"]
    carol = await csrf_client(carol_user)
    resp = await carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": mcp.url, "protocol": "auto"})
    assert resp.status_code == 302
    mine = await McpServer.objects.aget(owner=carol_user)
    op = await start_round(carol, mine)
    await McpServer.objects.filter(pk=mine.pk).aupdate(owner=alice_user)
    assert await sync_to_async(access.check_sql)("default") is not None  # the precompiled path, not the ORM's
    assert await sync_to_async(access.allowed_condition)("default") is not None
    await refused_and_nothing_sent(carol, op, mcp)
    assert (await access.adenial(carol_user.pk, mine.tenant_id, mine.pk)) == access.SERVER_REMOVED


# -- the configuration events of every path ---------------------------------------------------------

def test_the_superusers_admin_changes_are_events_of_the_tenants_chain(seeded, policy):  # noqa: F811
    """Changing, disabling and deleting a server in the Django admin are configuration events with
    who did it (never a value), as from the product's pages; the chain still verifies."""
    from django.contrib.auth import get_user_model

    from mrtrweb.audit.events import keyed_digest
    from mrtrweb.models import AuditEvent

    admin = get_user_model().objects.get(username="admin")
    client = _client(admin)
    server = seeded["servers"]["acme"]
    url = f"/admin/mrtrweb/mcpserver/{server.pk}/change/"
    data = {"tenant": server.tenant_id, "name": "Renamed by admin", "url": server.url + "?admin-secret-path",
            "protocol": server.protocol, "auth_mode": "none", "roots": json.dumps(server.roots)}  # "enabled" unticked
    resp = client.post(url, data)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    server.refresh_from_db()
    assert server.name == "Renamed by admin" and not server.enabled
    assert client.post(f"/admin/mrtrweb/mcpserver/{server.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not McpServer.objects.filter(pk=server.pk).exists()
    events = list(AuditEvent.objects.filter(tenant_id=server.tenant_id, event__in=AuditEvent.CONFIG)
                  .order_by("sequence"))
    kinds = [e.event for e in events]
    assert kinds == ["server_disabled", "server_changed", "server_removed"], kinds
    assert {"name", "url"} <= set(events[1].actions) and set(events[1].actions.values()) == {"changed"}
    assert {e.user_digest for e in events} == {keyed_digest(f"user:{admin.pk}")}
    assert "admin-secret-path" not in str([[e.actions, e.name, e.reason] for e in events])
    assert verify_chain(server.tenant_id).broken is None

    # a server moved to another tenant: removed from one chain, added to the other
    moved = seeded["servers"]["globex"]
    globex_id, acme_id = moved.tenant_id, server.tenant_id
    data = {"tenant": acme_id, "name": "Moved", "url": moved.url, "protocol": moved.protocol, "auth_mode": "none",
            "roots": "[]", "enabled": "on"}
    assert client.post(f"/admin/mrtrweb/mcpserver/{moved.pk}/change/", data).status_code == 302
    assert AuditEvent.objects.filter(tenant_id=globex_id, event="server_removed", server_id=str(moved.pk)).count() == 1
    assert AuditEvent.objects.filter(tenant_id=acme_id, event="server_added", server_id=str(moved.pk)).count() == 1
    assert verify_chain(globex_id).broken is None and verify_chain(acme_id).broken is None
    history = _client(seeded["users"]["alice"]).get("/mcp/tenants/acme/history/?event=&per_page=50").content.decode()
    assert "disabled a server" in history and "changed a server" in history and "admin-secret-path" not in history


def test_a_personal_server_removed_with_its_owners_account_is_an_event(seeded, policy):  # noqa: F811
    allow_personal(seeded)
    from mrtrweb.models import AuditEvent

    carol_user = seeded["users"]["carol"]
    assert _client(carol_user).post("/mcp/tenants/acme/my-servers/add/", {
        "name": "Mine", "url": seeded["mcp"].url, "protocol": "auto"}).status_code == 302
    mine = McpServer.objects.get(owner=carol_user)
    carol_user.delete()
    assert not McpServer.objects.filter(pk=mine.pk).exists()
    removed = AuditEvent.objects.filter(tenant_id=mine.tenant_id, event="server_removed", server_id=str(mine.pk))
    assert removed.count() == 1 and removed.get().code == "personal" and removed.get().reason == "owner_removed"
    assert verify_chain(mine.tenant_id).broken is None
    history = _client(seeded["users"]["alice"]).get("/mcp/tenants/acme/history/?event=&per_page=50")
    assert history.status_code == 200 and "removed a server" in history.content.decode()


# -- the headless client's precompiled lookup ---------------------------------------------------------

def test_the_headless_clients_one_statement_never_picks_a_personal_server(seeded, policy):  # noqa: F811
    """``mrtr_client --server URL`` as alice, where carol's personal server has exactly that URL:
    the one-statement path (access check beside the server's row) picks the tenant's server, as
    ``server_for`` does, never carol's (her bearer token, her rounds)."""
    from mrtrweb.headless.client import _member_server

    allow_personal(seeded)
    carol, alice = seeded["users"]["carol"], seeded["users"]["alice"]
    acme = Tenant.objects.get(slug="acme")
    url = seeded["mcp"].url + "?personal"
    mine = McpServer.objects.create(tenant=acme, owner=carol, name="Mine", url=url, auth_mode="tenant")
    assert access.check_sql("default", with_server=False) is not None  # the precompiled path is the one run
    picked = _member_server(alice, acme, url)
    assert picked.pk != mine.pk and picked.owner_id is None
    assert _member_server(alice, acme, url).pk == picked.pk  # the tenant's server, found again
    assert _member_server(carol, acme, url).owner_id is None  # carol's headless runs use the tenant's too


# -- a server an admin disabled stays disabled ---------------------------------------------------------

def test_an_owner_cannot_undo_an_admins_disable_by_removing_and_adding_it_again(seeded, policy):  # noqa: F811
    """The admin disables carol's personal server; carol may neither remove it (which would drop
    the admin's mark) nor add, or re-point another of hers, to the same origin."""
    allow_personal(seeded)
    carol_user = seeded["users"]["carol"]
    carol, alice = _client(carol_user), _client(seeded["users"]["alice"])
    url = seeded["mcp"].url
    assert carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": url,
                                                             "protocol": "auto"}).status_code == 302
    mine = McpServer.objects.get(owner=carol_user)
    assert alice.post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "0"}).status_code == 302
    assert carol.post(f"/mcp/servers/{mine.pk}/remove/").status_code == 404
    assert McpServer.objects.filter(pk=mine.pk, disabled_by_admin=True).exists()
    again = carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine again", "url": url + "?again",
                                                              "protocol": "auto"})
    assert again.status_code == 400 and b"disabled" in again.content
    second = McpServer.objects.create(tenant=mine.tenant, owner=carol_user, name="Other", url="http://127.0.0.1:9/mcp",
                                      url_policy=True)
    moved = carol.post(f"/mcp/servers/{second.pk}/edit/", {"name": "Other", "url": url + "?moved", "protocol": "auto"})
    assert moved.status_code == 400 and b"disabled" in moved.content  # re-pointing another of hers to it: refused
    second.refresh_from_db()
    assert second.url == "http://127.0.0.1:9/mcp"
    assert carol.post(f"/mcp/servers/{second.pk}/edit/", {"name": "Renamed", "url": second.url,
                                                          "protocol": "auto"}).status_code == 302  # others are fine
    # the admin removes nothing of hers, but may enable it again: then carol may remove it
    assert alice.post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "1"}).status_code == 302
    assert carol.post(f"/mcp/servers/{mine.pk}/remove/").status_code == 302


def test_a_persons_own_token_does_not_pass_to_whoever_the_server_is_given_to(seeded, policy):  # noqa: F811
    """Carol's personal server holds her own bearer token; the superuser gives the server to alice
    (or makes it the tenant's) in the admin: carol's token is dropped (an ``auth_changed`` event,
    secret ``removed``), never used for alice or for every member."""
    from django.contrib.auth import get_user_model

    from mrtrweb.authz import crypto
    from mrtrweb.models import AuditEvent

    allow_personal(seeded)
    carol_user, alice_user = seeded["users"]["carol"], seeded["users"]["alice"]
    carol = _client(carol_user)
    assert carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": seeded["mcp"].url,
                                                             "protocol": "auto"}).status_code == 302
    mine = McpServer.objects.get(owner=carol_user)
    assert carol.post(f"/mcp/servers/{mine.pk}/settings/", {"auth-auth_mode": "tenant",
                                                            "auth-bearer_token": "carol-only-token"}).status_code == 200
    mine.refresh_from_db()
    assert crypto.unseal(mine.auth_secret_sealed) == {"bearer": "carol-only-token"}
    admin = _client(get_user_model().objects.get(username="admin"))
    for new_owner in (alice_user.pk, ""):
        data = {"tenant": mine.tenant_id, "owner": new_owner, "name": mine.name, "url": mine.url, "enabled": "on",
                "protocol": mine.protocol, "auth_mode": "tenant", "roots": json.dumps(mine.roots)}
        resp = admin.post(f"/admin/mrtrweb/mcpserver/{mine.pk}/change/", data)
        assert resp.status_code == 302, resp.content.decode()[:1500]
        mine.refresh_from_db()
        assert mine.owner_id == (new_owner or None)
        assert mine.auth_secret_sealed == "" and mine.auth_secret_digest == ""
        if new_owner:  # set carol's token again for the second round: alice's now, given to the tenant
            mine.auth_secret_sealed, mine.auth_secret_digest = crypto.seal({"bearer": "alice-token"}), "d"
            mine.save()
    removed = AuditEvent.objects.filter(tenant_id=mine.tenant_id, event="auth_changed", server_id=str(mine.pk),
                                        actions__secret="removed")
    assert removed.count() == 2
    assert verify_chain(mine.tenant_id).broken is None


def test_a_personal_server_the_superuser_disabled_cannot_be_enabled_by_its_owner(seeded, policy):  # noqa: F811
    from django.contrib.auth import get_user_model

    allow_personal(seeded)
    carol_user = seeded["users"]["carol"]
    carol = _client(carol_user)
    assert carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": seeded["mcp"].url,
                                                             "protocol": "auto"}).status_code == 302
    mine = McpServer.objects.get(owner=carol_user)
    admin = _client(get_user_model().objects.get(username="admin"))
    data = {"tenant": mine.tenant_id, "owner": carol_user.pk, "name": mine.name, "url": mine.url,
            "protocol": mine.protocol, "auth_mode": "none", "roots": json.dumps(mine.roots)}  # "enabled" unticked
    assert admin.post(f"/admin/mrtrweb/mcpserver/{mine.pk}/change/", data).status_code == 302
    mine.refresh_from_db()
    assert not mine.enabled and mine.disabled_by_admin
    assert carol.post(f"/mcp/servers/{mine.pk}/state/", {"enabled": "1"}).status_code == 404
    mine.refresh_from_db()
    assert not mine.enabled
    assert admin.post(f"/admin/mrtrweb/mcpserver/{mine.pk}/change/", dict(data, enabled="on")).status_code == 302
    mine.refresh_from_db()
    assert mine.enabled and not mine.disabled_by_admin


def _admin_form_data(response) -> dict:
    """The POST data of an admin change page as it stands (every form and inline form's values)."""
    data = {}
    forms = [response.context["adminform"].form]
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update({f"{formset.prefix}-{k}": v for k, v in formset.management_form.initial.items()})
        forms += list(formset.forms)
    for form in forms:
        for name, field in form.fields.items():
            value = form[name].value()
            if value is None or value is False:
                continue
            data[form.add_prefix(name)] = "on" if value is True else value
    return data


def test_turning_personal_servers_off_in_the_admin_disables_them_as_the_page_does(seeded, policy):  # noqa: F811
    """The superuser unticks "allow personal servers" in the tenant's admin page: every personal
    server is disabled (their waiting rounds end) and the switch is an event, as from the servers page."""
    from django.contrib.auth import get_user_model

    from mrtrweb.models import AuditEvent

    allow_personal(seeded)
    carol_user = seeded["users"]["carol"]
    assert _client(carol_user).post("/mcp/tenants/acme/my-servers/add/", {
        "name": "Mine", "url": seeded["mcp"].url, "protocol": "auto"}).status_code == 302
    acme = Tenant.objects.get(slug="acme")
    admin_user = get_user_model().objects.get(username="admin")
    admin = _client(admin_user)
    url = f"/admin/mrtrweb/tenant/{acme.pk}/change/"
    data = _admin_form_data(admin.get(url))
    assert data.pop("allow_personal_servers") == "on"
    resp = admin.post(url, data)
    assert resp.status_code == 302, resp.content.decode()[:1500]
    acme.refresh_from_db()
    assert not acme.allow_personal_servers
    assert not McpServer.objects.filter(tenant=acme, owner__isnull=False, enabled=True).exists()
    switched = AuditEvent.objects.filter(tenant_id=acme.pk, event="tenant_changed").order_by("-sequence").first()
    assert switched.actions == {"allow_personal_servers": "off"}
    assert AuditEvent.objects.filter(tenant_id=acme.pk, event="server_disabled", code="personal").count() == 1
    assert verify_chain(acme.pk).broken is None


def test_a_person_cannot_allow_sampling_on_their_own_server(seeded, policy):  # noqa: F811
    """Sampling is answered by the deployment's sampling provider, allowed per server by a tenant
    admin only (``mrtrweb.consent.sampling``): a personal server's owner may set its roots, not
    allow sampling on it (nor by an extra POST field)."""
    allow_personal(seeded)
    carol_user = seeded["users"]["carol"]
    carol = _client(carol_user)
    assert carol.post("/mcp/tenants/acme/my-servers/add/", {"name": "Mine", "url": seeded["mcp"].url,
                                                             "protocol": "auto"}).status_code == 302
    mine = McpServer.objects.get(owner=carol_user)
    page = carol.get(f"/mcp/servers/{mine.pk}/settings/").content.decode()
    assert 'name="allow_sampling"' not in page and 'name="allow_roots"' in page
    saved = carol.post(f"/mcp/servers/{mine.pk}/settings/", {"allow_sampling": "on", "allow_roots": "on",
                                                             "roots": '[{"uri": "file:///home/carol"}]'})
    assert saved.status_code == 200
    mine.refresh_from_db()
    assert mine.allow_roots and not mine.allow_sampling
