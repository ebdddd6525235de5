"""The tenant resolver hook (mrtrweb.tenancy): a portal's organisations become tenants and the
user's memberships follow them; a person the portal removed from an organisation has their next
answer refused (``access_revoked``), exactly as when a membership is deleted by hand; a resolver
that fails grants nothing and is logged with a stable reason, never a 500.

The embedding project with its own organisation model is tests/embedding/test_embed_orgs.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.contrib.auth import get_user_model
from django.core.checks import run_checks
from django.test import Client

from mrtrweb.tenancy import access, sync as tenancy
from mrtrweb.models import AuditEvent, Membership, Operation, Tenant
from mrtrweb.tenancy.sync import TenantGrant
from tests.caches import clear_cache
from tests import portal_orgs
from tests.answering import DEPLOY_OK, post_answer
from tests.sockets import closed_with, denied_in_audit, round_on_socket

RESOLVER = "tests.portal_orgs.resolve"
SYNC_MW = "mrtrweb.tenancy.TenantSyncMiddleware"
AUTH_MW = "django.contrib.auth.middleware.AuthenticationMiddleware"


@pytest.fixture
def portal(settings):
    """The resolver of tests/portal_orgs.py configured, its middleware after authentication."""
    portal_orgs.reset()
    settings.MRTRWEB = dict(getattr(settings, "MRTRWEB", {}) or {}, TENANT_RESOLVER=RESOLVER)
    middleware = list(settings.MIDDLEWARE)
    middleware.insert(middleware.index(AUTH_MW) + 1, SYNC_MW)
    settings.MIDDLEWARE = middleware
    clear_cache()  # no sync mark of an earlier test
    yield settings
    portal_orgs.reset()


def _user(name: str = "pat"):
    return get_user_model().objects.create_user(name, password="pw-portal-1")


def _held(user) -> dict[str, str]:
    """The user's memberships: tenant name -> role."""
    return dict(Membership.objects.filter(user=user).values_list("tenant__name", "role"))


@pytest.mark.django_db
def test_grants_create_rename_and_remove_managed_tenants_only(portal):
    user = _user()
    manual = Tenant.objects.create(name="Hand made", slug="hand-made")
    Membership.objects.create(tenant=manual, user=user, role="admin")
    Tenant.objects.create(name="Taken", slug="taken")
    portal_orgs.ORGS["pat"] = [TenantGrant("42", "Org  X", "admin"), (7, "Org Y"), TenantGrant("9", "Taken")]
    assert tenancy.sync_user(user) is True
    x, y, nine = (Tenant.objects.get(external_key=k) for k in ("42", "7", "9"))
    assert (x.name, x.slug, x.managed) == ("Org X", "org-x", True)  # white space folded
    assert (y.name, nine.name) == ("Org Y", "Taken (9)")  # tenant names are unique
    assert _held(user) == {"Hand made": "admin", "Org X": "admin", "Org Y": "member", "Taken (9)": "member"}
    assert not manual.managed

    portal_orgs.ORGS["pat"] = [TenantGrant("42", "Org X Renamed", "member")]
    assert tenancy.sync_user(user) is True
    x.refresh_from_db()
    assert (x.name, x.slug) == ("Org X Renamed", "org-x")  # the slug stays: it is in URLs
    assert _held(user) == {"Hand made": "admin", "Org X Renamed": "member"}
    assert Tenant.objects.filter(external_key="7").exists()  # the tenant stays (its servers, its audit)

    portal_orgs.ORGS["pat"] = []
    assert tenancy.sync_user(user) is True
    assert _held(user) == {"Hand made": "admin"}  # a tenant managed by hand is never touched


@pytest.mark.django_db
def test_an_adopted_tenant_follows_the_portal(portal):
    """A tenant an admin hands over (its external key set): members added by hand go too."""
    user, other = _user(), _user("sam")
    tenant = Tenant.objects.create(name="Acme", slug="acme")
    Membership.objects.create(tenant=tenant, user=other)
    tenant.external_key = "acme-org"
    tenant.save()
    portal_orgs.ORGS["pat"] = [TenantGrant("acme-org", "Acme")]
    assert tenancy.sync_user(user) and tenancy.sync_user(other)
    assert _held(user) == {"Acme": "member"} and _held(other) == {}


