"""The Django side of OAuth per user (``mrtrweb.authz.service`` and ``storage``) with the real
operations path: a real authorization server (the SDK's, ``tests/oauth_sdk_as.py``) in front of the
demo MCP server verifying tokens, on loopback; the browser's part done by following the redirect.

The callback CSRF (a victim completing a flow an attacker started), state reuse, another browser
session, an expired flow: each refused with ``state_invalid`` and nothing stored on either account.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from django.utils import timezone

from mrtrweb.headless import client as headless
from mrtrweb.authz import service
from mrtrweb.authz.models import OAuthConnection, PendingAuthorization
from mrtrweb.authz.storage import DjangoTokenStorage
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.mcp.auth import follow_authorization_url
from tests.oauth_sdk_as import oauth_fixture  # noqa: F401 - the fixture oauth

REDIRECT = "http://127.0.0.1:9/mcp/oauth/callback/"


async def _start(o, who: str, session: str = "sess-1"):
    return await service.start_connect(user=o["users"][who], tenant=o["server"].tenant, server=o["server"],
                                       session_key=session, return_to="/mcp/servers/1/", redirect_uri=REDIRECT)


async def _approve(o, start) -> dict:
    return await follow_authorization_url(start.authorization_url, redirect_uri=REDIRECT,
                                          policy=service.outbound_policy())


async def _echo(o, who: str):
    return await headless.arun(url=o["server"].url, user=o["users"][who], tenant=o["server"].tenant,
                               method="tools/call", params={"name": "echo", "arguments": {"text": "hi"}},
                               consent=ConsentPolicy.parse("decline"))


async def test_connect_call_refresh_disconnect(oauth) -> None:
    from mcp.shared.auth import OAuthClientInformationFull

    from mrtrweb.authz.crypto import seal
    o, pair = oauth, oauth["pair"]
    pair.provider.clients["admin-made"] = OAuthClientInformationFull(
        client_id="admin-made", client_secret="s3cret-admin", redirect_uris=[REDIRECT],
        token_endpoint_auth_method="client_secret_post", scope="mcp:read offline_access")
    o["server"].oauth_client_id = "admin-made"
    o["server"].oauth_issuer = pair.as_url  # the authorization server that issued it
    o["server"].auth_secret_sealed = seal({"client_secret": "s3cret-admin"})
    await o["server"].asave()
    # without a connection: a named failure, not transport_error
    outcome = await _echo(o, "alice")
    assert outcome.status == "failed" and outcome.error_code == "authorization_required"
    start = await _start(o, "alice")
    assert start.authorization_origin == pair.as_url
    query = await _approve(o, start)
    conn = await service.finish_connect(user=o["users"]["alice"], session_key="sess-1", query=query)
    assert conn.return_to == "/mcp/servers/1/" and conn.issuer == pair.as_url
    token = next(iter(pair.provider.access))
    row = await OAuthConnection.objects.aget(pk=conn.pk)
    assert token not in row.tokens_sealed and token not in str(row.oauth_metadata)  # sealed at rest
    outcome = await _echo(o, "alice")
    assert outcome.status == "completed", outcome.error_message
    assert set(pair.gate.seen_tokens) == {token}
    # carol, same tenant and server, has no connection: alice's token is never used for her
    outcome = await _echo(o, "carol")
    assert outcome.error_code == "authorization_required" and set(pair.gate.seen_tokens) == {token}
    # expiry -> refreshed without the person, once for concurrent callers (locked, re-read after the lock)
    await OAuthConnection.objects.filter(pk=conn.pk).aupdate(expires_at=timezone.now() + dt.timedelta(seconds=5))
    stores = [service._storage(tenant=o["server"].tenant, user=o["users"]["alice"], server=o["server"])
              for _ in range(4)]
    assert all(isinstance(s, DjangoTokenStorage) for s in stores)
    from mrtrweb.mcp.auth.bearer import StoredBearerAuth
    auths = [StoredBearerAuth(o["server"].url, storage=s, policy=service.outbound_policy()) for s in stores]
    results = await asyncio.gather(*(s.refresh_locked(60, a._refresh) for s, a in zip(stores, auths)))
    assert pair.provider.refresh_requests == 1
    assert len({t.access_token for t in results}) == 1 and results[0].access_token != token
    row = await OAuthConnection.objects.aget(pk=conn.pk)
    assert row.family == conn.family and row.refreshed_at is not None  # a refresh keeps the family
    outcome = await _echo(o, "alice")
    assert outcome.status == "completed" and pair.gate.seen_tokens[-1] == results[0].access_token
    # Disconnect: revoked at the authorization server (RFC 7009), deleted; the next call asks to connect
    assert await service.disconnect(user=o["users"]["alice"], tenant=o["server"].tenant, server=o["server"])
    assert results[0].access_token in pair.provider.revoked and len(pair.provider.revoked) == 2
    assert not await OAuthConnection.objects.filter(pk=conn.pk).aexists()
    outcome = await _echo(o, "alice")
    assert outcome.error_code == "authorization_required"


async def test_callback_csrf_victim_completing_attackers_flow_stores_nothing(oauth) -> None:
    o = oauth
    attacker = await _start(o, "carol", session="carol-session")
    query = await _approve(o, attacker)  # the attacker's own approval; the link is sent to alice
    with pytest.raises(service.ConnectRefused) as caught:
        await service.finish_connect(user=o["users"]["alice"], session_key="alice-session", query=query)
    assert caught.value.code == "state_invalid"
    # spent: not usable by the attacker afterwards either
    with pytest.raises(service.ConnectRefused):
        await service.finish_connect(user=o["users"]["carol"], session_key="carol-session", query=query)
    assert not await OAuthConnection.objects.aexists()
    assert o["pair"].provider.token_requests == 0  # no code was ever exchanged


@pytest.mark.parametrize("case", ["reuse", "other_session", "expired", "unknown", "wrong_iss", "as_error"])
async def test_refused_callbacks(oauth, case: str) -> None:
    o = oauth
    start = await _start(o, "alice")
    query = await _approve(o, start)
    alice = o["users"]["alice"]
    session = "sess-1"
    if case == "reuse":
        await service.finish_connect(user=alice, session_key=session, query=query)
        await OAuthConnection.objects.all().adelete()
    elif case == "other_session":
        session = "sess-2"
    elif case == "expired":
        await PendingAuthorization.objects.aupdate(expires_at=timezone.now() - dt.timedelta(seconds=1))
    elif case == "unknown":
        query = {**query, "state": "x" * 43}
    elif case == "wrong_iss":
        query = {**query, "iss": "https://attacker.example"}
    elif case == "as_error":
        query = {"state": query["state"], "error": "access_denied", "error_description": "no <b>way</b>"}
    with pytest.raises(service.ConnectRefused) as caught:
        await service.finish_connect(user=alice, session_key=session, query=query)
    expected = "authorization_failed" if case in ("wrong_iss", "as_error") else "state_invalid"
    assert caught.value.code == expected
    assert not await OAuthConnection.objects.aexists()
    assert query.get("code", "") not in caught.value.message or not query.get("code")


async def test_tenant_credentials_and_a_changed_secret(oauth) -> None:
    """Tenant mode: the sealed bearer goes to the server; a replaced secret replaces the pooled connection."""
    from mrtrweb.authz.crypto import seal
    o, pair = oauth, oauth["pair"]
    minted = pair.provider._mint("tenant-client", ["mcp:read"], None, "acme")
    server = o["server"]
    server.auth_mode = "tenant"
    server.auth_secret_sealed = seal({"bearer": minted.access_token})
    server.auth_secret_digest = "sha256:one"
    await server.asave()
    assert (await _echo(o, "alice")).status == "completed"
    second = pair.provider._mint("tenant-client", ["mcp:read"], None, "acme")
    server.auth_secret_sealed = seal({"bearer": second.access_token})
    server.auth_secret_digest = "sha256:two"
    await server.asave()
    assert (await _echo(o, "alice")).status == "completed"
    assert pair.gate.seen_tokens[-1] == second.access_token
    ident = await service.identity_for(server=server, user=o["users"]["alice"], tenant=server.tenant)
    assert ident.mode == "tenant" and second.access_token not in ident.digest
