"""An MCP server that is its own authorization server (one origin, plain http on loopback, as a
tenant admin may configure an internal server), with ``OUTBOUND_ALLOW_HTTP_LOOPBACK`` **off**.

The admin chose that origin, so the outbound guard's address rules let it pass -- for every
authorization request alike: discovery and registration (which already did), and also the
authorization endpoint the browser is sent to, the token request, the refresh and the revocation
(which did not: a newcomer saw discovery and registration succeed, then ``the authorization
endpoint is not an https URL`` and ``plain http is not allowed`` for the token request at the same
origin). Another origin over plain http stays refused (tests/test_outbound.py, test_attack_auth).
"""

from __future__ import annotations

import datetime as dt

import httpx2
import pytest
from django.utils import timezone
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from mrtrweb import headless
from mrtrweb.authz import service
from mrtrweb.authz.models import OAuthConnection
from mrtrweb.demo.server import build_demo_app, serve_asgi_in_thread
from mrtrweb.headless import ConsentPolicy
from tests.oauth_sdk_as import BearerGate, Provider

AS_PATHS = ("/.well-known/oauth-authorization-server", "/authorize", "/token", "/register", "/revoke")


@pytest.fixture
def one_origin(seeded, settings):
    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": False}
    provider = Provider()
    metadata: dict = {}

    async def as_metadata(_request):
        return JSONResponse(metadata)

    as_app = Starlette(routes=[Route("/.well-known/oauth-authorization-server", as_metadata)]
                       + create_auth_routes(provider, AnyHttpUrl("http://127.0.0.1:1"),
                                            client_registration_options=ClientRegistrationOptions(enabled=True),
                                            revocation_options=RevocationOptions(enabled=True)))
    gate = BearerGate(build_demo_app(), provider)
    hits: list[str] = []

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"] in AS_PATHS:
            hits.append(scope["path"])
            return await as_app(scope, receive, send)
        return await gate(scope, receive, send)

    handle = serve_asgi_in_thread(app)
    origin = f"http://127.0.0.1:{handle.port}"
    provider.issuer = origin
    metadata.update(build_metadata(AnyHttpUrl(origin), None, ClientRegistrationOptions(enabled=True),
                                   RevocationOptions(enabled=True)).model_dump(mode="json", exclude_none=True))
    metadata["issuer"] = origin
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
    # Disconnect: both revocation requests reach the same origin (the guard lets them through). The
    # SDK's authorization server answers 400 to a public client's revocation (its RevocationRequest
    # requires a client_secret field), so the connection is deleted here only.
    assert await service.disconnect(user=alice, tenant=server.tenant, server=server) == service.DELETED
    assert o["hits"].count("/revoke") == 2
    assert not await OAuthConnection.objects.filter(pk=conn.pk).aexists()