@pytest.mark.django_db
def test_a_failing_resolver_grants_nothing_and_removes_nothing(portal, caplog):
    user = _user()
    portal_orgs.ORGS["pat"] = [TenantGrant("42", "Org X")]
    assert tenancy.sync_user(user)
    portal_orgs.ORGS["pat"] = [TenantGrant("42", "Org X", "admin"), TenantGrant("5", "New org")]
    portal_orgs.FAIL.append(ConnectionError("portal db at 10.0.0.7 password=hunter2"))
    with caplog.at_level(logging.WARNING, logger="mrtrweb.tenancy"):
        assert tenancy.sync_user(user) is False
    assert _held(user) == {"Org X": "member"}  # no role raised, no tenant added, nothing removed
    assert not Tenant.objects.filter(external_key="5").exists()
    (record,) = [r for r in caplog.records if r.name == "mrtrweb.tenancy" and r.levelno >= logging.WARNING]
    assert "hunter2" not in caplog.text
    assert record.getMessage() == (f"tenant_resolver_failed: memberships of user {user.pk} left as they were "
                                   "(ConnectionError)")  # the class only: the message may hold anything

    portal_orgs.FAIL.clear()
    # an item that is no valid grant is left out (logged): its organisation grants nothing -- the
    # membership it would have kept is removed, no role is raised -- and the rest is applied
    for bad, what, held in (([("", "No key")], "item 0: the key must be", {}),
                            (["Org X"], "item 0 is no TenantGrant", {}),
                            ([("42", "Org X", "owner")], "item 0: the role must be one of", {}),
                            ([("42\x00", "Org X")], "item 0: the key must be", {}),
                            ([("42", "Org X"), ("5", " ")], "item 1: the name must be", {"Org X": "member"})):
        portal_orgs.ORGS["pat"] = [TenantGrant("42", "Org X")]
        assert tenancy.sync_user(user) and _held(user) == {"Org X": "member"}
        portal_orgs.ORGS["pat"] = bad
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mrtrweb.tenancy"):
            assert tenancy.sync_user(user) is True
        assert what in caplog.text and "tenant_resolver_invalid" in caplog.text, caplog.text
        assert _held(user) == held, bad
        assert not Tenant.objects.filter(external_key="5").exists()
    # no list at all: nothing changes
    portal_orgs.ORGS["pat"] = [TenantGrant("42", "Org X")]
    assert tenancy.sync_user(user)
    portal_orgs.ORGS["pat"] = None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mrtrweb.tenancy"):
        assert tenancy.sync_user(user) is False
    assert "tenant_resolver_failed" in caplog.text and "TypeError" in caplog.text
    assert _held(user) == {"Org X": "member"}

    portal.MRTRWEB = dict(portal.MRTRWEB, TENANT_RESOLVER=5)  # unusable (system check E001): nothing synced
    portal_orgs.ORGS["pat"] = []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mrtrweb.tenancy"):
        assert tenancy.sync_user(user) is False and tenancy.sync_if_stale(user) is False
    assert "tenant_resolver_failed: MRTRWEB TENANT_RESOLVER is not usable" in caplog.text
    assert _held(user) == {"Org X": "member"}


@pytest.mark.django_db
def test_sign_in_and_stale_requests_sync_and_a_failure_is_no_500(portal, client: Client):
    user = _user()
    portal_orgs.ORGS["pat"] = [TenantGrant("42", "Org X")]
    client.force_login(user)  # user_logged_in
    assert portal_orgs.ASKED == ["pat"] and _held(user) == {"Org X": "member"}
    assert client.get("/mcp/").status_code == 200
    assert portal_orgs.ASKED == ["pat"]  # fresh for TENANT_SYNC_S: the request did not ask again
    portal_orgs.ORGS["pat"] = []
    tenancy.forget(user.pk)  # as when TENANT_SYNC_S passed
    assert "Org X" not in client.get("/mcp/").content.decode()
    assert portal_orgs.ASKED == ["pat", "pat"] and _held(user) == {}
    portal_orgs.FAIL.append(RuntimeError("down"))
    tenancy.forget(user.pk)
    assert client.get("/mcp/").status_code == 200  # the portal's outage is no 500
    assert client.get("/mcp/").status_code == 200
    assert portal_orgs.ASKED == ["pat"] * 4  # not marked fresh after a failure: asked again


def test_checks_name_an_unusable_resolver_and_a_missing_middleware(settings):
    def ids():
        return {m.id for m in run_checks()}

    settings.MRTRWEB = {"TENANT_RESOLVER": "tests.portal_orgs.no_such_function"}
    assert "mrtrweb.E030" in ids()
    settings.MRTRWEB = {"TENANT_RESOLVER": "tests.portal_orgs.NOT_CALLABLE"}
    assert "mrtrweb.E030" in ids()
    settings.MRTRWEB = {"TENANT_RESOLVER": 5}
    assert "mrtrweb.E001" in ids()
    settings.MRTRWEB = {"TENANT_RESOLVER": RESOLVER}
    found = ids()
    assert "mrtrweb.W030" in found and "mrtrweb.E030" not in found
    middleware = list(settings.MIDDLEWARE)
    settings.MIDDLEWARE = [SYNC_MW, *middleware]  # before authentication: it would see no user
    assert "mrtrweb.W030" in ids()
    settings.MIDDLEWARE = middleware[:middleware.index(AUTH_MW) + 1] + [SYNC_MW] + middleware[middleware.index(AUTH_MW) + 1:]
    assert not {"mrtrweb.W030", "mrtrweb.E030"} & ids()
    settings.MRTRWEB = {}
    assert not {"mrtrweb.W030", "mrtrweb.E030"} & ids()


