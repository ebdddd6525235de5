"""A real OAuth authorization server and a token-verifying MCP server on loopback, for the auth tests.

* The authorization server is the demo's own (:mod:`mrtrweb.demo.oauth`: the ``mcp`` SDK's server-side
  ``OAuthAuthorizationServerProvider`` in memory, DCR, PKCE, refresh, RFC 7009 revocation) with
  ``auto_approve=True``: codes at once for ``provider.subject``, as the conformance suite's server
  does (no consent page). Knobs on :class:`~mrtrweb.demo.oauth.DemoProvider`: ``access_ttl_s``,
  ``iss_in_redirect`` (what ``iss`` the redirect carries: the issuer, another value, or none).
* :func:`serve_oauth_pair` -- that authorization server (its metadata overridable) and the demo MCP
  server behind :class:`BearerGate` (RFC 6750: ``401`` with ``WWW-Authenticate: Bearer
  resource_metadata=...``; ``403 insufficient_scope`` for tools that need a scope the token lacks;
  protected resource metadata served at the path-based well-known URL, its ``resource`` choosable).
  The demo command's protected server uses the SDK's resource-server auth instead
  (:mod:`mrtrweb.demo.protected`); this hand-written gate has the knobs the attack tests need.

Every part is a real HTTP server (uvicorn on 127.0.0.1, its own thread); nothing is mocked.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from mrtrweb.demo.oauth import DemoProvider as Provider
from mrtrweb.demo.oauth import serve_auth_server
from mrtrweb.demo.server import build_demo_app, replaying, serve_asgi_in_thread

__all__ = ["BearerGate", "OAuthPair", "Provider", "oauth_fixture", "oauth_pair_fixture", "serve_oauth_pair"]


class BearerGate:
    """ASGI middleware in front of an MCP app: RFC 6750 bearer tokens checked against ``provider``.

    ``scoped_tools``: ``{tool name: scope}`` a ``tools/call`` needs (else ``403 insufficient_scope``).
    ``prm``: the protected resource metadata, served at ``/.well-known/oauth-protected-resource/mcp``
    (set after the port is known). ``seen_tokens``: the bearer tokens presented, in order.
    """

    def __init__(self, app: Any, provider: Provider, scoped_tools: dict[str, str] | None = None) -> None:
        self.app = app
        self.provider = provider
        self.scoped_tools = dict(scoped_tools or {})
        self.prm: dict[str, Any] = {}
        self.resource_metadata_url = ""
        self.seen_tokens: list[str] = []

    async def _send_json(self, send: Any, status: int, body: Any, headers: list[tuple[bytes, bytes]] = ()) -> None:
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), *headers]})
        await send({"type": "http.response.body", "body": data})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"].startswith("/.well-known/oauth-protected-resource"):
            if scope["path"] == "/.well-known/oauth-protected-resource/mcp" and self.prm:
                return await self._send_json(send, 200, self.prm)
            return await self._send_json(send, 404, {"error": "not found"})
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        token = auth[7:] if auth[:7].lower() == "bearer " else ""
        if token:
            self.seen_tokens.append(token)
        found = await self.provider.load_access_token(token) if token else None
        challenge = f'Bearer resource_metadata="{self.resource_metadata_url}"'
        if found is None:
            err = ', error="invalid_token"' if token else ""
            return await self._send_json(send, 401, {"error": "unauthorized"},
                                         [(b"www-authenticate", (challenge + err).encode())])
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            parsed = {}
        if isinstance(parsed, dict) and parsed.get("method") == "tools/call":
            need = self.scoped_tools.get((parsed.get("params") or {}).get("name"))
            if need and need not in found.scopes:
                value = f'{challenge}, error="insufficient_scope", scope="{need}"'
                return await self._send_json(send, 403, {"error": "insufficient_scope"},
                                             [(b"www-authenticate", value.encode())])
        await self.app(scope, replaying(body, receive), send)


@dataclasses.dataclass
class OAuthPair:
    provider: Provider
    gate: BearerGate
    as_url: str
    mcp_url: str
    metadata: dict[str, Any]
    _handles: tuple[Any, Any]

    def stop(self) -> None:
        for handle in self._handles:
            handle.stop()


def serve_oauth_pair(*, scopes: list[str] | None = None, scoped_tools: dict[str, str] | None = None,
                     metadata_overrides: dict[str, Any] | None = None, prm_resource: str | None = None) -> OAuthPair:
    """Start the authorization server and the guarded demo MCP server (see module doc).

    ``scopes``: the authorization server's ``scopes_supported`` (and the valid DCR scopes);
    ``metadata_overrides``: keys replaced in its RFC 8414 metadata (``issuer``, ``authorization_response_iss_parameter_supported``...);
    ``prm_resource``: the ``resource`` the protected resource metadata claims (default: the MCP URL).
    """
    auth = serve_auth_server(auto_approve=True, scopes=scopes, metadata_overrides=metadata_overrides)
    gate = BearerGate(build_demo_app(), auth.provider, scoped_tools)
    mcp_handle = serve_asgi_in_thread(gate)
    gate.resource_metadata_url = f"http://127.0.0.1:{mcp_handle.port}/.well-known/oauth-protected-resource/mcp"
    gate.prm = {"resource": prm_resource or mcp_handle.url, "authorization_servers": [auth.url],
                **({"scopes_supported": scopes} if scopes else {})}
    return OAuthPair(auth.provider, gate, auth.url, mcp_handle.url, auth.metadata, (auth, mcp_handle))


def _acme_behind_the_pair(seeded: dict, settings: Any):
    """The ``seeded`` acme server re-pointed at a fresh :func:`serve_oauth_pair` in mode OAuth per
    user (plain http to loopback allowed for the run); yields ``{**seeded, "pair", "server"}``."""
    settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OUTBOUND_ALLOW_HTTP_LOOPBACK": True}
    pair = serve_oauth_pair(scopes=["mcp:read", "offline_access"])
    server = seeded["servers"]["acme"]
    server.url = pair.mcp_url
    server.auth_mode = "oauth_user"
    server.save()
    yield {**seeded, "pair": pair, "server": server}
    pair.stop()


@pytest.fixture(name="oauth")
def oauth_fixture(seeded, settings):
    """Import into a test module (``from tests.oauth_sdk_as import oauth_fixture``): the fixture
    ``oauth`` -- see :func:`_acme_behind_the_pair`."""
    yield from _acme_behind_the_pair(seeded, settings)


@pytest.fixture(name="oauth_pair")
def oauth_pair_fixture(seeded, settings):
    """The same as ``oauth``, under the name ``oauth_pair``."""
    yield from _acme_behind_the_pair(seeded, settings)
