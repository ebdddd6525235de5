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
    the callback is refused (``iss`` mismatch) and nothing goes to A's token endpoint."""
    from mrtrweb.authz import service
    from mrtrweb.authz.models import OAuthConnection

    o = mixup
    o["attacker"].metadata["authorization_response_iss_parameter_supported"] = advertised
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

    o = mixup
    o["honest"].provider.iss_in_redirect = None
    _start, query = await _start_and_follow(o, o["evil"])
    assert "iss" not in query and query.get("code")
    try:
        await service.finish_connect(user=o["users"]["alice"], session_key="sess-1", query=query)
    except service.ConnectRefused:
        pass
    assert query["code"] not in o["proxy"].received, "the honest server's code reached the attacker's token endpoint"
