"""Attacks on the authorization to MCP servers (issue 13), third pass: each test the regression
test of a fault found, or of an attack that held and should keep holding. Real parts: Django's
test client through the whole middleware stack, the database, real authorization servers and
MCP servers on loopback (:mod:`tests.oauth_sdk_as`) where a flow runs.
"""

from __future__ import annotations

import urllib.parse

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings as hsettings
from hypothesis import strategies as st

from mrtrweb.models import McpServer

pytestmark = [pytest.mark.django_db(transaction=True)]


def _signed_in(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    client.get("/mcp/")
    return client


def _oauth(server) -> McpServer:
    server.auth_mode = McpServer.AuthMode.OAUTH_USER
    server.save()
    return server


# -- 1. never a 500: the views and forms fuzzed ---------------------------------------------------

@pytest.mark.parametrize("rerun", ["x" * 5000, "not-a-uuid", "\x00", "1", "0" * 32 + "g"])
def test_connect_with_a_rerun_value_that_is_no_uuid_is_not_a_500(seeded, rerun) -> None:
    """POST ``oauth/connect/<id>/`` with ``rerun`` not a UUID: ``access.operation_for`` let
    Django's ``ValidationError`` (UUIDField) out, a 500; a bad value must be ignored."""
    server = _oauth(seeded["servers"]["acme"])
    client = _signed_in(seeded["users"]["alice"])
    response = client.post(f"/mcp/oauth/connect/{server.pk}/", {"rerun": rerun, "return_to": "/mcp/"})
    assert response.status_code < 500


_query_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_raw = st.one_of(_query_text.map(lambda t: urllib.parse.quote(t, safe="")),
                 st.binary(max_size=20).map(lambda b: "".join(f"%{x:02X}" for x in b)),
                 st.sampled_from(["%", "%zz", "%ff", "%ed%a0%80", "%00", "%C0%AF", "a" * 5000]))
_key = st.sampled_from(["state", "code", "iss", "error", "error_description", "rerun", "return_to", "%ff", "state[]"])


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(_key, _raw), max_size=6))
def test_the_authorization_views_never_answer_500_to_any_query_or_form(seeded, pairs) -> None:
    """Raw query strings and form bodies (non-UTF-8 percent-encodings, NUL, repeated keys,
    overlong values) to the callback, Connect, Continue, Connections, Disconnect and the CIMD
    document: a page or a refusal, never a 500."""
    server = _oauth(seeded["servers"]["acme"])
    other = seeded["servers"]["globex"]
    client = _signed_in(seeded["users"]["alice"])
    raw = "&".join(f"{k}={v}" for k, v in pairs)
    form = "application/x-www-form-urlencoded"
    answers = [
        client.get("/mcp/oauth/callback/?" + raw),
        client.get(f"/mcp/oauth/go/{server.pk}/?" + raw),
        client.get("/mcp/connections/?" + raw),
        client.get("/mcp/oauth/client-metadata.json?" + raw),
        client.post(f"/mcp/oauth/connect/{server.pk}/", raw, content_type=form),
        client.post(f"/mcp/oauth/connect/{other.pk}/", raw, content_type=form),
        client.post(f"/mcp/connections/{server.pk}/disconnect/", raw, content_type=form),
    ]
    assert [r.status_code for r in answers if r.status_code >= 500] == []


# -- 2. mix-up (RFC 9207; OAuth security BCP, section 4.4) -----------------------------------------

REDIRECT = "http://127.0.0.1:9/mcp/oauth/callback/"


class _ProxyProvider:
    """An attacker authorization server's provider: its DCR forwards each registration to the
    honest server's provider too (so the honest server knows the client id), and its token
    endpoint records every code it receives (``received``)."""

    def __new__(cls, honest):
        from tests.oauth_sdk_as import Provider

        class Proxy(Provider):
            received: list[str] = []

            async def register_client(self, client_info):
                await super().register_client(client_info)
                await honest.register_client(client_info)

            async def load_authorization_code(self, client, code):
                self.received.append(code)
                return await super().load_authorization_code(client, code)

        proxy = Proxy(auto_approve=True)
        proxy.received = []
        return proxy


