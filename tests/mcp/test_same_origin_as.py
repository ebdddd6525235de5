"""An MCP server that is its own authorization server (one origin, plain http on loopback, as a
tenant admin may configure an internal server), with ``OUTBOUND_ALLOW_HTTP_LOOPBACK`` **off**.

The admin chose that origin, so the outbound guard's address rules let it pass -- for every
authorization request alike: discovery and registration (which already did), and also the
authorization endpoint the browser is sent to, the token request, the refresh and the revocation
(which did not: a newcomer saw discovery and registration succeed, then ``the authorization
endpoint is not an https URL`` and ``plain http is not allowed`` for the token request at the same
origin). Another origin over plain http stays refused (tests/mcp/test_outbound.py, test_attack_auth).
"""

from __future__ import annotations

import datetime as dt

import httpx2
import pytest
from django.utils import timezone

from mrtrweb.headless import client as headless
from mrtrweb.authz import service
from mrtrweb.authz.models import OAuthConnection
from mrtrweb.demo.oauth import DemoProvider as Provider
from mrtrweb.demo.oauth import build_auth_app
from mrtrweb.demo.server import build_demo_app, serve_built_in_thread
from mrtrweb.headless.client import ConsentPolicy
from tests.oauth_sdk_as import BearerGate

AS_PATHS = ("/.well-known/oauth-authorization-server", "/authorize", "/token", "/register", "/revoke")


@pytest.fixture
def one_origin(seeded, settings):
    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": False}
    provider = Provider(auto_approve=True)  # the demo's authorization server, approving at once
    gate = BearerGate(build_demo_app(), provider)
    hits: list[str] = []

    def make_app(port: int):
        as_app, _metadata = build_auth_app(provider, f"http://127.0.0.1:{port}")

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope["path"] in AS_PATHS:
                hits.append(scope["path"])
                return await as_app(scope, receive, send)
            return await gate(scope, receive, send)

        return app

    handle = serve_built_in_thread(make_app)
    origin = f"http://127.0.0.1:{handle.port}"
    gate.resource_metadata_url = f"{origin}/.well-known/oauth-protected-resource/mcp"
    gate.prm = {"resource": handle.url, "authorization_servers": [origin]}
    server = seeded["servers"]["acme"]
    server.url, server.auth_mode = handle.url, "oauth_user"
    server.save()
    yield {**seeded, "server": server, "provider": provider, "gate": gate, "origin": origin, "hits": hits}
    handle.stop()


async def _echo(o):
    return await headless.arun(url=o["server"].url, user=o["users"]["alice"], tenant=o["server"].tenant,
                               method="tools/call", params={"name": "echo", "arguments": {"text": "hi"}},
                               consent=ConsentPolicy.parse("decline"))


async def test_a_server_that_is_its_own_authorization_server_connects_refreshes_and_revokes(one_origin) -> None:
    o, provider = one_origin, one_origin["provider"]
    alice, server = o["users"]["alice"], o["server"]
    redirect = "http://127.0.0.1:9/mcp/oauth/callback/"
    start = await service.start_connect(user=alice, tenant=server.tenant, server=server, session_key="s1",
                                        return_to="/", redirect_uri=redirect)
    assert start.authorization_url.startswith(o["origin"] + "/authorize?")
    assert o["hits"][:2] == ["/.well-known/oauth-authorization-server", "/register"]  # discovery, DCR
    # the person's browser at the authorization endpoint (the SDK's server approves at once)
    async with httpx2.AsyncClient() as browser:
        answer = await browser.get(start.authorization_url)
    assert answer.status_code == 302 and answer.headers["location"].startswith(redirect)
    query = dict(httpx2.URL(answer.headers["location"]).params)
    conn = await service.finish_connect(user=alice, session_key="s1", query=query)  # the token request
    assert conn.issuer == o["origin"] and o["hits"].count("/token") == 1
    outcome = await _echo(o)
    assert outcome.status == "completed", outcome.error_message
    first = next(iter(provider.access))
    await OAuthConnection.objects.filter(pk=conn.pk).aupdate(expires_at=timezone.now() + dt.timedelta(seconds=5))
    outcome = await _echo(o)  # refreshed before expiry, at the same origin
    assert outcome.status == "completed" and provider.refresh_requests == 1
    assert o["gate"].seen_tokens[-1] != first
    # Disconnect: both revocation requests reach the same origin (the guard lets them through)
    assert await service.disconnect(user=alice, tenant=server.tenant, server=server) == service.REVOKED
    assert o["hits"].count("/revoke") == 2 and o["gate"].seen_tokens[-1] in provider.revoked
    assert not await OAuthConnection.objects.filter(pk=conn.pk).aexists()
