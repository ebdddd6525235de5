"""A client secret (or private key) an admin entered is only ever sent to the authorization server it
was issued by (``McpServer.oauth_issuer``): the form rules, OAuth client credentials without an
issuer (nothing sent), a pre-registered secret for OAuth per user pinned at start, refresh and
revocation, the issuer lookup, the settings page's suggestion and the interstitial's mix-up hint.

Real parts on loopback: the SDK's authorization server in front of the token-verifying demo MCP
server (``tests/oauth_sdk_as.py``) and an attacker's authorization server recording every request
it receives (:class:`RecordingAS`).
"""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest
from django.test import AsyncClient
from django.utils import timezone
from mcp.client.auth.utils import issuers_match
from mcp.shared.auth import OAuthClientInformationFull

from mrtrweb.headless import client as headless
from mrtrweb.authz import crypto, service
from mrtrweb.authz.forms import ServerAuthForm
from mrtrweb.authz.models import OAuthConnection, PendingAuthorization
from mrtrweb.demo.server import read_body, serve_asgi_in_thread
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.mcp.auth import follow_authorization_url
from tests.oauth_sdk_as import serve_oauth_pair

pytestmark = [pytest.mark.django_db(transaction=True)]

REDIRECT = "http://127.0.0.1:9/mcp/oauth/callback/"
SECRET = "admin-secret-" + "e5" * 12


class RecordingAS:
    """The attacker's authorization server: RFC 8414 metadata naming its own endpoints; every
    request (path, headers and body) is recorded; the token endpoint answers ``invalid_client``."""

    def __init__(self) -> None:
        self.base = ""
        self.requests: list[tuple[str, bytes]] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await read_body(receive)
        self.requests.append((scope["path"], b"\n".join(k + b": " + v for k, v in scope["headers"]) + b"\n\n" + body))
        if scope["path"].startswith("/.well-known/"):
            status, data = 200, {"issuer": self.base, "authorization_endpoint": f"{self.base}/authorize",
                                 "token_endpoint": f"{self.base}/token", "response_types_supported": ["code"],
                                 "grant_types_supported": ["authorization_code", "client_credentials"],
                                 "code_challenge_methods_supported": ["S256"]}
        else:
            status, data = 401, {"error": "invalid_client"}
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(data).encode()})

    def leaked(self, client_id: str) -> list[bytes]:
        basic = base64.b64encode(f"{client_id}:{SECRET}".encode())
        return [r for _, r in self.requests if SECRET.encode() in r or basic in r]


@pytest.fixture
def pinned(seeded, settings):
    """A server in front of the real authorization server, the admin's client registered there, and
    the attacker's authorization server (not named unless a test makes the MCP server name it)."""
    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    pair = serve_oauth_pair(scopes=["mcp:read", "offline_access"])
    pair.provider.clients["admin-made"] = OAuthClientInformationFull(
        client_id="admin-made", client_secret=SECRET, redirect_uris=[REDIRECT],
        token_endpoint_auth_method="client_secret_post", scope="mcp:read offline_access")
    attacker = RecordingAS()
    handle = serve_asgi_in_thread(attacker, path="")
    attacker.base = f"http://127.0.0.1:{handle.port}"
    server = seeded["servers"]["acme"]
    server.url = pair.mcp_url
    server.auth_mode = "oauth_user"
    server.oauth_client_id = "admin-made"
    server.oauth_issuer = pair.as_url
    crypto.set_server_secret(server, {"client_secret": SECRET})
    server.save()
    yield {**seeded, "pair": pair, "server": server, "attacker": attacker}
    handle.stop()
    pair.stop()


async def _start(o, session: str = "sess-1") -> service.ConnectStart:
    return await service.start_connect(user=o["users"]["alice"], tenant=o["server"].tenant, server=o["server"],
                                       session_key=session, return_to="/mcp/", redirect_uri=REDIRECT)


async def _echo(o):
    return await headless.arun(url=o["server"].url, user=o["users"]["alice"], tenant=o["server"].tenant,
                               method="tools/call", params={"name": "echo", "arguments": {"text": "hi"}},
                               consent=ConsentPolicy.parse("decline"))


# -- the form ------------------------------------------------------------------------------------------


def _form(server, **data) -> ServerAuthForm:
    return ServerAuthForm({"auth_mode": "none", **data}, instance=server)


def _codes(form: ServerAuthForm, field: str) -> list[str]:
    return [e.code for e in form.errors.as_data().get(field, [])]


