"""The framework-free OAuth client (``mrtrweb.mcp.auth``, ``mrtrweb.mcp.connection``) against the
real test authorization server (``tests/oauth_as``, django-oauth-toolkit) and the token-verifying
demo MCP server, without Django or a browser: the person's step is :func:`tests.oauth_as.person.approve`
(login and consent over plain HTTP).

* begin -> approve -> complete stores tokens; a call through ``McpConnection(auth=bearer_auth(...))``
  runs as alice through an ``input_required`` round (the retry carries her token too);
* an access token expired at the AS and locally is refreshed once (rotation: a second refresh with
  the old refresh token would be refused by the AS);
* a callback whose ``state`` or ``iss`` is not the flow's is refused and nothing is stored;
* hostile discovery (``tests/oauth_as/hostile_discovery.py``) is refused with a stable code, and
  nothing but the MCP server's own host is fetched (a redirect elsewhere is not followed).
"""

from __future__ import annotations

import urllib.parse

import pytest
from mcp.shared.auth import OAuthClientInformationFull

from mrtrweb.mcp.auth import (AuthorizationFailed, ClientIdentity, MemoryStorage, bearer_auth, begin_authorization,
                              complete_authorization)
from mrtrweb.mcp.connection import McpConnection
from mrtrweb.mcp.outbound import OutboundPolicy
from tests.oauth_as.hostile_discovery import CASES, DETERMINED_CODES, SAME_ORIGIN_FALLBACK
from tests.oauth_as.person import approve

REDIRECT = "http://127.0.0.1:9/mcp/oauth/callback/"
POLICY = OutboundPolicy(allow_http_loopback=True)
from tests.oauth_as.fixtures import auth_server, hostile, protected  # noqa: F401 - pytest fixtures


@pytest.fixture(scope="module")
def identity(auth_server):
    client_id, secret = auth_server.create_client(redirect_uris=[REDIRECT])
    return ClientIdentity(redirect_uri=REDIRECT, client_id=client_id, client_secret=secret, issuer=auth_server.issuer)


def _query(location: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))


async def _connect(protected, identity, username: str) -> MemoryStorage:
    storage = MemoryStorage()
    flow = await begin_authorization(protected.url, identity=identity, storage=storage, policy=POLICY)
    assert flow is not None and flow.how == "preregistered"
    q = _query(approve(flow.authorization_url, username))
    await complete_authorization(flow, code=q.get("code"), state=q.get("state"), iss=q.get("iss"), error=q.get("error"),
                                 error_description=q.get("error_description"), storage=storage, policy=POLICY)
    # A pre-registered client is not kept by the flow (the Django storage reads it from the server's
    # settings); the caller's storage holds it, as it would a DCR or CIMD registration.
    storage.client_info = OAuthClientInformationFull.model_validate(flow.client_info)
    return storage


async def _call(protected, storage, tool: str, arguments: dict, answer: dict | None = None) -> dict:
    auth = bearer_auth(protected.url, storage=storage, policy=POLICY, refresh_margin_s=1)
    async with McpConnection(protected.url, auth=auth) as conn:
        result = await conn.send("tools/call", {"name": tool, "arguments": arguments}, "c-1")
        if answer is not None:
            assert result.get("resultType") == "input_required", result
            key = next(iter(result["inputRequests"]))
            result = await conn.send("tools/call", {"name": tool, "arguments": arguments,
                                                    "inputResponses": {key: {"action": "accept", "content": answer}},
                                                    "requestState": result["requestState"]}, "c-2")
    return result


def _text(result: dict) -> str:
    return "".join(b.get("text", "") for b in result.get("content", []))


async def test_begin_approve_complete_then_a_round_as_alice(auth_server, protected, identity):
    auth_server.clear_events()
    storage = await _connect(protected, identity, "alice")
    tokens = await storage.get_tokens()
    assert tokens is not None and tokens.refresh_token
    assert auth_server.introspect(tokens.access_token)["aud"] == [protected.url]
    protected.verifier.clear()
    result = await _call(protected, storage, "confirm_as_me", {"note": "x"}, answer={"confirm": True})
    assert _text(result) == "Confirmed x for alice."
    seen = protected.verifier.usernames()
    assert set(seen) == {"alice"} and len(seen) >= 2  # the call and its retry (and the negotiation)
    (authorize_get, _post) = auth_server.events("authorize")
    assert authorize_get["query"]["code_challenge_method"] == ["S256"]
    assert set(authorize_get["query"]["scope"][0].split()) == {"mcp", "offline_access"}


