"""The person's and the admin's authorization pages (issue 13, items 1, 3, 4 and 5): Connect,
Continue, the callback, Connections, Disconnect, run again, the CIMD document, the server settings'
write-only secrets, and the admin.

Real parts: Django's test client through the whole middleware stack (CSRF enforced where a test
says so), the database, the real demo MCP server for the calls that run. Where a view needs the
OAuth exchange (a real authorization server: branch ``as``), the **service functions are
monkeypatched** (``start_connect``, ``finish_connect``, ``disconnect``): those tests check the
views only. The callback refusals (unknown, used, another person's, another session's state) run
against the real :func:`mrtrweb.authz.service.finish_connect` (branch ``core``): they are refused
before any exchange, so no authorization server is needed for them (the real flow end to end:
``tests/mcp/test_auth_flow.py``, and the Chromium tests of branch ``as``).
"""

from __future__ import annotations

import datetime
import json
import secrets

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from mrtrweb import operations
from mrtrweb.authz import browser, crypto, service
from mrtrweb.authz.forms import secret_digest
from mrtrweb.models import McpServer, OAuthConnection, Operation, PendingAuthorization, Tenant
from tests.authz.connecting import (
    ACCESS, REFRESH, authz_client, csrf_field, failed_echo, oauth_server, stored_connection,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

AS_ORIGIN = "https://as.example.test:443"


def _session_key(client: AsyncClient) -> str:
    return client.cookies["sessionid"].value


async def _pending(user, server, session_key: str, *, state: str = "", return_to: str = "", **extra
                   ) -> PendingAuthorization:
    """A started flow as ``service.start_connect`` stores it (state by digest, flow sealed)."""
    state = state or secrets.token_urlsafe(24)
    fields = dict(state_digest=service.keyed_digest("state", state), tenant_id=server.tenant_id, user=user,
                  server=server, session_digest=browser.session_digest(session_key), authorization_origin=AS_ORIGIN,
                  flow_sealed=crypto.seal({"state": state, "code_verifier": "V" * 50,
                                           "authorization_url": f"{AS_ORIGIN}/authorize?state={state}&x=1"}),
                  return_to=return_to, expires_at=timezone.now() + datetime.timedelta(minutes=10))
    fields.update(extra)
    return await PendingAuthorization.objects.acreate(**fields)


@pytest.fixture
def fake_start(monkeypatch):
    """``service.start_connect`` as core documents it: one pending row for this person and session."""
    calls = []

    async def start_connect(*, user, tenant, server, session_key, return_to, redirect_uri, scope=None):
        row = await _pending(user, server, session_key, return_to=return_to)
        calls.append({"return_to": return_to, "redirect_uri": redirect_uri, "server": server.pk, "pending": row.pk})
        return service.ConnectStart(pending_id=row.pk, authorization_url="(not shown)", authorization_origin=AS_ORIGIN)

    monkeypatch.setattr(service, "start_connect", start_connect)
    return calls


class _Done:
    def __init__(self, server_id, return_to):
        self.server_id, self.return_to = server_id, return_to


@pytest.fixture
def fake_finish(monkeypatch):
    """``service.finish_connect`` that succeeds for the flow named ``return_to`` (view-level tests only)."""
    box = {}

    async def finish_connect(*, user, session_key, query):
        box["query"] = dict(query)
        return _Done(box["server_id"], box["return_to"])

    monkeypatch.setattr(service, "finish_connect", finish_connect)
    return box


# --- CSRF on every POST --------------------------------------------------------------------------

async def test_every_authorization_post_needs_the_csrf_token(seeded, fake_start, monkeypatch):
    server = await oauth_server(seeded)
    alice = seeded["users"]["alice"]
    await stored_connection(alice, server)
    op = await Operation.objects.acreate(tenant_id=server.tenant_id, user=alice, server=server, method="tools/call",
                                         name="echo", params={"name": "echo", "arguments": {"text": "x"}},
                                         request_id="r", latest_request_id="r", status="failed",
                                         error_code="authorization_required")
    disconnected = []
    monkeypatch.setattr(service, "disconnect", lambda **kw: disconnected.append(kw))
    client = await authz_client(alice, strict=True)
    for url in (f"/mcp/oauth/connect/{server.pk}/", f"/mcp/connections/{server.pk}/disconnect/",
                f"/mcp/operations/{op.id}/rerun/", f"/mcp/servers/{server.pk}/settings/"):
        resp = await client.post(url, {"auth-auth_mode": "none"})
        assert resp.status_code == 403, url
    assert fake_start == [] and disconnected == []
    assert await Operation.objects.acount() == 1 and await PendingAuthorization.objects.acount() == 0
    assert (await McpServer.objects.aget(pk=server.pk)).auth_mode == "oauth_user"
    assert seeded["mcp"].log.tool_calls() == []
    # with the token, Connect goes through
    assert (await client.post(f"/mcp/oauth/connect/{server.pk}/", csrf_field(client))).status_code == 200


# --- Connect, Continue ---------------------------------------------------------------------------

async def test_server_page_offers_connect_and_fetches_no_listing(seeded):
    server = await oauth_server(seeded)
    client = await authz_client(seeded["users"]["alice"])
    page = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert f"Connect to {server.name} ({server.origin})" in page
    assert f'action="/mcp/oauth/connect/{server.pk}/"' in page and "Connect to see this server's tools." in page
    assert "could not be reached" not in page
    assert seeded["mcp"].log.records() == []  # no listing without a connection


async def test_server_page_shows_the_connection_and_disconnect(seeded):
    server = await oauth_server(seeded)
    alice = seeded["users"]["alice"]
    await stored_connection(alice, server)
    client = await authz_client(alice)
    page = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert "Connected with your account at" in page and AS_ORIGIN in page
    assert f'action="/mcp/connections/{server.pk}/disconnect/"' in page and "Connect to " not in page
    assert ACCESS not in page and REFRESH not in page
    # carol (same tenant) has no connection of her own: she is asked to connect
    carol_page = (await (await authz_client(seeded["users"]["carol"])).get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert f"Connect to {server.name}" in carol_page and "Connected with your account" not in carol_page


async def test_connect_shows_the_authorization_origin_then_continue_redirects(seeded, fake_start):
    server = await oauth_server(seeded)
    client = await authz_client(seeded["users"]["alice"], strict=True)
    resp = await client.post(f"/mcp/oauth/connect/{server.pk}/", {**csrf_field(client), "return_to": "/mcp/history/"})
    page = resp.content.decode()
    assert resp.status_code == 200
    assert "You are going to sign in at" in page and AS_ORIGIN in page and server.origin in page
    assert "Continue to sign in" in page and "/authorize" not in page and "state=" not in page  # no link to it
    (call,) = fake_start
    assert call["return_to"] == "/mcp/history/" and call["redirect_uri"] == "http://testserver/mcp/oauth/callback/"
    go = await client.get(f"/mcp/oauth/go/{call['pending']}/")
    assert go.status_code == 302 and go["Location"].startswith(f"{AS_ORIGIN}/authorize?state=")
    assert go["Cache-Control"] == "no-store" and go["Referrer-Policy"] == "no-referrer"


@pytest.mark.parametrize("return_to", ["https://evil.example/", "//evil.example/x", "/\\evil.example", "http:/x",
                                       "javascript:alert(1)", "/mcp/\nx", "relative/path", "/" + "a" * 2000])
async def test_connect_refuses_a_return_to_off_this_site(seeded, fake_start, return_to):
    server = await oauth_server(seeded)
    client = await authz_client(seeded["users"]["alice"])
    assert (await client.post(f"/mcp/oauth/connect/{server.pk}/", {"return_to": return_to})).status_code == 200
    assert fake_start[0]["return_to"] == f"/mcp/servers/{server.pk}/"


async def test_connect_refused_for_other_modes_and_other_tenants(seeded, fake_start):
    alice = await authz_client(seeded["users"]["alice"])
    plain = seeded["servers"]["acme"]  # auth mode none
    resp = await alice.post(f"/mcp/oauth/connect/{plain.pk}/")
    assert resp.status_code == 400 and "not_oauth" in resp.content.decode()
    other = await oauth_server(seeded, "globex")
    assert (await alice.post(f"/mcp/oauth/connect/{other.pk}/")).status_code == 404
    assert fake_start == []


async def test_continue_refused_for_another_person_session_used_or_expired_flow(seeded):
    server = await oauth_server(seeded)
    alice, carol = seeded["users"]["alice"], seeded["users"]["carol"]
    client = await authz_client(alice)
    mine = await _pending(alice, server, _session_key(client))
    other_session = await _pending(alice, server, "another-session-key")
    used = await _pending(alice, server, _session_key(client), used_at=timezone.now())
    expired = await _pending(alice, server, _session_key(client), expires_at=timezone.now() - datetime.timedelta(seconds=1))
    carol_client = await authz_client(carol)
    carols = await _pending(carol, server, _session_key(carol_client))
    for row in (other_session, used, expired, carols):
        resp = await client.get(f"/mcp/oauth/go/{row.pk}/")
        assert resp.status_code == 400 and "state_invalid" in resp.content.decode(), row
        assert "Location" not in resp and "/authorize" not in resp.content.decode()
    assert (await carol_client.get(f"/mcp/oauth/go/{mine.pk}/")).status_code == 400  # alice's flow, carol's browser
    assert (await client.get(f"/mcp/oauth/go/{mine.pk}/")).status_code == 302
    # a second browser of alice's (another session) cannot continue her flow either
    second = await authz_client(alice)
    assert (await second.get(f"/mcp/oauth/go/{mine.pk}/")).status_code == 400


# --- the callback --------------------------------------------------------------------------------

@pytest.mark.parametrize("query", ["", "?code=abc", "?state=", "?state=a&state=b&code=c", "?code=a&code=b&state=s",
                                   "?state=" + "s" * 5000])
async def test_callback_refuses_a_malformed_query_before_the_service(seeded, monkeypatch, query):
    called = []
    monkeypatch.setattr(service, "finish_connect", lambda **kw: called.append(kw))
    client = await authz_client(seeded["users"]["alice"])
    resp = await client.get(f"/mcp/oauth/callback/{query}")
    assert resp.status_code == 400 and called == []
    assert "Authorization not completed" in resp.content.decode()


async def test_callback_refusal_is_a_page_with_its_code_and_nothing_stored(seeded, monkeypatch):
    async def refuse(**kw):
        raise service.ConnectRefused("authorization_failed", "The authorization server said: access_denied")

    monkeypatch.setattr(service, "finish_connect", refuse)
    client = await authz_client(seeded["users"]["alice"])
    resp = await client.get("/mcp/oauth/callback/?state=s&error=access_denied")
    page = resp.content.decode()
    assert resp.status_code == 502 and "authorization_failed" in page and "access_denied" in page
    assert await OAuthConnection.objects.acount() == 0


@pytest.mark.parametrize("return_to", ["https://evil.example/", "//evil.example/", "/\\evil.example/", ""])
async def test_callback_returns_only_to_a_path_of_this_site(seeded, fake_finish, return_to):
    server = await oauth_server(seeded)
    fake_finish.update(server_id=server.pk, return_to=return_to)
    client = await authz_client(seeded["users"]["alice"])
    resp = await client.get("/mcp/oauth/callback/?state=s&code=c&iss=https%3A%2F%2Fas.example.test")
    assert resp.status_code == 302 and resp["Location"] == f"/mcp/servers/{server.pk}/"
    assert fake_finish["query"] == {"state": ["s"], "code": ["c"], "iss": ["https://as.example.test"]}
    fake_finish["return_to"] = "/mcp/history/"
    resp = await client.get("/mcp/oauth/callback/?state=s&code=c")
    assert resp["Location"] == "/mcp/history/"
    page = (await client.get("/mcp/history/")).content.decode()
    assert f"Connected to {server.name}." in page  # the message, once


async def test_callback_with_an_unknown_state_stores_nothing(seeded):
    server = await oauth_server(seeded)
    client = await authz_client(seeded["users"]["alice"])
    await _pending(seeded["users"]["alice"], server, _session_key(client))
    resp = await client.get("/mcp/oauth/callback/?state=not-a-state-we-made&code=c")
    assert resp.status_code == 400 and "state_invalid" in resp.content.decode()
    assert await OAuthConnection.objects.acount() == 0


async def test_callback_in_the_victims_browser_for_the_attackers_flow_stores_nothing(seeded):
    """The callback CSRF: carol (attacker) starts a flow, alice (victim) is sent its callback."""
    server = await oauth_server(seeded)
    carol, alice = seeded["users"]["carol"], seeded["users"]["alice"]
    carol_client, alice_client = await authz_client(carol), await authz_client(alice)
    state = secrets.token_urlsafe(24)
    row = await _pending(carol, server, _session_key(carol_client), state=state)
    resp = await alice_client.get(f"/mcp/oauth/callback/?state={state}&code=attackers-code")
    assert resp.status_code == 400 and "state_invalid" in resp.content.decode()
    await row.arefresh_from_db()
    assert row.used_at is not None  # spent by that first callback: the attacker cannot use it afterwards
    assert (await carol_client.get(f"/mcp/oauth/callback/?state={state}&code=c")).status_code == 400
    assert await OAuthConnection.objects.acount() == 0


async def test_callback_from_another_session_of_the_same_person_stores_nothing(seeded):
    server = await oauth_server(seeded)
    alice = seeded["users"]["alice"]
    first, second = await authz_client(alice), await authz_client(alice)
    state = secrets.token_urlsafe(24)
    await _pending(alice, server, _session_key(first), state=state)
    resp = await second.get(f"/mcp/oauth/callback/?state={state}&code=c")
    assert resp.status_code == 400 and "state_invalid" in resp.content.decode()
    assert await OAuthConnection.objects.acount() == 0


async def test_callback_with_a_used_state_stores_nothing(seeded):
    server = await oauth_server(seeded)
    client = await authz_client(seeded["users"]["alice"])
    state = secrets.token_urlsafe(24)
    await _pending(seeded["users"]["alice"], server, _session_key(client), state=state, used_at=timezone.now())
    resp = await client.get(f"/mcp/oauth/callback/?state={state}&code=c")
    assert resp.status_code == 400 and "state_invalid" in resp.content.decode()
    assert await OAuthConnection.objects.acount() == 0


# --- Connect and run again -----------------------------------------------------------------------

async def test_connect_and_run_again_runs_the_same_arguments_after_the_callback(seeded, fake_start, fake_finish):
    server = await oauth_server(seeded)
    alice = seeded["users"]["alice"]
    op = await failed_echo(alice, server)
    client = await authz_client(alice, strict=True)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Connect and run again" in page and f'name="rerun" value="{op.id}"' in page
    assert "asks for authorization (HTTP 401)" in page and "could not be reached" not in page
    assert "Run again with the same arguments" not in page  # not connected yet
    resp = await client.post(f"/mcp/oauth/connect/{server.pk}/", {**csrf_field(client), "rerun": str(op.id)})
    assert resp.status_code == 200 and "runs again with the same arguments" in resp.content.decode()
    assert fake_start[0]["return_to"] == f"/mcp/operations/{op.id}/"
    await stored_connection(alice, server)  # what the real exchange stores
    fake_finish.update(server_id=server.pk, return_to=fake_start[0]["return_to"])
    resp = await client.get("/mcp/oauth/callback/?state=s&code=c")
    assert resp.status_code == 302
    new_id = resp["Location"].rstrip("/").split("/")[-1]
    assert new_id != str(op.id)
    await operations.wait_idle()
    new = await Operation.objects.aget(pk=new_id)
    assert new.status == Operation.Status.COMPLETED and new.params == op.params
    (call,) = seeded["mcp"].log.tool_calls("echo")
    assert call.params["arguments"] == {"text": "same arguments ⟨x⟩"}
    # the intent is spent: a second callback goes back to return_to, nothing runs again
    resp = await client.get("/mcp/oauth/callback/?state=s&code=c")
    assert resp["Location"] == f"/mcp/operations/{op.id}/" and len(seeded["mcp"].log.tool_calls("echo")) == 1


async def test_run_again_with_the_same_arguments_when_connected(seeded):
    server = await oauth_server(seeded)
    alice = seeded["users"]["alice"]
    op = await failed_echo(alice, server, "insufficient_scope")
    await stored_connection(alice, server)
    client = await authz_client(alice, strict=True)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Connect and run again" in page and "Run again with the same arguments" in page
    assert "insufficient_scope" in page and "connect again to grant them" in page
    # carol cannot run alice's operation again
    carol = await authz_client(seeded["users"]["carol"], strict=True)
    assert (await carol.post(f"/mcp/operations/{op.id}/rerun/", csrf_field(carol))).status_code == 404
    resp = await client.post(f"/mcp/operations/{op.id}/rerun/", csrf_field(client))
    assert resp.status_code == 302
    await operations.wait_idle()
    assert [c.params["arguments"] for c in seeded["mcp"].log.tool_calls("echo")] == [{"text": "same arguments ⟨x⟩"}]
    # a completed operation runs again too (issue 28: every finished operation offers it), once
    new = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert (await client.post(f"/mcp/operations/{new.id}/rerun/", csrf_field(client))).status_code == 302
    await operations.wait_idle()
    assert (await client.post(f"/mcp/operations/{new.id}/rerun/", csrf_field(client))).status_code == 409


async def test_tenant_credentials_failure_names_the_admin_not_connect(seeded):
    server = seeded["servers"]["acme"]
    server.auth_mode = McpServer.AuthMode.TENANT
    await server.asave()
    op = await failed_echo(seeded["users"]["alice"], server)
    page = (await (await authz_client(seeded["users"]["alice"])).get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "ask one to check them" in page and "Connect and run again" not in page


def test_error_codes_have_their_own_texts():
    from mrtrweb.mcp import McpCallError

    for code in ("authorization_required", "insufficient_scope", "authorization_failed"):
        assert "refused by the gate" not in operations.message_for(code)
        assert operations.message_for(code) != operations.message_for("transport_error")
    said = operations.failure_message(McpCallError(
        "authorization_failed", "tools/call: HTTP 403", challenge={"error": "invalid_token",
                                                                   "error_description": "expired\u202e\nat 12:00"}))
    assert said.startswith(operations.message_for("authorization_failed") + " It said: invalid_token: expired")
    assert "\u202e" not in said and "\n" not in said and "tools/call" not in said
    assert operations.failure_message(McpCallError("authorization_required", "x")) == \
        operations.message_for("authorization_required")


# --- Connections, Disconnect ---------------------------------------------------------------------

async def test_connections_page_lists_the_persons_own_and_never_a_token(seeded, monkeypatch):
    server = await oauth_server(seeded)
    alice, carol = seeded["users"]["alice"], seeded["users"]["carol"]
    conn = await stored_connection(alice, server)
    await stored_connection(carol, server, scope="carols-scope")
    client = await authz_client(alice)
    page = (await client.get("/mcp/connections/")).content.decode()
    assert server.name in page and AS_ORIGIN in page and "mcp:tools" in page and "offline_access" in page
    assert "carols-scope" not in page and page.count('<tr data-server=') == 1
    assert 'href="/mcp/connections/"' in page  # the navigation link
    sealed = conn.tokens_sealed
    pages = [page]
    for url in ("/mcp/", f"/mcp/servers/{server.pk}/", f"/mcp/servers/{server.pk}/settings/"):
        pages.append((await client.get(url)).content.decode())
    from django.contrib.auth import get_user_model

    admin = await authz_client(await get_user_model().objects.aget(username="admin"))
    for url in ("/admin/mrtrweb/oauthconnection/", f"/admin/mrtrweb/oauthconnection/{conn.pk}/change/",
                f"/admin/mrtrweb/mcpserver/{server.pk}/change/"):
        resp = await admin.get(url)
        assert resp.status_code == 200, url
        pages.append(resp.content.decode())
    for text in pages:
        assert ACCESS not in text and REFRESH not in text and sealed[:40] not in text and conn.family not in text


async def test_disconnect_calls_the_service_and_goes_back(seeded, monkeypatch):
    server = await oauth_server(seeded)
    alice = seeded["users"]["alice"]
    await stored_connection(alice, server)
    calls = []

    async def disconnect(*, user, tenant, server):  # as core's: revoke where supported, delete, "there was one"
        calls.append((user.pk, tenant.pk, server.pk))
        await OAuthConnection.objects.filter(user=user, server=server).adelete()
        return True

    monkeypatch.setattr(service, "disconnect", disconnect)
    client = await authz_client(alice, strict=True)
    carol = await authz_client(seeded["users"]["carol"], strict=True)
    assert (await carol.post(f"/mcp/connections/{server.pk}/disconnect/", csrf_field(carol))).status_code == 404
    resp = await client.post(f"/mcp/connections/{server.pk}/disconnect/",
                             {**csrf_field(client), "return_to": f"/mcp/servers/{server.pk}/"})
    assert resp.status_code == 302 and resp["Location"] == f"/mcp/servers/{server.pk}/"
    assert calls == [(alice.pk, server.tenant_id, server.pk)]
    page = (await client.get(resp["Location"])).content.decode()
    assert f"Disconnected from {server.name}." in page and f"Connect to {server.name}" in page
    assert (await client.post(f"/mcp/connections/{server.pk}/disconnect/", csrf_field(client))).status_code == 404


# --- the Client ID Metadata Document -------------------------------------------------------------

async def test_client_metadata_document(seeded, settings):
    anonymous = AsyncClient()
    assert (await anonymous.get("/mcp/oauth/client-metadata.json")).status_code == 404
    url = "https://app.example.test/mcp/oauth/client-metadata.json"
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "OAUTH_CLIENT_METADATA_URL": url,
                        "OAUTH_REDIRECT_URI": "https://app.example.test/mcp/oauth/callback/", "OAUTH_CLIENT_NAME": "Acme"}
    resp = await anonymous.get("/mcp/oauth/client-metadata.json")
    assert resp.status_code == 200 and resp["Content-Type"] == "application/json"
    assert json.loads(resp.content) == {
        "client_id": url, "client_name": "Acme", "redirect_uris": ["https://app.example.test/mcp/oauth/callback/"],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "none"}
    assert (await anonymous.post("/mcp/oauth/client-metadata.json")).status_code == 405


# --- server settings: write-only secrets ---------------------------------------------------------

BEARER = "tenant-bearer-" + "c3" * 16
HEADER_VALUE = "hv-" + "d4" * 16


async def _settings(client: AsyncClient, server: McpServer, **fields):
    data = {"auth-auth_mode": "none", "roots": "[]", **{f"auth-{k}": v for k, v in fields.items()}}
    return await client.post(f"/mcp/servers/{server.pk}/settings/", data)


async def test_tenant_bearer_is_sealed_write_only_and_kept_when_left_empty(seeded):
    server = seeded["servers"]["acme"]
    before = server.config_digest()
    client = await authz_client(seeded["users"]["alice"])
    resp = await _settings(client, server, auth_mode="tenant", bearer_token=BEARER)
    assert resp.status_code == 200 and BEARER not in resp.content.decode()
    await server.arefresh_from_db()
    assert server.auth_mode == "tenant" and BEARER not in server.auth_secret_sealed
    assert crypto.unseal(server.auth_secret_sealed) == {"bearer": BEARER}
    assert server.auth_secret_digest == secret_digest({"bearer": BEARER}) and BEARER not in server.auth_secret_digest
    assert server.config_digest() != before
    page = (await client.get(f"/mcp/servers/{server.pk}/settings/")).content.decode()
    assert BEARER not in page and server.auth_secret_sealed[:40] not in page and "A bearer token is stored." in page
    # empty keeps it; another field changes
    assert (await _settings(client, server, auth_mode="tenant", bearer_token="")).status_code == 200
    await server.arefresh_from_db()
    assert crypto.unseal(server.auth_secret_sealed) == {"bearer": BEARER}
    # a refused post does not echo what was typed
    resp = await _settings(client, server, auth_mode="tenant", bearer_token="new-" + BEARER, headers="X-Key: " + HEADER_VALUE)
    assert resp.status_code == 400 and "not both" in resp.content.decode()
    assert "new-" + BEARER not in resp.content.decode() and HEADER_VALUE not in resp.content.decode()
    await server.arefresh_from_db()
    assert crypto.unseal(server.auth_secret_sealed) == {"bearer": BEARER}
    # clear removes it (and tenant mode then needs one)
    resp = await _settings(client, server, auth_mode="tenant", clear_secret="on")
    assert resp.status_code == 400 and "need a bearer token or headers" in resp.content.decode()
    assert (await _settings(client, server, auth_mode="none", clear_secret="on")).status_code == 200
    await server.arefresh_from_db()
    assert server.auth_secret_sealed == "" and server.auth_secret_digest == "" and server.config_digest() == before


@pytest.mark.parametrize("headers,code", [("Host: x", "header_name"), ("Bad Name: x", "header_name"),
                                          ("X-Key " + HEADER_VALUE, "header_name"), ("X-Key: a\x00b", "header_value"),
                                          ("X-Key: é", "header_value"), ("X-Key: a\nX-key: b", "header_name"),
                                          ("Mcp-Session-Id: x", "header_name"),
                                          ("\n".join(f"X-{i}: v" for i in range(21)), "too_many_headers")])
async def test_tenant_headers_are_checked(seeded, headers, code):
    server = seeded["servers"]["acme"]
    client = await authz_client(seeded["users"]["alice"])
    resp = await _settings(client, server, auth_mode="tenant", headers=headers)
    assert resp.status_code == 400 and 'class="field-error"' in resp.content.decode()
    assert HEADER_VALUE not in resp.content.decode()
    await server.arefresh_from_db()
    assert server.auth_mode == "none" and server.auth_secret_sealed == ""


async def test_tenant_headers_and_oauth_client_secret(seeded):
    server = seeded["servers"]["acme"]
    client = await authz_client(seeded["users"]["alice"])
    resp = await _settings(client, server, auth_mode="tenant", headers=f"X-Api-Key: {HEADER_VALUE}\r\nX-Team: blue")
    assert resp.status_code == 200
    await server.arefresh_from_db()
    assert crypto.unseal(server.auth_secret_sealed) == {"headers": {"X-Api-Key": HEADER_VALUE, "X-Team": "blue"}}
    page = (await client.get(f"/mcp/servers/{server.pk}/settings/")).content.decode()
    assert HEADER_VALUE not in page and "Headers are stored: X-Api-Key, X-Team." in page
    # switching to OAuth client credentials: a secret needs its client id; the tenant headers go
    resp = await _settings(client, server, auth_mode="oauth_client", oauth_client_secret="cs-" + BEARER)
    assert resp.status_code == 400 and "client id it was issued with" in resp.content.decode()
    assert "cs-" + BEARER not in resp.content.decode()
    resp = await _settings(client, server, auth_mode="oauth_client", oauth_client_id="machine-1",
                           oauth_client_secret="cs-" + BEARER, oauth_scope="mcp:tools  mcp:tools read",
                           oauth_issuer="https://auth.example.com")
    assert resp.status_code == 200
    await server.arefresh_from_db()
    assert crypto.unseal(server.auth_secret_sealed) == {"client_secret": "cs-" + BEARER}
    assert server.oauth_client_id == "machine-1" and server.oauth_scope == "mcp:tools read"
    # OAuth per user keeps the client secret; mode none removes it
    assert (await _settings(client, server, auth_mode="oauth_user", oauth_client_id="machine-1",
                            oauth_issuer="https://auth.example.com")).status_code == 200
    await server.arefresh_from_db()
    assert crypto.unseal(server.auth_secret_sealed) == {"client_secret": "cs-" + BEARER}
    assert (await _settings(client, server, auth_mode="none")).status_code == 200
    await server.arefresh_from_db()
    assert server.auth_secret_sealed == "" and server.auth_secret_digest == ""
    resp = await _settings(client, server, auth_mode="oauth_user", oauth_scope='bad"scope')
    assert resp.status_code == 400
    resp = await _settings(client, server, auth_mode="none", bearer_token=BEARER)
    assert resp.status_code == 400 and BEARER not in resp.content.decode()


async def test_settings_are_for_tenant_admins_only(seeded):
    server = seeded["servers"]["acme"]
    carol = await authz_client(seeded["users"]["carol"])
    assert (await _settings(carol, server, auth_mode="tenant", bearer_token=BEARER)).status_code == 404
    await server.arefresh_from_db()
    assert server.auth_mode == "none"


async def test_admin_sets_secrets_write_only(seeded):
    from django.contrib.auth import get_user_model

    server = seeded["servers"]["acme"]
    admin = await authz_client(await get_user_model().objects.aget(username="admin"))
    url = f"/admin/mrtrweb/mcpserver/{server.pk}/change/"
    data = {"tenant": server.tenant_id, "name": server.name, "url": server.url, "enabled": "on", "roots": "[]",
            "auth_mode": "tenant", "bearer_token": BEARER, "oauth_client_id": "", "oauth_scope": "",
            "protocol": "auto"}  # every field of the admin's form, as a browser posts it
    resp = await admin.post(url, data)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    await server.arefresh_from_db()
    assert crypto.unseal(server.auth_secret_sealed) == {"bearer": BEARER}
    page = (await admin.get(url)).content.decode()
    assert "auth_secret_sealed" not in page and BEARER not in page and server.auth_secret_sealed[:40] not in page
    assert 'name="bearer_token"' in page and 'name="headers"' in page
    resp = await admin.post(url, {**data, "bearer_token": "", "headers": "Host: x"})
    assert resp.status_code == 200 and "protocol header" in resp.content.decode()
    await sync_to_async(server.refresh_from_db)()
    assert crypto.unseal(server.auth_secret_sealed) == {"bearer": BEARER}


# --- the whole flow through these pages, against a real authorization server on loopback --------

@pytest.fixture
def oauth_pair(settings):
    from tests.oauth_sdk_as import serve_oauth_pair

    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    pair = serve_oauth_pair(scopes=["mcp:read", "offline_access"])
    yield pair
    pair.stop()


async def test_connect_continue_callback_call_and_disconnect_for_real(seeded, oauth_pair):
    """alice connects through the pages (the SDK's authorization server approves at once), the
    server page lists the tools with her token, carol must connect on her own, a replayed callback
    stores nothing, Disconnect revokes at the authorization server and the page asks to connect."""
    import re
    import urllib.parse

    from mrtrweb.authz.service import outbound_policy
    from mrtrweb.mcp.auth import follow_authorization_url
    from mrtrweb.mcp.errors import origin_of

    alice, carol = seeded["users"]["alice"], seeded["users"]["carol"]
    server = await McpServer.objects.acreate(tenant_id=seeded["servers"]["acme"].tenant_id, name="Guarded",
                                             url=oauth_pair.mcp_url, auth_mode=McpServer.AuthMode.OAUTH_USER)
    client = await authz_client(alice, strict=True)
    assert "Connect to Guarded" in (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    resp = await client.post(f"/mcp/oauth/connect/{server.pk}/", csrf_field(client))
    page = resp.content.decode()
    assert resp.status_code == 200 and origin_of(oauth_pair.as_url) in page, page[-1500:]
    pending = re.search(r'href="/mcp/oauth/go/(\d+)/"', page).group(1)
    go = await client.get(f"/mcp/oauth/go/{pending}/")
    assert go.status_code == 302 and go["Location"].startswith(oauth_pair.as_url)
    redirect_uri = "http://testserver/mcp/oauth/callback/"
    query = await follow_authorization_url(go["Location"], redirect_uri=redirect_uri, policy=outbound_policy())
    callback = "/mcp/oauth/callback/?" + urllib.parse.urlencode(query)
    # the callback in carol's browser (a victim sent alice's flow's callback) stores nothing ...
    carol_client = await authz_client(carol)
    assert (await carol_client.get(callback)).status_code == 400
    assert await OAuthConnection.objects.acount() == 0
    # ... and spent the state: alice's own flow must be started again (single use)
    assert (await client.get(callback)).status_code == 400
    resp = await client.post(f"/mcp/oauth/connect/{server.pk}/", csrf_field(client))
    pending = re.search(r'href="/mcp/oauth/go/(\d+)/"', resp.content.decode()).group(1)
    go = await client.get(f"/mcp/oauth/go/{pending}/")
    query = await follow_authorization_url(go["Location"], redirect_uri=redirect_uri, policy=outbound_policy())
    callback = "/mcp/oauth/callback/?" + urllib.parse.urlencode(query)
    done = await client.get(callback)
    assert done.status_code == 302 and done["Location"] == f"/mcp/servers/{server.pk}/"
    conn = await OAuthConnection.objects.aget()
    assert conn.user_id == alice.pk and conn.server_id == server.pk
    page = (await client.get(done["Location"])).content.decode()
    assert "Connected to Guarded." in page and "Connected with your account at" in page
    assert 'data-tool="echo"' in page  # listed with alice's token, verified by the MCP server
    tokens = crypto.unseal(conn.tokens_sealed)
    assert tokens["access_token"] in oauth_pair.gate.seen_tokens
    for url in ("/mcp/connections/", f"/mcp/servers/{server.pk}/"):
        text = (await client.get(url)).content.decode()
        assert tokens["access_token"] not in text and (tokens.get("refresh_token") or "\x00") not in text
    # replaying the callback stores nothing new
    assert (await client.get(callback)).status_code == 400
    assert await OAuthConnection.objects.acount() == 1
    # carol is asked to connect on her own
    assert "Connect to Guarded" in (await carol_client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    # Disconnect: revoked at the authorization server (RFC 7009, the DCR client is public: the demo
    # AS's own /revoke, mrtrweb.demo.oauth), deleted here, the page asks again
    resp = await client.post(f"/mcp/connections/{server.pk}/disconnect/", csrf_field(client))
    assert resp.status_code == 302 and await OAuthConnection.objects.acount() == 0
    page = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert "Disconnected from Guarded; the authorization server revoked the tokens." in page
    assert "Connect to Guarded" in page
    assert set(oauth_pair.provider.revoked) == {tokens["access_token"], tokens["refresh_token"]}
    return oauth_pair.provider.revoked


async def test_the_settings_page_shows_what_an_admin_registers_at_an_authorization_server(seeded, settings):
    """The tenant admin pre-registering this product needs its exact redirect URI (and, with CIMD,
    its client id URL): the settings page shows them (docs/tenant-admin.md: "register the redirect URI")."""
    server = seeded["servers"]["acme"]
    client = await authz_client(seeded["users"]["alice"])
    page = (await client.get(f"/mcp/servers/{server.pk}/settings/")).content.decode()
    assert '<code class="redirect-uri">http://testserver/mcp/oauth/callback/</code>' in page
    assert "client-metadata-url" not in page
    settings.MRTRWEB = {"OAUTH_REDIRECT_URI": "https://app.example/mcp/oauth/callback/",
                        "OAUTH_CLIENT_METADATA_URL": "https://app.example/mcp/oauth/client-metadata.json"}
    page = (await client.get(f"/mcp/servers/{server.pk}/settings/")).content.decode()
    assert '<code class="redirect-uri">https://app.example/mcp/oauth/callback/</code>' in page
    assert '<code class="client-metadata-url">https://app.example/mcp/oauth/client-metadata.json</code>' in page


async def test_leaving_a_tenant_deletes_the_persons_connections_there(seeded):
    """A person removed from a tenant keeps no tokens for its servers: their connections there are
    deleted with the membership (and the Connections page no longer lists them); connections in
    their other tenants stay."""
    from mrtrweb.models import Membership

    alice = seeded["users"]["alice"]
    here = await oauth_server(seeded)
    await stored_connection(alice, here)
    other_tenant = await Tenant.objects.acreate(name="Other", slug="other-conn")
    await Membership.objects.acreate(tenant=other_tenant, user=alice)
    elsewhere = await McpServer.objects.acreate(tenant=other_tenant, name="Elsewhere", url="https://mcp.other.example/mcp",
                                                auth_mode=McpServer.AuthMode.OAUTH_USER)
    await stored_connection(alice, elsewhere)
    client = await authz_client(alice)
    page = (await client.get("/mcp/connections/")).content.decode()
    assert f">{here.name}<" in page and "Elsewhere" in page
    await Membership.objects.filter(tenant_id=here.tenant_id, user=alice).adelete()
    assert not await OAuthConnection.objects.filter(user=alice, tenant_id=here.tenant_id).aexists()
    assert await OAuthConnection.objects.filter(user=alice, server=elsewhere).aexists()
    page = (await client.get("/mcp/connections/")).content.decode()
    assert "Elsewhere" in page and f">{here.name}<" not in page