@pytest.mark.parametrize("data, valid", [
    ({"auth_mode": "oauth_client", "oauth_client_id": "m", "oauth_client_secret": "s"}, False),
    ({"auth_mode": "oauth_client", "oauth_client_id": "m", "oauth_client_secret": "s",
      "oauth_issuer": "https://auth.example.com"}, True),
    ({"auth_mode": "oauth_user", "oauth_client_id": "m", "oauth_client_secret": "s"}, False),
    ({"auth_mode": "oauth_user", "oauth_client_id": "m", "oauth_client_secret": "s",
      "oauth_issuer": "https://auth.example.com/tenant-1"}, True),
    ({"auth_mode": "oauth_user", "oauth_client_id": "m"}, True),  # a public client: nothing secret to pin
    ({"auth_mode": "oauth_user"}, True),
])
def test_the_issuer_is_required_with_a_secret(seeded, data, valid):
    form = _form(seeded["servers"]["acme"], **data)
    assert form.is_valid() is valid, form.errors
    if not valid:
        assert _codes(form, "oauth_issuer") == ["issuer_needed"]


def test_a_stored_secret_needs_the_issuer_until_it_is_removed(seeded):
    server = seeded["servers"]["acme"]
    server.auth_mode, server.oauth_client_id = "oauth_user", "m"
    crypto.set_server_secret(server, {"client_secret": "s"})
    server.save()
    form = _form(server, auth_mode="oauth_user", oauth_client_id="m")
    assert not form.is_valid() and _codes(form, "oauth_issuer") == ["issuer_needed"]
    assert _form(server, auth_mode="oauth_user", oauth_client_id="m", clear_secret="on").is_valid()
    assert _form(server, auth_mode="oauth_user", oauth_client_id="m", oauth_issuer="https://a.example").is_valid()


@pytest.mark.parametrize("issuer, loopback, valid", [
    ("https://auth.example.com", False, True),
    ("https://auth.example.com:8443/realms/x", False, True),
    ("http://auth.example.com", True, False),  # http only to loopback
    ("http://127.0.0.1:8000", True, True),
    ("http://127.0.0.1:8000", False, False),  # ... and only with OUTBOUND_ALLOW_HTTP_LOOPBACK
    ("http://localhost:8000", True, True),
    ("https://auth.example.com/?tenant=1", False, False),
    ("https://auth.example.com/#x", False, False),
    ("https://user:pw@auth.example.com", False, False),
    ("ftp://auth.example.com", False, False),
    ("https://", False, False),
    ("https://auth.example.com:99999", False, False),
    ("https://auth example.com", False, False),
    ("https://a.example/" + "x" * 500, False, "max_length"),
])
def test_the_issuer_is_an_https_url_without_query_or_fragment(seeded, settings, issuer, loopback, valid):
    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": loopback}
    form = _form(seeded["servers"]["acme"], auth_mode="oauth_client", oauth_client_id="m", oauth_client_secret="s",
                 oauth_issuer=issuer)
    assert form.is_valid() is (valid is True), form.errors
    if valid is not True:
        assert _codes(form, "oauth_issuer") == [valid or "bad_issuer"]


def test_a_missing_issuer_is_suggested_from_the_lookup(seeded):
    form = ServerAuthForm({"auth_mode": "oauth_client", "oauth_client_id": "m", "oauth_client_secret": "s"},
                          instance=seeded["servers"]["acme"], issuer_lookup=lambda: "https://as.example/t")
    assert not form.is_valid()
    assert "This server names https://as.example/t" in " ".join(form.errors["oauth_issuer"])


def test_the_issuer_is_in_the_config_digest_and_the_identity(seeded):
    from mrtrweb.authz.identity import identity_of

    server = seeded["servers"]["acme"]
    server.auth_mode, server.oauth_client_id, server.oauth_issuer = "oauth_client", "m", "https://a.example"
    before, ident = server.config_digest(), identity_of(server)
    server.oauth_issuer = "https://b.example"
    after = identity_of(server)
    assert server.config_digest() != before
    assert after.digest != ident.digest and after.issuer_client_digest != ident.issuer_client_digest


# -- OAuth client credentials ----------------------------------------------------------------------------