async def test_expiry_is_refreshed_once(auth_server, protected, identity):
    auth_server.set_access_ttl(2)
    try:
        storage = await _connect(protected, identity, "bob")
    finally:
        auth_server.set_access_ttl(3600)
    old = await storage.get_tokens()
    auth_server.expire("bob")
    import asyncio

    await asyncio.sleep(1.2)  # within the 1 s margin locally too
    auth_server.clear_events()
    assert _text(await _call(protected, storage, "whoami", {})) == "You are bob."
    refreshes = [e for e in auth_server.events("token") if e["grant_type"] == "refresh_token"]
    assert [(e["username"], e["status"]) for e in refreshes] == [("bob", 200)]
    assert (await storage.get_tokens()).access_token != old.access_token


@pytest.mark.parametrize("tamper", ["state", "iss"])
async def test_a_foreign_state_or_iss_is_refused_and_nothing_stored(auth_server, protected, identity, tamper):
    storage = MemoryStorage()
    flow = await begin_authorization(protected.url, identity=identity, storage=storage, policy=POLICY)
    q = _query(approve(flow.authorization_url, "alice"))
    q[tamper] = "http://127.0.0.1:1" if tamper == "iss" else "another-flows-state"
    with pytest.raises(AuthorizationFailed):
        await complete_authorization(flow, code=q["code"], state=q["state"], iss=q["iss"], error=None,
                                     error_description=None, storage=storage, policy=POLICY)
    assert await storage.get_tokens() is None


async def test_consent_denied_is_refused(auth_server, protected, identity):
    storage = MemoryStorage()
    flow = await begin_authorization(protected.url, identity=identity, storage=storage, policy=POLICY)
    q = _query(approve(flow.authorization_url, "alice", allow=False))
    assert q["error"] == "access_denied"
    with pytest.raises(AuthorizationFailed, match="access_denied"):
        await complete_authorization(flow, code=q.get("code"), state=q.get("state"), iss=q.get("iss"),
                                     error=q.get("error"), error_description=q.get("error_description"),
                                     storage=storage, policy=POLICY)
    assert await storage.get_tokens() is None


#: with a client secret pinned to the real authorization server's issuer, the cases leading to
#: another authorization server (``as-private``: named in the PRM; ``redirect``: the fallback to the
#: MCP server's own origin) are refused before the flow goes there, not by the outbound guard
PINNED_CODES = {**DETERMINED_CODES, "as-private": "authorization_failed", "redirect": "authorization_failed"}


@pytest.mark.parametrize("pinned", [False, True], ids=["public-client", "pinned-secret"])
@pytest.mark.parametrize("case", CASES)
async def test_hostile_discovery_is_refused(auth_server, hostile, identity, case, pinned):
    auth_server.clear_events()
    hostile.requests.clear()
    storage = MemoryStorage()
    # public-client: a pre-registered client id without secret (not pinned: the outbound guard's refusals)
    ident = identity if pinned else ClientIdentity(redirect_uri=REDIRECT, client_id=identity.client_id)
    if case in SAME_ORIGIN_FALLBACK and not pinned:
        flow = await begin_authorization(hostile.url(case), identity=ident, storage=storage, policy=POLICY)
        assert flow.authorization_origin == hostile.base  # the server's own origin, not the redirect's host
    else:
        with pytest.raises(AuthorizationFailed) as refused:
            await begin_authorization(hostile.url(case), identity=ident, storage=storage, policy=POLICY)
        assert refused.value.code == (PINNED_CODES if pinned else DETERMINED_CODES)[case], str(refused.value)
    assert await storage.get_tokens() is None and await storage.get_client_info() is None
    assert hostile.requests and all(host == hostile.base.removeprefix("http://") for host, _ in hostile.requests)
    assert auth_server.events("authorize") == []
