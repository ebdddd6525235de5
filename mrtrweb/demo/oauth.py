"""The demo's own OAuth 2.1 authorization server, in memory, on loopback (development only).

Built on the ``mcp`` SDK's server auth (``mcp.server.auth``): :class:`DemoProvider` is its
``OAuthAuthorizationServerProvider`` -- Dynamic Client Registration (RFC 7591), authorization
codes with PKCE S256 (checked by the SDK's token endpoint), RFC 8707 ``resource`` carried into the
tokens, access tokens with a chosen lifetime, rotating refresh tokens, RFC 7009 revocation (for
public clients too: :func:`_revocation_endpoint`) -- and
:func:`build_auth_app` serves it with the SDK's ``create_auth_routes`` plus a sign-in and consent
page (:mod:`mrtrweb.demo.consent`): ``GET /authorize`` (the SDK's handler) sends the browser to
``/consent?request=ID``, where a person picks a demo account (:data:`DEMO_ACCOUNTS`, no password:
a demo) and presses Approve or Deny; the answer goes back to the client's redirect URI with
``code``/``error``, ``state`` and the RFC 9207 ``iss``.

``auto_approve=True`` skips the page (codes at once, for :attr:`DemoProvider.subject`), as the
conformance suite's authorization server does; the tests that need no person use it.

Everything lives in one process's memory: a restart forgets clients and tokens (the demo command
deletes the product's stored registrations and connections for its protected server at start).
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from typing import Any

from mcp.server.auth.provider import (AccessToken, AuthorizationCode, AuthorizationParams, RefreshToken,
                                      construct_redirect_uri)
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.routes import REVOCATION_PATH, build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .server import DemoServerHandle, serve_built_in_thread

#: the demo authorization server's accounts (the names of the demo's users; no passwords)
DEMO_ACCOUNTS = ("alice", "carol", "bob")
#: the scope the protected demo server requires, and what the demo AS supports
DEMO_SCOPE = "mcp:demo"
DEMO_SCOPES = [DEMO_SCOPE, "offline_access"]
#: seconds a consent request and an authorization code stay usable
CONSENT_TTL_S = 300.0


@dataclasses.dataclass
class ConsentRequest:
    """An authorization request waiting at the consent page: the client, the validated
    parameters, its CSRF token (also in a cookie) and when it expires (``time.time()`` seconds)."""

    client: OAuthClientInformationFull
    params: AuthorizationParams
    csrf: str
    expires_at: float


class DemoProvider:
    """See the module docstring. Knobs: ``auto_approve``, ``subject`` (the account an automatic
    approval is for), ``access_ttl_s`` (seconds), ``iss_in_redirect`` (``"issuer"``: the real
    issuer; ``None``: omitted; else that text, for tests of a wrong ``iss``).

    Counters for tests: ``token_requests`` (code exchanges), ``refresh_requests``, ``revoked``
    (revoked token values), ``authorize_params`` (every authorization request's parameters).
    """

    def __init__(self, *, auto_approve: bool = False, accounts: tuple[str, ...] = DEMO_ACCOUNTS) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.consents: dict[str, ConsentRequest] = {}
        self.accounts = tuple(accounts)
        self.auto_approve = auto_approve
        self.access_ttl_s = 3600
        self.subject = self.accounts[0]
        self.issuer = ""
        self.iss_in_redirect: str | None = "issuer"
        self.token_requests = 0
        self.refresh_requests = 0
        self.revoked: list[str] = []
        self.authorize_params: list[AuthorizationParams] = []
        self._lock = threading.Lock()  # the AS and the resource server run on different threads

    # -- clients (RFC 7591) -------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        if not client_info.client_id:
            raise ValueError("a registered client needs a client_id")
        self.clients[client_info.client_id] = client_info

    # -- authorization ------------------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        """The URL the SDK's authorization endpoint redirects to: the client's redirect URI with a
        code (``auto_approve``), else this server's consent page for a new :class:`ConsentRequest`."""
        self.authorize_params.append(params)
        if self.auto_approve:
            return self.approve_redirect(client, params, self.subject)
        request_id = secrets.token_urlsafe(24)
        with self._lock:
            now = time.time()
            for key in [k for k, c in self.consents.items() if c.expires_at <= now]:
                del self.consents[key]
            self.consents[request_id] = ConsentRequest(client, params, secrets.token_urlsafe(24), now + CONSENT_TTL_S)
        return f"{self.issuer}/consent?request={request_id}"

    def take_consent(self, request_id: str) -> ConsentRequest | None:
        """Spend the consent request ``request_id`` (single use); None when unknown or expired."""
        with self._lock:
            found = self.consents.pop(request_id, None)
        return found if found is not None and found.expires_at > time.time() else None

    def peek_consent(self, request_id: str) -> ConsentRequest | None:
        with self._lock:
            found = self.consents.get(request_id)
        return found if found is not None and found.expires_at > time.time() else None

    def _iss(self) -> str | None:
        return self.issuer if self.iss_in_redirect == "issuer" else self.iss_in_redirect

    def approve_redirect(self, client: OAuthClientInformationFull, params: AuthorizationParams, subject: str) -> str:
        """Issue a code for ``subject`` (single use, :data:`CONSENT_TTL_S`) and return the redirect."""
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + CONSENT_TTL_S,
            client_id=client.client_id or "", code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
            subject=subject)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=self._iss())

    def deny_redirect(self, params: AuthorizationParams) -> str:
        """The redirect of a refusal (RFC 6749 section 4.1.2.1 ``access_denied``)."""
        return construct_redirect_uri(str(params.redirect_uri), error="access_denied",
                                      error_description="The person denied the request.", state=params.state,
                                      iss=self._iss())

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    # -- tokens -------------------------------------------------------------------------------

    def _mint(self, client_id: str, scopes: list[str], resource: str | None, subject: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        with self._lock:
            self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                              expires_at=int(time.time()) + self.access_ttl_s, resource=resource,
                                              subject=subject)
            self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes,
                                                 resource=resource, subject=subject)
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
        with self._lock:
            self.refresh.pop(refresh_token.token, None)  # rotating: a refresh token is spent once
        return self._mint(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource,
                          refresh_token.subject)

    async def load_access_token(self, token: str) -> AccessToken | None:
        with self._lock:
            found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        with self._lock:
            self.revoked.append(token.token)
            self.access.pop(token.token, None)
            self.refresh.pop(token.token, None)


