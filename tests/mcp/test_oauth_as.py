"""The test authorization server (``tests/oauth_as``, django-oauth-toolkit in a subprocess) and the
token-verifying demo MCP server in front of it, checked with plain HTTP and the ``mcp`` SDK's
client, without the product: what the product's authorization tests rely on.

One AS and one protected MCP server per module (about a second to start).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import urllib.parse

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.oauth_as.person import ApprovalFailed, approve

REDIRECT = "http://127.0.0.1:9/mcp/oauth/callback"  # never followed: approve() returns the redirect
from tests.oauth_as.fixtures import auth_server, protected  # noqa: F401 - pytest fixtures


@pytest.fixture(scope="module")
def client(auth_server):
    """A confidential client registered at the AS (what a tenant admin enters): ``(id, secret)``."""
    return auth_server.create_client(redirect_uris=[REDIRECT])


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorization_url(auth_server, client_id: str, challenge: str | None, state: str, resource: str | None,
                      scope: str = "mcp offline_access", method: str = "S256") -> str:
    q = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "state": state, "scope": scope}
    if challenge is not None:
        q.update(code_challenge=challenge, code_challenge_method=method)
    if resource is not None:
        q["resource"] = resource
    return f"{auth_server.authorize_url}?{urllib.parse.urlencode(q)}"


def connect(auth_server, client, username: str, resource: str | None, scope: str = "mcp offline_access") -> dict:
    """The whole authorization code flow for ``username``; returns the token response."""
    verifier, challenge = pkce()
    state = secrets.token_urlsafe(16)
    location = approve(authorization_url(auth_server, client[0], challenge, state, resource, scope), username)
    back = urllib.parse.urlsplit(location)
    params = dict(urllib.parse.parse_qsl(back.query))
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
    assert params["state"] == state
    assert params["iss"] == auth_server.issuer  # RFC 9207
    data = {"grant_type": "authorization_code", "code": params["code"], "redirect_uri": REDIRECT,
            "code_verifier": verifier}
    if resource is not None:
        data["resource"] = resource
    r = httpx2.post(auth_server.token_url, data=data, auth=client, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def call(url: str, token: str | None, tool: str, arguments: dict) -> str:
    """``tools/call`` through the SDK client with ``Authorization: Bearer token``; an elicitation
    (the tool's ``input_required`` round, answered by the SDK's retry loop) is accepted with
    ``{"confirm": true}``. Returns the result's text."""

    async def accept(context, params) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"confirm": True})

    async def run() -> str:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="auto",
                              elicitation_callback=accept) as c:
                result = await c.call_tool(tool, arguments)
        return "".join(b.text for b in result.content if isinstance(b, types.TextContent))

    return asyncio.run(run())


def post_mcp(url: str, token: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.post(url, headers=headers, timeout=10, content=b'{"jsonrpc":"2.0","id":1,"method":"ping"}')


# ------------------------------------------------------------------------------------------------


def test_metadata_is_rfc8414_with_s256_revocation_and_iss(auth_server):
    meta = httpx2.get(auth_server.metadata_url, timeout=10).json()
    assert meta["issuer"] == auth_server.issuer
    assert meta["authorization_endpoint"] == auth_server.authorize_url
    assert meta["token_endpoint"] == auth_server.token_url
    assert meta["revocation_endpoint"] == auth_server.revoke_url
    assert meta["introspection_endpoint"] == auth_server.introspect_url
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["scopes_supported"] == ["mcp", "mcp:admin", "offline_access"]
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert "registration_endpoint" not in meta  # clients are pre-registered


def test_mcp_server_serves_rfc9728_metadata_and_answers_401_with_its_url(auth_server, protected):
    prm = httpx2.get(protected.metadata_url, timeout=10).json()
    assert prm["resource"] == protected.url
    assert prm["authorization_servers"] == [auth_server.issuer]
    assert prm["scopes_supported"] == ["mcp"]
    for token in (None, "not-a-token"):
        r = post_mcp(protected.url, token)
        assert r.status_code == 401
        challenge = r.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and f'resource_metadata="{protected.metadata_url}"' in challenge


def test_alice_connects_and_the_server_sees_alice_through_a_round(auth_server, protected, client):
    auth_server.clear_events()
    tokens = connect(auth_server, client, "alice", protected.url)
    assert tokens["refresh_token"] and tokens["expires_in"] > 0
    assert set(tokens["scope"].split()) == {"mcp", "offline_access"}
    info = auth_server.introspect(tokens["access_token"])
    assert info["active"] is True and info["username"] == "alice" and info["aud"] == [protected.url]
    protected.verifier.clear()
    assert call(protected.url, tokens["access_token"], "whoami", {}) == "You are alice."
    assert call(protected.url, tokens["access_token"], "confirm_as_me", {"note": "n1"}) == "Confirmed n1 for alice."
    assert set(protected.verifier.usernames()) == {"alice"}
    (authorize_get, authorize_post) = auth_server.events("authorize")[-2:]
    assert authorize_get["user"] == "alice" and authorize_get["query"]["code_challenge_method"] == ["S256"]
    assert authorize_get["query"]["resource"] == [protected.url]
    assert "state" not in authorize_get["query"] and "code_challenge" not in authorize_get["query"]
    assert authorize_post["location"]["names"] == ["code", "iss", "state"]
    (token_event,) = auth_server.events("token")
    assert token_event["grant_type"] == "authorization_code" and token_event["username"] == "alice"
    assert token_event["has_code_verifier"] and token_event["client_id"] == client[0]


def test_bob_gets_his_own_token(auth_server, protected, client):
    tokens = connect(auth_server, client, "bob", protected.url)
    assert auth_server.introspect(tokens["access_token"])["username"] == "bob"
    assert call(protected.url, tokens["access_token"], "confirm_as_me", {"note": "n2"}) == "Confirmed n2 for bob."


def test_pkce_is_required_and_plain_refused(auth_server, client):
    for challenge, method, why in ((None, "S256", "Code challenge required"), ("x" * 43, "plain", "plain")):
        location = approve(authorization_url(auth_server, client[0], challenge, "st", None, "mcp", method), "alice")
        params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        assert params["error"] == "invalid_request" and why in params["error_description"]
        assert "code" not in params and params["state"] == "st"
        # DOT 3.4 sends RFC 9207 `iss` on success only, not on this error redirect
        assert "iss" not in params


def test_a_code_needs_its_verifier_and_is_single_use(auth_server, protected, client):
    verifier, challenge = pkce()
    location = approve(authorization_url(auth_server, client[0], challenge, "s", protected.url), "alice")
    code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))["code"]
    base = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "resource": protected.url}
    wrong = httpx2.post(auth_server.token_url, data={**base, "code_verifier": pkce()[0]}, auth=client, timeout=10)
    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_grant")
    first = httpx2.post(auth_server.token_url, data={**base, "code_verifier": verifier}, auth=client, timeout=10)
    assert first.status_code == 200, first.text  # a wrong verifier does not burn the code
    again = httpx2.post(auth_server.token_url, data={**base, "code_verifier": verifier}, auth=client, timeout=10)
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
    other_redirect = httpx2.post(auth_server.token_url, data={**base, "code_verifier": verifier,
                                                              "redirect_uri": REDIRECT + "x"}, auth=client, timeout=10)
    assert other_redirect.status_code == 400


