"""OAuth per user, framework-free (``mrtrweb.mcp.auth``), against a real authorization server (the
``mcp`` SDK's server auth, ``tests/oauth_sdk_as.py``) in front of the demo MCP server verifying
tokens; everything over HTTP on loopback, the browser's part done by following the redirect.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid

import pytest

from mrtrweb.mcp import McpCallError, McpConnection
from mrtrweb.mcp.auth import (AuthorizationFailed, ClientIdentity, MemoryStorage, begin_authorization, bearer_auth,
                              complete_authorization, follow_authorization_url, static_headers_auth)
from mrtrweb.mcp.outbound import OutboundPolicy
from tests.oauth_sdk_as import serve_oauth_pair

POLICY = OutboundPolicy(allow_http_loopback=True, timeout_s=5.0)
REDIRECT = "http://127.0.0.1:9/mrtrweb/oauth/callback"
IDENTITY = ClientIdentity(redirect_uri=REDIRECT, client_name="mrtrweb-test")


@pytest.fixture
def pair():
    p = serve_oauth_pair(scopes=["mcp:read", "mcp:deploy", "offline_access"], scoped_tools={"deploy": "mcp:deploy"})
    yield p
    p.stop()


async def connect(pair, storage: MemoryStorage, identity: ClientIdentity = IDENTITY, scope: str | None = None):
    flow = await begin_authorization(pair.mcp_url, identity=identity, storage=storage, policy=POLICY, scope=scope)
    assert flow is not None
    query = await follow_authorization_url(flow.authorization_url, redirect_uri=REDIRECT, policy=POLICY)
    return flow, query


async def echo(conn: McpConnection) -> dict:
    return await conn.send("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, f"t-{uuid.uuid4()}")


async def test_connect_then_call_with_the_stored_token(pair) -> None:
    storage = MemoryStorage()
    flow, query = await connect(pair, storage)
    url = urllib.parse.urlsplit(flow.authorization_url)
    params = dict(urllib.parse.parse_qsl(url.query))
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) == 43
    assert params["resource"] == pair.mcp_url  # RFC 8707, exactly the PRM's resource
    assert params["scope"].split() == ["mcp:read", "mcp:deploy", "offline_access"]  # PRM scopes_supported
    assert params["prompt"] == "consent"
    assert flow.authorization_origin == pair.as_url
    assert flow.how == "dcr" and storage.client_info is not None  # registered once, kept
    assert await storage.get_tokens() is None
    tokens = await complete_authorization(flow, code=query["code"], state=query["state"], iss=query.get("iss"),
                                          error=None, error_description=None, storage=storage, policy=POLICY)
    assert pair.provider.authorize_params[-1].resource == pair.mcp_url
    assert (await storage.get_tokens()).access_token == tokens.access_token
    assert storage.server_metadata["metadata"]["issuer"] == pair.as_url
    async with McpConnection(pair.mcp_url, timeout_s=10, outbound=POLICY,
                             auth=bearer_auth(pair.mcp_url, storage=storage, policy=POLICY)) as conn:
        assert "hi" in str(await echo(conn))
    assert set(pair.gate.seen_tokens) == {tokens.access_token}
    # a second flow reuses the registration (no second DCR)
    before = len(pair.provider.clients)
    await connect(pair, storage)
    assert len(pair.provider.clients) == before


async def test_no_token_is_authorization_required_with_the_challenge(pair) -> None:
    conn = McpConnection(pair.mcp_url, timeout_s=10, outbound=POLICY,
                         auth=bearer_auth(pair.mcp_url, storage=MemoryStorage(), policy=POLICY))
    with pytest.raises(McpCallError) as caught:
        await conn.open()
    assert caught.value.code == "authorization_required"
    assert caught.value.challenge["resource_metadata"] == pair.gate.resource_metadata_url
    assert caught.value.http_status == 401


async def test_401_and_403_on_a_call(pair) -> None:
    storage = MemoryStorage()
    flow, query = await connect(pair, storage, identity=ClientIdentity(redirect_uri=REDIRECT, scope=None))
    pair.provider.codes[query["code"]].scopes = ["mcp:read"]  # the person granted less than asked
    await complete_authorization(flow, code=query["code"], state=query["state"], iss=query["iss"], error=None,
                                 error_description=None, storage=storage, policy=POLICY)
    async with McpConnection(pair.mcp_url, timeout_s=10, outbound=POLICY,
                             auth=bearer_auth(pair.mcp_url, storage=storage, policy=POLICY)) as conn:
        with pytest.raises(McpCallError) as caught:
            await conn.send("tools/call", {"name": "deploy", "arguments": {}}, "d-1")
        assert caught.value.code == "insufficient_scope" and caught.value.scope == "mcp:deploy"
        # revoked elsewhere (disconnect on another worker): the next request carries no token at all
        storage.clear()
        with pytest.raises(McpCallError) as caught:
            await echo(conn)
        assert caught.value.code == "authorization_required"


async def test_step_up_unions_granted_and_challenged_scope(pair) -> None:
    storage = MemoryStorage()
    flow, query = await connect(pair, storage)
    pair.provider.codes[query["code"]].scopes = ["mcp:read"]
    await complete_authorization(flow, code=query["code"], state=query["state"], iss=query["iss"], error=None,
                                 error_description=None, storage=storage, policy=POLICY)
    flow2, query2 = await connect(pair, storage, scope="mcp:deploy")
    asked = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(flow2.authorization_url).query))["scope"].split()
    assert "mcp:read" in asked and "mcp:deploy" in asked
    await complete_authorization(flow2, code=query2["code"], state=query2["state"], iss=query2["iss"], error=None,
                                 error_description=None, storage=storage, policy=POLICY)
    async with McpConnection(pair.mcp_url, timeout_s=10, outbound=POLICY,
                             auth=bearer_auth(pair.mcp_url, storage=storage, policy=POLICY)) as conn:
        raw = await conn.send("tools/call", {"name": "deploy", "arguments": {}}, "d-2")
        assert isinstance(raw, dict) and "isError" not in str(raw)[:0]  # no 403: the step-up scope was granted


async def test_refresh_before_expiry_once_for_concurrent_requests(pair) -> None:
    storage = MemoryStorage()
    pair.provider.access_ttl_s = 30  # less than the 60 s margin: the next request refreshes
    flow, query = await connect(pair, storage)
    first = await complete_authorization(flow, code=query["code"], state=query["state"], iss=query["iss"],
                                         error=None, error_description=None, storage=storage, policy=POLICY)
    pair.provider.access_ttl_s = 3600
    auth = bearer_auth(pair.mcp_url, storage=storage, policy=POLICY, refresh_margin_s=60)
    async with McpConnection(pair.mcp_url, timeout_s=10, outbound=POLICY, auth=auth) as conn:
        await asyncio.gather(*(echo(conn) for _ in range(5)))
    assert pair.provider.refresh_requests == 1 and storage.refreshes == 1
    now = await storage.get_tokens()
    assert now.access_token != first.access_token and now.refresh_token != first.refresh_token
    assert first.refresh_token not in pair.provider.refresh  # rotated: the old one is spent
    assert first.access_token not in pair.gate.seen_tokens[1:]


@pytest.mark.parametrize("tamper, expected", [
    ({"state": "someone-elses-state"}, "state does not belong"),
    ({"state": None}, "state does not belong"),
    ({"iss": "http://127.0.0.1:1"}, "issuer (iss)"),
    ({"code": None}, "no authorization code"),
    ({"code": "a-code-from-another-flow"}, "token request was refused"),
    ({"error": "access_denied", "error_description": "The user\u202e said\nno\x00"}, "refused: access_denied: The user? said no?"),
])
async def test_bad_callbacks_store_nothing(pair, tamper: dict, expected: str) -> None:
    storage = MemoryStorage()
    flow, query = await connect(pair, storage)
    values = {"code": query["code"], "state": query["state"], "iss": query.get("iss"), "error": None,
              "error_description": None, **tamper}
    with pytest.raises(AuthorizationFailed) as caught:
        await complete_authorization(flow, storage=storage, policy=POLICY, **values)
    assert expected in caught.value.message
    assert query["code"] not in caught.value.message and flow.code_verifier not in caught.value.message
    assert await storage.get_tokens() is None and storage.server_metadata is None


async def test_missing_iss_when_advertised_is_refused() -> None:
    pair = serve_oauth_pair(metadata_overrides={"authorization_response_iss_parameter_supported": True})
    try:
        pair.provider.iss_in_redirect = None
        storage = MemoryStorage()
        flow, query = await connect(pair, storage)
        assert "iss" not in query
        with pytest.raises(AuthorizationFailed, match="issuer"):
            await complete_authorization(flow, code=query["code"], state=query["state"], iss=None, error=None,
                                         error_description=None, storage=storage, policy=POLICY)
        assert pair.provider.token_requests == 0
    finally:
        pair.stop()


@pytest.mark.parametrize("kind", ["resource", "issuer"])
async def test_resource_or_issuer_mismatch_refused_before_any_authorization(kind: str) -> None:
    pair = serve_oauth_pair(prm_resource="https://evil.example.com/mcp" if kind == "resource" else None,
                            metadata_overrides={"issuer": "https://attacker.example.com"} if kind == "issuer" else None)
    try:
        storage = MemoryStorage()
        with pytest.raises(AuthorizationFailed) as caught:
            await begin_authorization(pair.mcp_url, identity=IDENTITY, storage=storage, policy=POLICY)
        assert ("does not match" if kind == "resource" else "issuer mismatch") in caught.value.message
        assert pair.provider.clients == {} and storage.client_info is None  # nothing registered
    finally:
        pair.stop()


@pytest.mark.parametrize("where", ["http://10.1.2.3/prm", "https://169.254.169.254/latest/meta-data/",
                                   "file:///etc/passwd"])
async def test_discovery_to_a_private_address_or_file_is_refused(pair, where: str) -> None:
    pair.gate.resource_metadata_url = where
    with pytest.raises(AuthorizationFailed) as caught:
        await begin_authorization(pair.mcp_url, identity=IDENTITY, storage=MemoryStorage(), policy=POLICY)
    assert caught.value.code == "outbound_refused"


async def test_preregistered_and_cimd_skip_registration(pair) -> None:
    from mcp.shared.auth import OAuthClientInformationFull
    pair.provider.clients["admin-made"] = OAuthClientInformationFull(
        client_id="admin-made", client_secret="s3cret", redirect_uris=[REDIRECT],
        token_endpoint_auth_method="client_secret_post", scope="mcp:read mcp:deploy offline_access")
    storage = MemoryStorage()
    flow, query = await connect(pair, storage, identity=ClientIdentity(redirect_uri=REDIRECT, client_id="admin-made",
                                                                       client_secret="s3cret", issuer=pair.as_url))
    assert flow.how == "preregistered" and list(pair.provider.clients) == ["admin-made"]
    await complete_authorization(flow, code=query["code"], state=query["state"], iss=query["iss"], error=None,
                                 error_description=None, storage=storage, policy=POLICY)
    assert (await storage.get_tokens()) is not None
    pair.metadata["client_id_metadata_document_supported"] = True
    cimd = "https://app.example/mrtrweb/oauth/client-metadata.json"
    flow = await begin_authorization(pair.mcp_url, identity=ClientIdentity(redirect_uri=REDIRECT,
                                                                           client_metadata_url=cimd),
                                     storage=MemoryStorage(), policy=POLICY)
    assert flow.how == "cimd" and flow.client_info["client_id"] == cimd
    assert dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(flow.authorization_url).query))["client_id"] == cimd
    assert list(pair.provider.clients) == ["admin-made"]


async def test_no_challenge_no_flow_and_static_headers_stay_home() -> None:
    from mrtrweb.demo.server import serve_in_thread
    handle = serve_in_thread()
    try:
        assert await begin_authorization(handle.url, identity=IDENTITY, storage=MemoryStorage(), policy=POLICY) is None
    finally:
        handle.stop()
    auth = static_headers_auth("http://127.0.0.1:5/mcp", {"Authorization": "Bearer t", "X-Api-Key": "k"})
    import httpx2
    home = httpx2.Request("POST", "http://127.0.0.1:5/mcp")
    away = httpx2.Request("GET", "http://127.0.0.1:6/elsewhere")
    assert next(auth.auth_flow(home)).headers["x-api-key"] == "k"
    assert "authorization" not in next(auth.auth_flow(away)).headers
    for bad in ({"X-Bad": "a\r\nInjected: 1"}, {"Bad Name": "v"}, {"Host": "evil"}):
        with pytest.raises(ValueError):
            static_headers_auth("http://127.0.0.1:5/mcp", bad)