async def test_client_credentials_without_an_issuer_send_nothing(pinned):
    """The MCP server names the attacker's authorization server; no issuer is configured: the
    operation fails ``authorization_failed`` with the product's message, and no request at all
    (not even discovery) reaches either authorization server."""
    o = pinned
    o["pair"].gate.prm = {**o["pair"].gate.prm, "authorization_servers": [o["attacker"].base]}
    server = o["server"]
    server.auth_mode, server.oauth_issuer = "oauth_client", ""
    await server.asave()
    outcome = await _echo(o)
    assert (outcome.status, outcome.error_code) == ("failed", "authorization_failed")
    from mrtrweb.models import Operation

    shown = (await Operation.objects.aget(pk=outcome.operation_id)).error_message
    assert shown == service.NO_ISSUER
    assert "no authorization server is configured for this server's client credentials" in shown.lower()
    assert o["attacker"].requests == [] and o["pair"].provider.token_requests == 0


async def test_client_credentials_with_an_issuer_never_reach_another_authorization_server(pinned):
    """With the issuer configured, the MCP server naming the attacker's authorization server gets
    no token request there (the SDK's ``issuer=`` check), and the secret is in no request."""
    o = pinned
    o["pair"].gate.prm = {**o["pair"].gate.prm, "authorization_servers": [o["attacker"].base]}
    server = o["server"]
    server.auth_mode = "oauth_client"
    await server.asave()
    outcome = await _echo(o)
    assert outcome.status == "failed"
    assert [p for p, _ in o["attacker"].requests if not p.startswith("/.well-known/")] == []
    assert o["attacker"].leaked("admin-made") == []


# -- a pre-registered secret for OAuth per user ------------------------------------------------------------


async def test_a_pre_registered_secret_is_not_sent_to_another_authorization_server(pinned):
    """The MCP server names the attacker's authorization server: Connect is refused before any
    request reaches it (nothing stored); naming both, the flow goes to the configured one."""
    o = pinned
    pair, attacker = o["pair"], o["attacker"]
    pair.gate.prm = {**pair.gate.prm, "authorization_servers": [attacker.base]}
    with pytest.raises(service.ConnectRefused) as caught:
        await _start(o)
    assert caught.value.code == "authorization_failed" and pair.as_url in caught.value.message
    assert attacker.requests == [] and not await PendingAuthorization.objects.aexists()
    pair.gate.prm = {**pair.gate.prm, "authorization_servers": [attacker.base, pair.as_url]}
    start = await _start(o)
    assert start.authorization_origin == pair.as_url and start.issuer == pair.as_url
    assert attacker.requests == []


async def test_a_pre_registered_secret_without_an_issuer_is_not_used(pinned):
    o = pinned
    o["server"].oauth_issuer = ""
    await o["server"].asave()
    with pytest.raises(service.ConnectRefused) as caught:
        await _start(o)
    assert caught.value.code == "authorization_failed" and "Authorization server (issuer)" in caught.value.message
    assert not await PendingAuthorization.objects.aexists()


async def test_refresh_and_revocation_present_the_secret_only_to_its_issuer(pinned):
    """Alice connected through the pinned issuer. An admin then pins the client to another
    authorization server: the stored connection's refresh and revocation no longer present the
    secret (no refresh request, Disconnect only deletes); with the right issuer both work."""
    o = pinned
    pair, user, server = o["pair"], o["users"]["alice"], o["server"]
    start = await _start(o)
    query = await follow_authorization_url(start.authorization_url, redirect_uri=REDIRECT,
                                           policy=service.outbound_policy())
    conn = await service.finish_connect(user=user, session_key="sess-1", query=query)
    assert conn.issuer == pair.as_url
    storage = service._storage(tenant=server.tenant, user=user, server=server)
    assert (await storage.get_client_info()).client_secret == SECRET
    server.oauth_issuer = o["attacker"].base
    await server.asave()
    storage = service._storage(tenant=server.tenant, user=user, server=server)
    assert await storage.get_client_info() is None
    # an expired token: no refresh goes out with the secret (the person is asked to connect)
    await OAuthConnection.objects.filter(pk=conn.pk).aupdate(expires_at=timezone.now() - dt.timedelta(seconds=5))
    outcome = await _echo(o)
    assert outcome.error_code == "authorization_required" and pair.provider.refresh_requests == 0
    assert await service.disconnect(user=user, tenant=server.tenant, server=server) == service.DELETED
    assert pair.provider.revoked == [] and o["attacker"].requests == []


# -- the lookup, the settings page, the interstitial -------------------------------------------------------


async def test_discover_issuer_names_the_servers_authorization_server(pinned):
    o = pinned
    found = await service.discover_issuer(o["server"])
    assert found is not None and issuers_match(found, o["pair"].as_url)
    assert o["pair"].provider.token_requests == 0 and o["pair"].provider.clients.keys() == {"admin-made"}