@pytest.fixture
def mixup(seeded, settings):
    """Tenant acme: the honest server (the SDK-based pair: authorization server H in front of a
    token-verifying MCP server) and an attacker's server M whose protected resource metadata names
    the attacker's authorization server A, whose metadata copies H's ``authorization_endpoint``
    but keeps its own ``token_endpoint``."""
    from mrtrweb.demo.oauth import serve_auth_server
    from mrtrweb.demo.server import build_demo_app, serve_asgi_in_thread
    from tests.oauth_sdk_as import BearerGate, serve_oauth_pair

    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    honest = serve_oauth_pair()
    proxy = _ProxyProvider(honest.provider)
    attacker = serve_auth_server(provider=proxy, metadata_overrides={
        "authorization_endpoint": honest.metadata["authorization_endpoint"]})
    gate = BearerGate(build_demo_app(), proxy)
    handle = serve_asgi_in_thread(gate)
    gate.resource_metadata_url = f"http://127.0.0.1:{handle.port}/.well-known/oauth-protected-resource/mcp"
    gate.prm = {"resource": handle.url, "authorization_servers": [attacker.url]}
    good = seeded["servers"]["acme"]
    good.url, good.auth_mode = honest.mcp_url, "oauth_user"
    good.save()
    evil = McpServer.objects.create(tenant=good.tenant, name="Evil", url=handle.url, auth_mode="oauth_user")
    yield {**seeded, "honest": honest, "proxy": proxy, "attacker": attacker, "good": good, "evil": evil}
    for h in (handle, attacker, honest):
        h.stop()


async def _start_and_follow(o, server, session="sess-1"):
    from mrtrweb.authz import service
    from mrtrweb.mcp.auth import follow_authorization_url

    start = await service.start_connect(user=o["users"]["alice"], tenant=server.tenant_id, server=server,
                                        session_key=session, return_to="/mcp/", redirect_uri=REDIRECT)
    query = await follow_authorization_url(start.authorization_url, redirect_uri=REDIRECT,
                                           policy=service.outbound_policy())
    return start, query


@pytest.mark.parametrize("advertised", [False, True])
async def test_a_code_of_the_honest_server_with_its_iss_never_reaches_the_attackers_token_endpoint(mixup, advertised):
    """The person connects to M; the browser is sent to H's authorization endpoint (the
    interstitial names both origins); H answers with a code and ``iss`` = H. The flow is A's:
    the callback is refused (``iss`` mismatch) and nothing goes to A's token endpoint. When A does
    not advertise ``iss``, the flow is refused before the browser is sent (the mix-up check)."""
    from mrtrweb.authz import service
    from mrtrweb.authz.models import OAuthConnection

    o = mixup
    o["attacker"].metadata["authorization_response_iss_parameter_supported"] = advertised
    if not advertised:
        # no iss advertised and a sign-in page on another origin: refused before the browser goes
        with pytest.raises(service.ConnectRefused):
            await _start_and_follow(o, o["evil"])
        assert o["proxy"].received == [] and o["honest"].provider.token_requests == 0
        return
    start, query = await _start_and_follow(o, o["evil"])
    assert start.authorization_origin != start.issuer.rstrip("/")  # the interstitial shows both
    assert query.get("iss") == o["honest"].as_url and query.get("code")
    with pytest.raises(service.ConnectRefused) as refused:
        await service.finish_connect(user=o["users"]["alice"], session_key="sess-1", query=query)
    assert refused.value.code == "authorization_failed"
    assert o["proxy"].received == [] and o["honest"].provider.token_requests == 0
    assert not await OAuthConnection.objects.filter(server=o["evil"]).aexists()


async def test_a_missing_iss_is_refused_when_the_flows_server_advertised_it(mixup):
    from mrtrweb.authz import service

    o = mixup
    o["attacker"].metadata["authorization_response_iss_parameter_supported"] = True
    o["honest"].provider.iss_in_redirect = None
    _start, query = await _start_and_follow(o, o["evil"])
    assert "iss" not in query
    with pytest.raises(service.ConnectRefused):
        await service.finish_connect(user=o["users"]["alice"], session_key="sess-1", query=query)
    assert o["proxy"].received == []


async def test_a_code_of_the_honest_server_without_iss_never_reaches_the_attackers_token_endpoint(mixup):
    """The same mix-up where neither server speaks RFC 9207 (H sends no ``iss``, A does not
    advertise it): one redirect URI for every authorization server, so the callback cannot tell
    which server issued the code, and H's code with the PKCE verifier went to A's token endpoint
    (A can redeem it at H: a public client). The security BCP (section 4.4.2) requires, without
    ``iss``, another defense (distinct redirect URIs per issuer, or refusing such a flow)."""
    from mrtrweb.authz import service

    from mrtrweb.authz.models import OAuthConnection, PendingAuthorization

    o = mixup
    o["honest"].provider.iss_in_redirect = None
    # Refused before the browser is sent anywhere: A names a sign-in page on another origin than
    # its issuer and does not advertise iss (mrtrweb.mcp.auth.provider.check_mix_up).
    with pytest.raises(service.ConnectRefused) as refused:
        await _start_and_follow(o, o["evil"])
    assert refused.value.code == "authorization_failed" and "iss" in refused.value.message
    assert not o["proxy"].received, "a request reached the attacker's token endpoint"
    assert not await PendingAuthorization.objects.aexists() and not await OAuthConnection.objects.aexists()


