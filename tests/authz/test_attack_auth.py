"""Attacks on the authorization to MCP servers (issue 13), each a regression test of a fault found
by the attack branch: a malicious authorization server, a malicious MCP server, a re-pointed
server, a web attacker fuzzing the views. Real parts on loopback: the SDK's authorization server
(``tests/oauth_sdk_as.py``) in front of the demo MCP server verifying tokens, hostile ASGI servers
served by uvicorn, Django's test client through the whole middleware stack.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
from django.test import AsyncClient
from django.utils import timezone
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from mrtrweb.headless import client as headless
from mrtrweb.authz import crypto, service
from mrtrweb.authz.models import OAuthClientRegistration, OAuthConnection
from mrtrweb.demo.server import read_body, serve_asgi_in_thread
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.mcp.auth import AuthorizationFailed, ClientIdentity, MemoryStorage, begin_authorization
from mrtrweb.mcp.auth import follow_authorization_url
from mrtrweb.mcp.outbound import OutboundPolicy
from tests.oauth_sdk_as import oauth_fixture, serve_oauth_pair  # noqa: F401 - the fixture oauth

pytestmark = [pytest.mark.django_db(transaction=True)]

REDIRECT = "http://127.0.0.1:9/mcp/oauth/callback/"


async def _connect(o, who: str = "alice", session: str = "sess-1") -> OAuthConnection:
    user = o["users"][who]
    start = await service.start_connect(user=user, tenant=o["server"].tenant, server=o["server"],
                                        session_key=session, return_to="/mcp/", redirect_uri=REDIRECT)
    query = await follow_authorization_url(start.authorization_url, redirect_uri=REDIRECT,
                                           policy=service.outbound_policy())
    return await service.finish_connect(user=user, session_key=session, query=query)


async def _echo(o, who: str = "alice", url: str | None = None):
    return await headless.arun(url=url or o["server"].url, user=o["users"][who], tenant=o["server"].tenant,
                               method="tools/call", params={"name": "echo", "arguments": {"text": "hi"}},
                               consent=ConsentPolicy.parse("decline"))


# -- a web attacker fuzzing the views ----------------------------------------------------------------


async def test_disconnect_of_an_out_of_range_server_id_is_404_not_500(seeded) -> None:
    """``connections/<int>/disconnect/`` with an id past 64 bits: the foreign-key lookup raised
    OverflowError (SQLite) / DataError (PostgreSQL), a 500."""
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    response = await client.post("/mcp/connections/" + "9" * 25 + "/disconnect/")
    assert response.status_code == 404


# -- a malicious authorization server ------------------------------------------------------------------


@pytest.mark.parametrize("lifetime", [10 ** 13, 10 ** 30])
async def test_a_token_lifetime_past_the_calendar_is_not_a_500(oauth, lifetime: int) -> None:
    """The token endpoint answers ``expires_in`` of 10**13 s (300,000 years): ``timezone.now() +
    timedelta`` raised OverflowError out of ``finish_connect`` (a 500 at the callback). Now the
    lifetime is capped; the connection works."""
    o, provider = oauth, oauth["pair"].provider
    mint = provider._mint

    def long_lived(*args, **kwargs) -> OAuthToken:
        return mint(*args, **kwargs).model_copy(update={"expires_in": lifetime})

    provider._mint = long_lived
    conn = await _connect(o)
    row = await OAuthConnection.objects.aget(pk=conn.pk)
    assert row.expires_at is not None and row.expires_at.year < 9000
    assert (await _echo(o)).status == "completed"


class _HugeMetadata:
    """An MCP server whose protected resource metadata, at its own origin, never ends: ``huge``
    streams 64 KiB chunks up to ``total`` bytes; ``slow`` sends one byte every 0.3 s forever.
    ``sent`` counts the bytes it managed to send."""

    def __init__(self, mode: str, total: int = 200 * 1024 * 1024) -> None:
        self.mode, self.total, self.sent, self.base = mode, total, 0, ""

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/mcp":
            challenge = f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", challenge.encode()), (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        gone = asyncio.Event()  # uvicorn drops writes after the client left: watch for its disconnect

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        try:
            if self.mode == "huge":
                chunk = b" " * 65536
                await send({"type": "http.response.body", "body": b'{"resource": "', "more_body": True})
                while self.sent < self.total and not gone.is_set():
                    await asyncio.sleep(0)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    self.sent += len(chunk)
            else:
                for _ in range(10_000):
                    if gone.is_set():
                        break
                    await send({"type": "http.response.body", "body": b" ", "more_body": True})
                    self.sent += 1
                    await asyncio.sleep(0.3)
            await send({"type": "http.response.body", "body": b""})
        except OSError:
            return
        finally:
            watcher.cancel()


@pytest.mark.parametrize("mode", ["huge", "slow"])
async def test_discovery_at_the_servers_own_origin_is_bounded(mode: str) -> None:
    """The outbound guard exempted the MCP server's own origin from its size and time bounds, so
    a malicious server's metadata at its own well-known URL was read whole (200 MB here) or for
    ever (a byte every 0.3 s keeps each read under the read timeout). Discovery responses are now
    bounded there too (``max_bytes``, ``timeout_s``): the Connect is refused as ``outbound_refused``."""
    app = _HugeMetadata(mode)
    handle = serve_asgi_in_thread(app)
    app.base = f"http://127.0.0.1:{handle.port}"
    policy = OutboundPolicy(allow_http_loopback=True, timeout_s=2.0, max_bytes=256 * 1024)
    started = time.monotonic()
    try:
        with pytest.raises(AuthorizationFailed) as caught:
            await asyncio.wait_for(begin_authorization(handle.url, identity=ClientIdentity(redirect_uri=REDIRECT),
                                                       storage=MemoryStorage(), policy=policy), 30)
    finally:
        handle.stop()
    assert caught.value.code == "outbound_refused", caught.value.message
    assert time.monotonic() - started < 15
    if mode == "huge":
        assert app.sent < 64 * 1024 * 1024  # stopped near max_bytes (plus what the sockets buffer)


async def test_refresh_presents_the_registration_of_the_connections_own_issuer(oauth) -> None:
    """The server's authorization server changed after alice connected (another issuer, another
    DCR registration, now the newest). Her refresh at her own authorization server presented the
    **newest** registration -- another authorization server's client id and secret sent to hers
    (and her refresh refused). The registration used is the one of her connection's issuer."""
    o, pair = oauth, oauth["pair"]
    conn = await _connect(o)
    mine = await OAuthClientRegistration.objects.filter(server=o["server"]).aget()
    other = OAuthClientInformationFull(client_id="other-as-client", client_secret="other-as-secret",
                                       redirect_uris=[REDIRECT], token_endpoint_auth_method="client_secret_post",
                                       issuer="https://other-as.example/")
    await OAuthClientRegistration.objects.acreate(
        server=o["server"], issuer="https://other-as.example/", how="dcr", client_id="other-as-client",
        client_info_sealed=crypto.seal(other.model_dump(mode="json", exclude_none=True)),
        created_at=timezone.now() + dt.timedelta(seconds=5))
    await OAuthConnection.objects.filter(pk=conn.pk).aupdate(expires_at=timezone.now() + dt.timedelta(seconds=5))
    outcome = await _echo(o)
    assert outcome.status == "completed", outcome.error_message
    assert pair.provider.refresh_requests == 1  # refreshed at her authorization server, as her client
    storage = service._storage(tenant=o["server"].tenant, user=o["users"]["alice"], server=o["server"])
    assert (await storage.get_client_info()).client_id == mine.client_id


