"""A real OAuth authorization server and a token-verifying MCP server on loopback, for the auth tests.

* :class:`Provider` -- the ``mcp`` SDK's server-side ``OAuthAuthorizationServerProvider`` in memory:
  DCR, authorization codes (approved at once, as the conformance suite's server does), tokens with a
  chosen lifetime, rotating refresh tokens, RFC 7009 revocation. Knobs: ``access_ttl_s``,
  ``iss_in_redirect`` (what ``iss`` the redirect carries: the issuer, another value, or none).
* :func:`serve_oauth_pair` -- the authorization server (the SDK's ``create_auth_routes``, with its
  metadata overridable) and the demo MCP server behind :class:`BearerGate` (RFC 6750: ``401`` with
  ``WWW-Authenticate: Bearer resource_metadata=...``; ``403 insufficient_scope`` for tools that need
  a scope the token lacks; protected resource metadata served at the path-based well-known URL).

Every part is a real HTTP server (uvicorn on 127.0.0.1, its own thread); nothing is mocked.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from typing import Any

from mcp.server.auth.provider import (AccessToken, AuthorizationCode, AuthorizationParams, RefreshToken,
                                      construct_redirect_uri)
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from mrtrweb.demo.server import build_demo_app, serve_asgi_in_thread


class Provider:
    """See module doc. ``subject`` names the person the next authorization is for."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.access_ttl_s = 3600
        self.subject = "alice"
        self.issuer = ""
        self.iss_in_redirect: str | None = "issuer"  # "issuer": the real one; None: omitted; else that text
        self.token_requests = 0
        self.refresh_requests = 0
        self.revoked: list[str] = []
        self.authorize_params: list[AuthorizationParams] = []

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        self.authorize_params.append(params)
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client.client_id or "",
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
            subject=self.subject)
        iss = self.issuer if self.iss_in_redirect == "issuer" else self.iss_in_redirect
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=iss)

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    def _mint(self, client_id: str, scopes: list[str], resource: str | None, subject: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + self.access_ttl_s, resource=resource,
                                          subject=subject)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource,
                                             subject=subject)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.access_ttl_s,
                          scope=" ".join(scopes) or None, refresh_token=refresh)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull, code: AuthorizationCode) -> OAuthToken:
        self.token_requests += 1
        self.codes.pop(code.code, None)
        return self._mint(code.client_id, code.scopes, code.resource, code.subject)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        self.refresh_requests += 1
        self.refresh.pop(refresh_token.token, None)  # rotating: a refresh token is spent once
        return self._mint(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource,
                          refresh_token.subject)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.revoked.append(token.token)
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


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
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


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
    provider = Provider()
    metadata_box: dict[str, Any] = {}

    async def metadata(_request: Any) -> JSONResponse:
        return JSONResponse(metadata_box)

    placeholder = AnyHttpUrl("http://127.0.0.1:1")
    as_app = Starlette(routes=[Route("/.well-known/oauth-authorization-server", metadata)]
                       + create_auth_routes(provider, placeholder,
                                            client_registration_options=ClientRegistrationOptions(
                                                enabled=True, valid_scopes=scopes, default_scopes=scopes),
                                            revocation_options=RevocationOptions(enabled=True)))
    as_handle = serve_asgi_in_thread(as_app, path="")
    as_url = f"http://127.0.0.1:{as_handle.port}"
    provider.issuer = as_url
    built = build_metadata(AnyHttpUrl(as_url), None, ClientRegistrationOptions(enabled=True, valid_scopes=scopes),
                           RevocationOptions(enabled=True))
    metadata_box.update(built.model_dump(mode="json", exclude_none=True))
    metadata_box["issuer"] = as_url  # exactly, without a trailing slash
    metadata_box.update(metadata_overrides or {})
    gate = BearerGate(build_demo_app(), provider, scoped_tools)
    mcp_handle = serve_asgi_in_thread(gate)
    gate.resource_metadata_url = f"http://127.0.0.1:{mcp_handle.port}/.well-known/oauth-protected-resource/mcp"
    gate.prm = {"resource": prm_resource or mcp_handle.url, "authorization_servers": [as_url],
                **({"scopes_supported": scopes} if scopes else {})}
    return OAuthPair(provider, gate, as_url, mcp_handle.url, metadata_box, (as_handle, mcp_handle))