async def test_removed_from_the_organisation_their_next_answer_is_refused(seeded, portal):
    """carol's round waits; the portal drops her from acme's organisation; once TENANT_SYNC_S
    passed, her answer is refused: the operation ends denied, ``access_revoked:
    membership_removed`` in the audit, her socket closed, nothing sent to the server."""
    portal.MRTRWEB = dict(portal.MRTRWEB, TENANT_SYNC_S=1)
    acme = await Tenant.objects.aget(slug="acme")
    acme.external_key = "org-acme"
    await acme.asave()
    portal_orgs.ORGS["carol"] = [TenantGrant("org-acme", acme.name)]
    client, op, ws = await round_on_socket(seeded)  # she signs in (synced: still a member) and starts
    assert portal_orgs.ASKED[0] == "carol"
    review = await client.post(f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    assert review.status_code == 200 and b"review_token" in review.content  # within TENANT_SYNC_S

    portal_orgs.ORGS["carol"] = []  # the portal removed her from the organisation
    await asyncio.sleep(1.1)
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    assert resp.status_code == 404
    await closed_with(ws, access.CLOSE_CODE)
    row = await Operation.objects.aget(pk=op.pk)
    assert row.status == Operation.Status.DENIED and row.error_code == "denied"
    await denied_in_audit(op, access.MEMBERSHIP_REMOVED)
    assert await AuditEvent.objects.filter(operation_id=op.id, event="rejected", code="access_revoked").aexists()
    assert seeded["mcp"].calls[("deploy", True)] == 0  # no retry reached the MCP server
    assert not await Membership.objects.filter(tenant=acme, user=seeded["users"]["carol"]).aexists()
    assert await Membership.objects.filter(tenant=acme, user=seeded["users"]["alice"]).aexists()  # not synced yet


@pytest.mark.django_db
def test_a_removal_is_applied_whatever_the_users_other_organisations_are_named(portal, caplog):
    """The attack: a person who names organisations of their own in the portal makes every name a
    tenant could take for one of them taken ("Foo", "Foo (4)"), so that creating or renaming it
    fails -- that must not hold back their removal from another organisation."""
    pat = _user()
    portal_orgs.ORGS["pat"] = [TenantGrant("1", "Victim Org"), TenantGrant("2", "Foo"),
                               TenantGrant("3", "Foo (4)"), TenantGrant("4", "Bar")]
    assert tenancy.sync_user(pat) is True and "Victim Org" in _held(pat)
    portal_orgs.ORGS["pat"] = [TenantGrant("2", "Foo"), TenantGrant("3", "Foo (4)"), TenantGrant("4", "Foo")]
    assert tenancy.sync_user(pat) is True
    held = _held(pat)
    assert "Victim Org" not in held, held
    assert len(held) == 3 and len(set(held)) == 3  # org 4 renamed to a free name ("Foo (4) 2")
    assert Tenant.objects.get(external_key="4").name == "Foo (4) 2"

    # and through the middleware: the member the portal removed no longer sees the tenant's servers
    from django.test import Client

    from mrtrweb.models import McpServer

    portal_orgs.ORGS["pat"] = [TenantGrant("1", "Victim Org"), TenantGrant("2", "Foo")]
    client = Client()
    client.force_login(pat)
    victim = Tenant.objects.get(external_key="1")
    McpServer.objects.create(tenant=victim, name="Victim MCP", url="https://mcp.victim.example/mcp")
    assert "Victim MCP" in client.get("/mcp/").content.decode()
    portal_orgs.ORGS["pat"] = [TenantGrant("2", "Foo"), TenantGrant("3", "Foo (4)"), TenantGrant("4", "Foo")]
    tenancy.forget(pat.pk)
    assert "Victim MCP" not in client.get("/mcp/").content.decode()


@pytest.mark.django_db
def test_a_free_name_always_fits_the_column_and_control_characters_are_spaces(portal):
    pat = _user()
    portal_orgs.ORGS["pat"] = [TenantGrant("1", "Foo"), TenantGrant("k" * 150, "Foo"),
                               TenantGrant("2", "N" * 400), TenantGrant("3", "N" * 400), TenantGrant("4", "Nul\x00name")]
    assert tenancy.sync_user(pat) is True
    names = list(Tenant.objects.filter(external_key__isnull=False).values_list("name", flat=True))
    assert len(names) == 5 and len(set(names)) == 5
    assert all(len(n) <= tenancy.NAME_MAX for n in names), [len(n) for n in names]
    assert "Nul name" in names and not any("\x00" in n for n in names)