def _revocation_endpoint(provider: DemoProvider) -> Any:
    """RFC 7009 revocation for every registered client, public ones (``token_endpoint_auth_method``
    ``none``) included. It stands in front of the SDK's ``/revoke``, whose request model requires a
    ``client_secret`` field, so a public client's revocation got ``400 invalid_request``
    (modelcontextprotocol/python-sdk issue #3508; drop this route once the SDK's is fixed). The
    client is authenticated by the SDK's ``ClientAuthenticator`` (``401 unauthorized_client``); a
    token of another client, or an unknown one, is left alone and answered ``200`` (section 2.2)."""
    authenticator = ClientAuthenticator(provider)

    async def revoke(request: Request) -> Response:
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            return JSONResponse({"error": "unauthorized_client", "error_description": exc.message}, status_code=401)
        form = await request.form()
        value = form.get("token")
        if not isinstance(value, str) or not value:
            return JSONResponse({"error": "invalid_request", "error_description": "token is required"}, status_code=400)
        token = await provider.load_access_token(value) or await provider.load_refresh_token(client, value)
        if token is not None and token.client_id == client.client_id:
            await provider.revoke_token(token)
        return Response(status_code=200, headers={"Cache-Control": "no-store"})

    return revoke


def build_auth_app(provider: DemoProvider, issuer: str, *, scopes: list[str] | None = None,
                   metadata_overrides: dict[str, Any] | None = None) -> tuple[Starlette, dict[str, Any]]:
    """The authorization server's ASGI app for ``issuer`` (``http://127.0.0.1:PORT``, no trailing
    slash) and its RFC 8414 metadata (a dict the app serves as it is, so a test may change it).

    ``scopes``: ``scopes_supported`` and the valid DCR scopes (None: any); ``metadata_overrides``:
    keys replaced in the metadata (``issuer``, ``authorization_response_iss_parameter_supported``...).
    """
    from .consent import consent_routes

    provider.issuer = issuer
    registration = ClientRegistrationOptions(enabled=True, valid_scopes=scopes, default_scopes=scopes)
    revocation = RevocationOptions(enabled=True)
    metadata = build_metadata(AnyHttpUrl(issuer), None, registration, revocation).model_dump(mode="json", exclude_none=True)
    metadata["issuer"] = issuer  # exactly, without a trailing slash (RFC 8414 section 3.3)
    metadata.update(metadata_overrides or {})

    async def serve_metadata(_request: Any) -> JSONResponse:
        return JSONResponse(metadata)

    routes = [Route("/.well-known/oauth-authorization-server", serve_metadata), *consent_routes(provider),
              Route(REVOCATION_PATH, _revocation_endpoint(provider), methods=["POST"]),
              *create_auth_routes(provider, AnyHttpUrl(issuer), client_registration_options=registration,
                                  revocation_options=revocation)]
    return Starlette(routes=routes), metadata


@dataclasses.dataclass
class DemoAuthServer:
    """A running demo authorization server: ``provider``, ``url`` (= the issuer), ``metadata``
    (served live), ``handle`` (its :class:`~mrtrweb.demo.server.DemoServerHandle`)."""

    provider: DemoProvider
    url: str
    metadata: dict[str, Any]
    handle: DemoServerHandle

    def stop(self) -> None:
        self.handle.stop()


def serve_auth_server(*, host: str = "127.0.0.1", port: int = 0, auto_approve: bool = False,
                      scopes: list[str] | None = None, metadata_overrides: dict[str, Any] | None = None,
                      provider: DemoProvider | None = None) -> DemoAuthServer:
    """Start the demo authorization server in a daemon thread (see :func:`build_auth_app`).

    Raises:
        RuntimeError: it did not start in time. OSError: the address could not be bound.
    """
    provider = provider or DemoProvider(auto_approve=auto_approve)
    built: dict[str, Any] = {}

    def make_app(bound: int) -> Any:
        netloc = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        app, built["metadata"] = build_auth_app(provider, f"http://{netloc}", scopes=scopes,
                                                metadata_overrides=metadata_overrides)
        return app

    handle = serve_built_in_thread(make_app, host, port, path="")
    return DemoAuthServer(provider, provider.issuer, built["metadata"], handle)