# -- a re-pointed server -----------------------------------------------------------------------------------


async def test_tokens_never_go_to_a_server_url_they_were_not_issued_for(oauth) -> None:
    """An admin re-points the server at another MCP server (another origin). Alice's stored tokens,
    issued for the old resource, went to the new one as her bearer (token confinement: "tokens go
    only to the server they were issued for"). Now they are not sent: she is asked to connect."""
    o = oauth
    await _connect(o)
    other = serve_oauth_pair(scopes=["mcp:read"])
    try:
        o["server"].url = other.mcp_url
        await o["server"].asave()
        outcome = await _echo(o, url=other.mcp_url)
        assert outcome.status == "failed" and outcome.error_code == "authorization_required"
        assert other.gate.seen_tokens == []
    finally:
        other.stop()


async def test_a_callback_after_the_server_was_re_pointed_stores_nothing(oauth) -> None:
    """Alice starts Connect; before her callback an admin re-points the server elsewhere. The
    callback stored tokens for the old resource on the re-pointed server."""
    o = oauth
    user = o["users"]["alice"]
    start = await service.start_connect(user=user, tenant=o["server"].tenant, server=o["server"],
                                        session_key="s", return_to="/mcp/", redirect_uri=REDIRECT)
    query = await follow_authorization_url(start.authorization_url, redirect_uri=REDIRECT,
                                           policy=service.outbound_policy())
    o["server"].url = o["mcp"].url
    await o["server"].asave()
    with pytest.raises(service.ConnectRefused) as caught:
        await service.finish_connect(user=user, session_key="s", query=query)
    assert caught.value.code == "state_invalid"
    assert not await OAuthConnection.objects.aexists()
    assert o["pair"].provider.token_requests == 0