async def test_the_settings_page_suggests_the_issuer(pinned):
    o = pinned
    client = AsyncClient()
    await client.aforce_login(o["users"]["alice"])
    await client.get("/mcp/")
    data = {"auth-auth_mode": "oauth_client", "auth-oauth_client_id": "machine", "auth-oauth_client_secret": "s",
            "auth-oauth_issuer": "", "roots": "[]"}
    resp = await client.post(f"/mcp/servers/{o['server'].pk}/settings/", data)
    page = resp.content.decode()
    assert resp.status_code == 400 and "This server names http://127.0.0.1:" in page
    assert o["pair"].as_url.removeprefix("http://") in page


@pytest.mark.parametrize("elsewhere", [False, True])
async def test_the_interstitial_shows_the_issuer_when_the_sign_in_page_is_elsewhere(seeded, settings, elsewhere):
    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    pair = serve_oauth_pair(scopes=["mcp:read"])
    try:
        if elsewhere:
            # a sign-in page on another origin is only accepted from an authorization server that
            # sends iss (RFC 9207; the mix-up check of mrtrweb.mcp.auth.flow)
            pair.metadata["authorization_endpoint"] = "http://localhost:9/authorize"
            pair.metadata["authorization_response_iss_parameter_supported"] = True
        server = seeded["servers"]["acme"]
        server.url, server.auth_mode = pair.mcp_url, "oauth_user"
        await server.asave()
        client = AsyncClient()
        await client.aforce_login(seeded["users"]["alice"])
        await client.get("/mcp/")
        resp = await client.post(f"/mcp/oauth/connect/{server.pk}/",
                                 {"csrfmiddlewaretoken": client.cookies["csrftoken"].value})
        page = resp.content.decode()
        assert resp.status_code == 200
        assert ('class="issuer-mismatch"' in page) is elsewhere
        if elsewhere:
            assert "http://localhost:9" in page and f'<code class="issuer-origin">{pair.as_url}</code>' in page
            pair.metadata["authorization_response_iss_parameter_supported"] = False
            resp = await client.post(f"/mcp/oauth/connect/{server.pk}/",
                                     {"csrfmiddlewaretoken": client.cookies["csrftoken"].value})
            assert resp.status_code in (400, 502) and "does not send iss" in resp.content.decode()
    finally:
        pair.stop()


async def test_a_callback_after_the_issuer_changed_sends_no_secret(pinned):
    """Alice starts Connect; before her callback an admin pins the client to another issuer: the
    callback is refused before the code exchange (which would present the secret)."""
    o = pinned
    start = await _start(o)
    query = await follow_authorization_url(start.authorization_url, redirect_uri=REDIRECT,
                                           policy=service.outbound_policy())
    o["server"].oauth_issuer = "https://auth.example.com"
    await o["server"].asave()
    with pytest.raises(service.ConnectRefused) as caught:
        await service.finish_connect(user=o["users"]["alice"], session_key="sess-1", query=query)
    assert caught.value.code == "state_invalid"
    assert o["pair"].provider.token_requests == 0 and not await OAuthConnection.objects.aexists()


async def test_the_issuer_look_up_is_bounded_in_all(db, settings):
    """The look-up runs while the settings form is validated: a server that answers its discovery
    URLs slowly (each within the per-request timeout) cannot hold the page for several timeouts;
    the whole look-up gives up after its budget and suggests nothing (attacker pass 2)."""
    import asyncio
    import time

    from mrtrweb.demo.server import serve_asgi_in_thread
    from mrtrweb.models import McpServer, Tenant

    settings.MRTRWEB = {"OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    hits = []

    async def slow(scope, receive, send):
        if scope["type"] != "http":
            return
        hits.append(scope["path"])
        if scope["path"].startswith("/.well-known/"):
            await asyncio.sleep(3)  # below the 10 s per-request timeout, so each request alone passes
            body = b'{"resource": "x", "authorization_servers": []}'
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": body})
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"www-authenticate", b'Bearer resource_metadata="/.well-known/oauth-protected-resource"')]})
        await send({"type": "http.response.body", "body": b""})

    handle = serve_asgi_in_thread(slow, path="/mcp")
    try:
        tenant = await Tenant.objects.acreate(name="Slow", slug="slow")
        server = await McpServer.objects.acreate(tenant=tenant, name="Slow", url=handle.url, auth_mode="oauth_client")
        began = time.monotonic()
        assert await service.discover_issuer(server, budget_s=1.0) is None
        assert time.monotonic() - began < 2.5 and hits
    finally:
        handle.stop()