def test_a_token_without_resource_is_refused_by_the_mcp_server(auth_server, protected, client):
    tokens = connect(auth_server, client, "alice", None)
    assert auth_server.introspect(tokens["access_token"])["active"] is True
    assert post_mcp(protected.url, tokens["access_token"]).status_code == 401


def test_a_token_without_the_scope_gets_403_insufficient_scope(auth_server, protected, client):
    tokens = connect(auth_server, client, "alice", protected.url, scope="offline_access")
    r = post_mcp(protected.url, tokens["access_token"])
    assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["www-authenticate"]


def test_refresh_after_expiry(auth_server, protected, client):
    """The access token expires when the test says so (``expire``), not after a short lifetime that a
    loaded machine outlives between two requests: the refreshed token then works for the lifetime the
    AS gives it (set to 30 min here: the knob applies to refreshed tokens too)."""
    tokens = connect(auth_server, client, "alice", protected.url)
    assert call(protected.url, tokens["access_token"], "whoami", {}) == "You are alice."
    assert auth_server.expire("alice") >= 1
    assert post_mcp(protected.url, tokens["access_token"]).status_code == 401
    auth_server.set_access_ttl(1800)
    try:
        r = httpx2.post(auth_server.token_url, data={"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
                                                     "resource": protected.url}, auth=client, timeout=10)
    finally:
        auth_server.set_access_ttl(3600)
    assert r.status_code == 200, r.text
    fresh = r.json()
    assert fresh["access_token"] != tokens["access_token"] and fresh["refresh_token"] != tokens["refresh_token"]
    assert fresh["expires_in"] == 1800
    assert call(protected.url, fresh["access_token"], "whoami", {}) == "You are alice."
    reused = httpx2.post(auth_server.token_url, data={"grant_type": "refresh_token",
                                                      "refresh_token": tokens["refresh_token"]}, auth=client, timeout=10)
    assert reused.status_code == 400  # rotated: the old refresh token is spent
    assert auth_server.events("token")[-1]["grant_type"] == "refresh_token"


def test_revocation_rfc7009(auth_server, protected, client):
    tokens = connect(auth_server, client, "bob", protected.url)
    assert call(protected.url, tokens["access_token"], "whoami", {}) == "You are bob."
    r = httpx2.post(auth_server.revoke_url, data={"token": tokens["refresh_token"], "token_type_hint": "refresh_token"},
                    auth=client, timeout=10)
    assert r.status_code == 200
    assert auth_server.introspect(tokens["access_token"])["active"] is False
    assert post_mcp(protected.url, tokens["access_token"]).status_code == 401
    assert auth_server.events("revoke")[-1]["token_type_hint"] == "refresh_token"


def test_control_views_need_the_secret(auth_server):
    for secret in ("", "wrong"):
        r = httpx2.get(f"{auth_server.issuer}/_test/events", headers={"X-Control-Secret": secret}, timeout=10)
        assert r.status_code == 403