# -- a malicious MCP server naming its own authorization server ---------------------------------------


class _RecordingAS:
    """An authorization server of the attacker's: RFC 8414 metadata naming its own token endpoint,
    which records every request (headers and body) and answers ``invalid_client``."""

    def __init__(self) -> None:
        self.base = ""
        self.token_requests: list[bytes] = []

    async def __call__(self, scope, receive, send) -> None:
        import json

        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await read_body(receive)
        if scope["path"].startswith("/.well-known/oauth-authorization-server"):
            status, data = 200, {"issuer": self.base, "authorization_endpoint": f"{self.base}/authorize",
                                 "token_endpoint": f"{self.base}/token", "response_types_supported": ["code"],
                                 "grant_types_supported": ["client_credentials"]}
        elif scope["path"] == "/token":
            self.token_requests.append(b"\n".join(k + b": " + v for k, v in scope["headers"]) + b"\n\n" + body)
            status, data = 401, {"error": "invalid_client"}
        else:
            status, data = 404, {"error": "not_found"}
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(data).encode()})


async def test_client_credentials_never_go_to_an_authorization_server_the_mcp_server_names(oauth) -> None:
    """OAuth client credentials: the admin entered a client id and secret issued by their
    authorization server. The MCP server (compromised, or re-pointed) names another authorization
    server in its protected resource metadata: the client secret was POSTed to that server's token
    endpoint (client_secret_basic), a credential leak to whoever runs it. The secret must only go
    to the authorization server it was issued by."""
    import base64

    o, pair = oauth, oauth["pair"]
    attacker = _RecordingAS()
    handle = serve_asgi_in_thread(attacker, path="")
    attacker.base = f"http://127.0.0.1:{handle.port}"
    try:
        pair.gate.prm = {**pair.gate.prm, "authorization_servers": [attacker.base]}
        server = o["server"]
        server.auth_mode = "oauth_client"
        server.oauth_client_id = "machine-client"
        crypto.set_server_secret(server, {"client_secret": "machine-secret-0123456789"})
        await server.asave()
        outcome = await _echo(o)
        assert outcome.status == "failed"
        leaked = [r for r in attacker.token_requests
                  if b"machine-secret" in r or base64.b64encode(b"machine-client:machine-secret-0123456789") in r]
        assert leaked == [], "the client secret went to the authorization server the MCP server named"
    finally:
        handle.stop()


async def test_step_up_challenges_do_not_grow_the_scope_without_bound(oauth) -> None:
    """A malicious server answers every call ``403 insufficient_scope`` with a new ~900-character
    scope. Each was unioned into the remembered challenge for good: after many calls the next
    Connect's authorization URL (and the stored metadata) grew without bound. The remembered
    challenge is bounded; the newest challenge is kept."""
    o = oauth
    await _connect(o)
    user, server = o["users"]["alice"], o["server"]
    last = ""
    for n in range(8):
        last = f"s{n}-" + "x" * 900
        await service.note_challenge(server=server, user=user, tenant=server.tenant, scope=last)
    storage = service._storage(tenant=server.tenant, user=user, server=server)
    noted = (await storage.get_server_metadata())["challenged_scope"]
    assert len(noted) <= 2000 and last in noted.split()
