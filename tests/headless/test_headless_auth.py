"""Authorization without a person (mrtrweb.mcp.auth.follow_authorization_url, mrtrweb.headless.auth)
and the conformance run's setup (mrtrweb.headless.conformance): following an authorization URL to its
redirect against a real HTTP server on loopback, through the outbound guard; the connect bound per
step; the server row a scenario gets."""

from __future__ import annotations

import asyncio
import http.server
import threading
import urllib.parse

import pytest

from mrtrweb.headless import conformance, client as headless, auth as headless_auth
from mrtrweb.mcp import McpCallError
from mrtrweb.mcp.auth import AuthorizationFailed, follow_authorization_url
from mrtrweb.mcp.auth.headless import _is_redirect_uri
from mrtrweb.mcp.outbound import OutboundPolicy

REDIRECT = "http://127.0.0.1/mrtrweb/oauth/callback"
LOOPBACK = OutboundPolicy(allow_http_loopback=True, timeout_s=5)


class _AuthorizationServer(http.server.BaseHTTPRequestHandler):
    """``/approve`` -> 302 to the redirect URI with code/state/iss; ``/login`` -> 302 to /approve (same
    origin); ``/page`` -> 200 (a login page); ``/elsewhere`` -> 302 to another host; ``/twice`` ->
    the redirect with ``code`` twice; ``/loop`` -> 302 to itself."""

    seen: list[str] = []

    def do_GET(self):  # noqa: N802 -- http.server's name
        type(self).seen.append(self.path)
        path = urllib.parse.urlsplit(self.path).path
        target = {"/approve": REDIRECT + "?code=c0de&state=st4te&iss=http%3A%2F%2Fas.example",
                  "/login": "/approve", "/elsewhere": "http://127.0.0.2:9/approve",
                  "/twice": REDIRECT + "?code=a&code=b&state=s", "/loop": "/loop",
                  "/fragment": REDIRECT + "#code=c0de"}.get(path)
        if target is None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<form>sign in</form>")
            return
        self.send_response(302)
        self.send_header("Location", target)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def authorization_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthorizationServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _follow(url: str, policy: OutboundPolicy = LOOPBACK) -> dict[str, str]:
    return asyncio.run(follow_authorization_url(url, redirect_uri=REDIRECT, policy=policy))


def test_the_redirect_to_the_redirect_uri_is_read_not_followed(authorization_server):
    _AuthorizationServer.seen.clear()
    assert _follow(authorization_server + "/login?client_id=x") == \
        {"code": "c0de", "state": "st4te", "iss": "http://as.example"}
    assert _AuthorizationServer.seen == ["/login?client_id=x", "/approve"]  # 127.0.0.1:80 never asked


@pytest.mark.parametrize("path, code", [
    ("/page", "authorization_needs_person"),
    ("/elsewhere", "authorization_failed"),
    ("/twice", "authorization_failed"),
    ("/loop", "authorization_failed"),
    ("/fragment", "authorization_failed"),
])
def test_what_cannot_be_followed_is_refused_by_name(authorization_server, path, code):
    _AuthorizationServer.seen.clear()
    with pytest.raises(AuthorizationFailed) as info:
        _follow(authorization_server + path)
    assert info.value.code == code
    assert "c0de" not in info.value.message and "st4te" not in info.value.message
    assert not any(p.startswith("/approve") for p in _AuthorizationServer.seen)  # the other host: never asked


def test_the_outbound_guard_applies_to_the_authorization_url(authorization_server):
    with pytest.raises(AuthorizationFailed) as info:
        _follow(authorization_server + "/approve", OutboundPolicy(allow_http_loopback=False))
    assert info.value.code == "outbound_refused"
    with pytest.raises(AuthorizationFailed) as info:
        _follow("file:///etc/passwd")
    assert info.value.code == "outbound_refused"


def test_the_redirect_uri_matches_exactly():
    assert _is_redirect_uri(REDIRECT + "?code=1", REDIRECT)
    for other in ("http://127.0.0.1/mrtrweb/oauth/callback/", "http://127.0.0.1:8080/mrtrweb/oauth/callback",
                  "https://127.0.0.1/mrtrweb/oauth/callback", "http://127.0.0.1/mrtrweb/oauth/callbackx?code=1",
                  "http://localhost/mrtrweb/oauth/callback"):
        assert not _is_redirect_uri(other, REDIRECT), other