# -- 3. token confinement ------------------------------------------------------------------------

@pytest.fixture
def shared_as(seeded, settings):
    """One authorization server in front of two token-verifying MCP servers (S1: the acme demo
    server re-pointed, S2: a second acme server), and globex's server at S1's very URL."""
    from mrtrweb.demo.server import build_demo_app, serve_asgi_in_thread
    from tests.oauth_sdk_as import BearerGate, serve_oauth_pair

    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    pair = serve_oauth_pair()
    gate2 = BearerGate(build_demo_app(), pair.provider)
    handle2 = serve_asgi_in_thread(gate2)
    gate2.resource_metadata_url = f"http://127.0.0.1:{handle2.port}/.well-known/oauth-protected-resource/mcp"
    gate2.prm = {"resource": handle2.url, "authorization_servers": [pair.as_url]}
    s1 = seeded["servers"]["acme"]
    s1.url, s1.auth_mode = pair.mcp_url, "oauth_user"
    s1.save()
    s2 = McpServer.objects.create(tenant=s1.tenant, name="Second", url=handle2.url, auth_mode="oauth_user")
    foreign = seeded["servers"]["globex"]
    foreign.url, foreign.auth_mode = pair.mcp_url, "oauth_user"
    foreign.save()
    yield {**seeded, "pair": pair, "gate2": gate2, "s1": s1, "s2": s2, "foreign": foreign}
    handle2.stop()
    pair.stop()


async def _connected(o, server):
    from mrtrweb.authz import service

    _start, query = await _start_and_follow(o, server)
    await service.finish_connect(user=o["users"]["alice"], session_key="sess-1", query=query)
    return {t.token: t for t in o["pair"].provider.access.values()}


async def _ping(user, server):
    from mrtrweb import operations
    from mrtrweb.mcp.errors import McpCallError

    try:
        conn = await operations.connection_for(user, server)
        await conn.send("tools/list", {}, "attack3-probe")
    except McpCallError as exc:
        return exc.code
    return "ok"


async def test_a_token_for_one_server_never_goes_to_another_server_of_the_same_authorization_server(shared_as):
    """Alice connected to S1 only: her token is issued for S1 (``resource``, RFC 8707) and S2,
    behind the same authorization server in the same tenant, gets no token from her."""
    o = shared_as
    minted = await _connected(o, o["s1"])
    assert [t.resource for t in minted.values()] == [o["s1"].url]
    assert await _ping(o["users"]["alice"], o["s1"]) == "ok"
    assert set(o["pair"].gate.seen_tokens) == set(minted)
    assert await _ping(o["users"]["alice"], o["s2"]) == "authorization_required"
    assert o["gate2"].seen_tokens == []


async def test_a_token_never_goes_to_another_tenants_server_at_the_same_url(shared_as):
    """Alice, connected to acme's S1, also joins globex, whose server has S1's very URL: her
    acme token is not sent to it (tokens are per tenant, person and server)."""
    from mrtrweb.models import Membership

    o = shared_as
    await _connected(o, o["s1"])
    alice = o["users"]["alice"]
    await Membership.objects.acreate(tenant_id=o["foreign"].tenant_id, user=alice, role="member")
    o["pair"].gate.seen_tokens.clear()
    assert await _ping(alice, o["foreign"]) == "authorization_required"
    assert o["pair"].gate.seen_tokens == []


async def test_a_pooled_connection_does_not_carry_the_token_to_the_servers_new_url(shared_as):
    """Alice's live pooled connection to S1; an admin re-points S1 at S2's URL (same
    authorization server, so her token would be accepted if S2 ignored the audience): the pool
    replaces the connection and the token issued for S1 is not sent to the new URL."""
    o = shared_as
    alice = o["users"]["alice"]
    await _connected(o, o["s1"])
    assert await _ping(alice, o["s1"]) == "ok"
    s1 = await McpServer.objects.aget(pk=o["s1"].pk)
    s1.url = o["s2"].url
    await s1.asave()
    s1 = await McpServer.objects.select_related("tenant").aget(pk=s1.pk)
    assert await _ping(alice, s1) == "authorization_required"
    assert o["gate2"].seen_tokens == []