def test_a_step_is_retried_after_connecting_at_most_twice(monkeypatch):
    connects: list[int] = []

    async def connect(**kw):
        connects.append(1)

    class Pool:
        async def close(self, *a):
            pass

    monkeypatch.setattr(headless_auth, "connect", connect)
    monkeypatch.setattr(headless_auth.connections, "pool", lambda: Pool())
    server = type("S", (), {"pk": 1, "allowed_deprecated": lambda self: frozenset()})()  # connections.server_key
    monkeypatch.setattr(headless, "server_for", lambda url, tenant: server)
    user = type("U", (), {"pk": 7})()

    async def always_401():
        raise McpCallError("authorization_required", "401")

    with pytest.raises(McpCallError):
        asyncio.run(headless_auth.with_authorization(always_401, user=user, tenant=None, url="http://x/mcp"))
    assert len(connects) == headless_auth.MAX_CONNECTS == 2

    connects.clear()
    outcomes = iter([headless.HeadlessOutcome("failed", None, 0, "op1", "insufficient_scope"),
                     headless.HeadlessOutcome("completed", {"content": []}, 0, "op2", "")])

    async def step_up():
        return next(outcomes)

    done = asyncio.run(headless_auth.with_authorization(step_up, user=user, tenant=None, url="http://x/mcp"))
    assert (done.status, done.operation_id, len(connects)) == ("completed", "op2", 1)

    connects.clear()

    async def other_failure():
        raise McpCallError("transport_error", "down")

    with pytest.raises(McpCallError):
        asyncio.run(headless_auth.with_authorization(other_failure, user=user, tenant=None, url="http://x/mcp"))
    assert connects == []  # only the two authorization codes connect


@pytest.mark.parametrize("scenario, context, expected", [
    ("tools_call", {}, ("none", "", None, "")),
    ("auth/metadata-default", {}, ("oauth_user", "", None, "")),
    ("auth/pre-registration", {"client_id": "pre", "client_secret": "s3", "issuer": "http://localhost:1"},
     ("oauth_user", "pre", {"client_secret": "s3"}, "http://localhost:1")),
    ("auth/client-credentials-basic", {"client_id": "cc", "client_secret": "s3"},
     ("oauth_client", "cc", {"client_secret": "s3"}, "")),
    ("auth/client-credentials-jwt", {"client_id": "cc", "private_key_pem": "PEM", "signing_algorithm": "ES256"},
     ("oauth_client", "cc", {"private_key_pem": "PEM", "signing_algorithm": "ES256"}, "")),
])
def test_a_scenario_is_configured_as_an_admin_would(scenario, context, expected):
    assert conformance._auth_config(scenario, context) == expected


def test_the_context_must_be_an_object(monkeypatch):
    monkeypatch.setenv("MCP_CONFORMANCE_CONTEXT", '["x"]')
    with pytest.raises(headless.HeadlessError) as info:
        conformance.scenario_context()
    assert info.value.code == "bad_context"
    monkeypatch.delenv("MCP_CONFORMANCE_CONTEXT")
    assert conformance.scenario_context() == {}


@pytest.mark.django_db
def test_each_scenario_gets_a_fresh_server_row():
    from mrtrweb.authz import crypto
    from mrtrweb.models import McpServer, Tenant

    tenant = Tenant.objects.create(slug="conf", name="conf")
    url = "http://localhost:4242/mcp"
    first = conformance.prepare_server(url, tenant, "auth/client-credentials-basic",
                                       {"client_id": "cc", "client_secret": "s3cr3t"})
    assert first.auth_mode == "oauth_client" and first.oauth_client_id == "cc"
    assert "s3cr3t" not in first.auth_secret_sealed and crypto.unseal(first.auth_secret_sealed) == \
        {"client_secret": "s3cr3t"}
    assert first.auth_secret_digest.startswith("hmac-sha256:")
    second = conformance.prepare_server(url, tenant, "auth/metadata-default", {})
    assert second.pk != first.pk and list(McpServer.objects.filter(tenant=tenant, url=url)) == [second]
    assert (second.auth_mode, second.oauth_client_id, second.auth_secret_sealed) == ("oauth_user", "", "")


@pytest.mark.parametrize("secret, listed, method", [
    ("s", None, "client_secret_basic"),  # RFC 8414: absent means client_secret_basic
    ("s", ["client_secret_basic"], "client_secret_basic"),
    ("s", ["client_secret_post"], "client_secret_post"),
    ("s", ["client_secret_post", "client_secret_basic"], "client_secret_post"),  # the server's order
    ("s", ["client_secret_basic", "client_secret_post"], "client_secret_basic"),
    ("s", ["private_key_jwt"], "client_secret_basic"),
    (None, ["client_secret_post"], "none"),
])
def test_a_preregistered_client_authenticates_as_the_server_supports(secret, listed, method):
    from mcp.shared.auth import OAuthClientInformationFull

    from mrtrweb.mcp.auth.flow import preregistered_auth_method

    info = OAuthClientInformationFull(client_id="pre", client_secret=secret, redirect_uris=None,
                                      token_endpoint_auth_method="client_secret_post" if secret else "none")
    metadata = {} if listed is None else {"token_endpoint_auth_methods_supported": listed}
    assert preregistered_auth_method(info, metadata).token_endpoint_auth_method == method
    assert preregistered_auth_method(info, None).token_endpoint_auth_method == ("client_secret_basic" if secret
                                                                                  else "none")
