"""The authorization-code flow split across requests: :func:`begin_authorization` and
:func:`complete_authorization` (MCP authorization 2025-11-25 / 2026-07-28, "Authorization Flow").

The SDK's ``OAuthClientProvider`` does discovery and registration in one ``httpx2.Auth`` flow and
then waits, inside the same coroutine, for the browser's callback. Here a subclass,
:class:`_BeginProvider`, runs that flow on a harmless probe (a JSON-RPC ``ping`` POSTed without
a token through the outbound guard): protected resource metadata (RFC 9728: the
``WWW-Authenticate`` ``resource_metadata``, then the path-based, then the root well-known URL; its
``resource`` must match the server), authorization server metadata (RFC 8414 / OpenID, path-aware,
``issuer`` checked), client identity (pre-registered, else CIMD when advertised, else DCR), scope
selection (``WWW-Authenticate``, else ``scopes_supported``; ``offline_access`` when the
authorization server advertises it), then stops where the SDK would redirect: it builds the
authorization URL exactly as the SDK does (PKCE S256, ``state``, ``resource`` (RFC 8707),
``scope``, ``prompt=consent`` with ``offline_access``) and raises :class:`_Began` carrying the
:class:`PendingFlow`. The callback, on any worker, rebuilds the provider's context from that flow
and lets the SDK build the token request (``_exchange_token_authorization_code``) and read its
response (``_handle_token_response``), sent through the guard.
"""

from __future__ import annotations

import dataclasses
import secrets
import urllib.parse
from typing import Any
from urllib.parse import urlencode, urljoin

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, PKCEParameters
from mcp.client.auth.utils import issuers_match, union_scopes, validate_authorization_response_iss
from mcp.shared.auth import (OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, OAuthToken,
                             ProtectedResourceMetadata)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import ValidationError

from ..errors import origin_of
from ..outbound import OutboundPolicy, OutboundRefused, guarded_client
from .errors import OUTBOUND_REFUSED, AuthorizationFailed, clean_text
from .storage import AuthStorage, MemoryStorage

__all__ = ["ClientIdentity", "PendingFlow", "begin_authorization", "complete_authorization", "PROBE_PROTOCOL_VERSION",
           "preregistered_auth_method"]

#: the ``MCP-Protocol-Version`` the probe sends (decides ``resource`` without PRM, per the SDK)
PROBE_PROTOCOL_VERSION = "2025-11-25"


@dataclasses.dataclass(frozen=True)
class ClientIdentity:
    """How this product identifies itself to authorization servers.

    ``client_metadata_url``: the CIMD URL (used when the authorization server advertises
    ``client_id_metadata_document_supported``); ``client_id``/``client_secret``: pre-registered by an
    admin (used first when set); else DCR with ``client_name`` and ``redirect_uri``. ``scope``: an
    admin's scope for the server, unioned with the discovered one. ``issuer``: the issuer identifier
    of the authorization server that issued ``client_id`` (required with a ``client_secret``): the
    flow goes only to that authorization server (the one the MCP server's metadata names must be
    it, RFC 8414 section 3.3 comparison, the SDK's ``issuers_match``), so the secret is never sent to
    another one.
    """

    redirect_uri: str
    client_name: str = "mrtrweb"
    client_metadata_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    scope: str | None = None
    issuer: str | None = None


@dataclasses.dataclass
class PendingFlow:
    """One started flow, as JSON (``to_json``/``from_json``). Holds the PKCE ``code_verifier``:
    seal it at rest. ``authorization_url`` is where the person's browser goes;
    ``authorization_origin`` is what the page shows them. ``how``: ``preregistered``, ``cimd`` or
    ``dcr``. ``oauth_metadata`` is ``{}`` on the 2025-03-26 fallback (no metadata served: the
    endpoints are ``/authorize``, ``/token``, ``/register`` at the MCP server's origin)."""

    state: str
    code_verifier: str
    authorization_url: str
    authorization_origin: str
    redirect_uri: str
    server_url: str
    issuer: str
    resource: str | None
    scope: str | None
    protocol_version: str | None
    oauth_metadata: dict[str, Any]
    protected_resource_metadata: dict[str, Any] | None
    client_info: dict[str, Any]
    how: str = "dcr"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PendingFlow:
        fields = {f.name: data.get(f.name) for f in dataclasses.fields(cls)}
        if fields["how"] is None:
            fields["how"] = "dcr"
        return cls(**fields)

    def server_metadata(self) -> dict[str, Any]:
        """What :meth:`AuthStorage.set_server_metadata` keeps for refresh and revocation, and
        ``server_url``: the MCP server URL the tokens were issued for (they go nowhere else)."""
        return {"metadata": self.oauth_metadata, "prm": self.protected_resource_metadata,
                "protocol_version": self.protocol_version, "server_url": self.server_url}


class _Began(BaseException):  # not an Exception: the SDK logs and re-raises those ("OAuth flow error")
    def __init__(self, flow: PendingFlow) -> None:
        super().__init__("authorization flow started")
        self.flow = flow


def _client_metadata(identity: ClientIdentity) -> OAuthClientMetadata:
    web = identity.redirect_uri.lower().startswith("https:")
    return OAuthClientMetadata(redirect_uris=[identity.redirect_uri], client_name=identity.client_name,
                               application_type="web" if web else "native",
                               grant_types=["authorization_code", "refresh_token"], response_types=["code"],
                               token_endpoint_auth_method="client_secret_post" if identity.client_secret else "none",
                               scope=identity.scope)


def preregistered_auth_method(info: OAuthClientInformationFull, metadata: OAuthMetadata | dict[str, Any] | None
                              ) -> OAuthClientInformationFull:
    """A pre-registered client (no registration response fixed its method) with the token endpoint
    authentication the authorization server supports (RFC 8414 section 2,
    ``token_endpoint_auth_methods_supported``; absent means ``client_secret_basic``): the first of
    ``client_secret_basic`` / ``client_secret_post`` in the server's list (its order: the SDK's
    authorization server lists post first and enforces each client's registered method), else
    ``client_secret_basic``; ``none`` without a secret. Used for the code exchange, refresh and
    revocation alike."""
    if not info.client_secret:
        method = "none"
    else:
        listed = metadata.get("token_endpoint_auth_methods_supported") if isinstance(metadata, dict) \
            else getattr(metadata, "token_endpoint_auth_methods_supported", None)
        methods = listed if isinstance(listed, list) else []
        method = next((m for m in methods if m in ("client_secret_basic", "client_secret_post")),
                      "client_secret_basic")
    return info if info.token_endpoint_auth_method == method else \
        info.model_copy(update={"token_endpoint_auth_method": method})


def _browser_url_ok(url: str, policy: OutboundPolicy, mcp_origin: str | None = None) -> bool:
    """An authorization endpoint the browser may be sent to: https, or http to loopback when allowed,
    or the MCP server's own configured origin (an admin chose it: the 2025-03-26 server that is its
    own authorization server, on whatever scheme the admin configured)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    if parts.username or parts.password or not parts.hostname:
        return False
    if parts.scheme == "https":
        return True
    try:
        if mcp_origin is not None and origin_of(url) == mcp_origin:
            return True
    except ValueError:
        return False
    host = parts.hostname.lower()
    return parts.scheme == "http" and policy.allow_http_loopback and (
        host == "localhost" or host.startswith("127.") or host == "::1")


def _check_mix_up(auth_endpoint: str, metadata: OAuthMetadata | None) -> None:
    """Refuse a sign-in page on another origin than its issuer when the authorization server does
    not send RFC 9207 ``iss`` (OAuth 2.0 Security BCP, RFC 9700 section 4.4, mix-up attacks).

    One redirect URI serves every authorization server, so without ``iss`` the callback cannot
    tell which server issued a code. An attacker's authorization server could name an honest one's
    authorization endpoint and keep its own token endpoint: the honest server's code and the PKCE
    verifier would go to the attacker. With ``iss`` advertised, the callback's check
    (:func:`complete_authorization`) stops that; without it, the sign-in page must be the issuer's
    own origin. (An attacker whose own sign-in page redirects onward is limited by ``resource``: the
    code was asked for the MCP server that named the attacker.)

    Raises:
        OAuthFlowError: the endpoint's origin is not the issuer's and ``iss`` is not advertised.
    """
    if metadata is None or metadata.authorization_response_iss_parameter_supported:
        return
    try:
        same = origin_of(auth_endpoint) == origin_of(str(metadata.issuer))
    except ValueError:
        same = False
    if not same:
        raise OAuthFlowError("the authorization server's sign-in page is on another origin than its issuer and it "
                             "does not send iss (RFC 9207): the sign-in could be mixed up with another server's")


class _BeginProvider(OAuthClientProvider):
    """The SDK provider up to the redirect (see module doc); never sends or stores tokens."""

    def __init__(self, server_url: str, identity: ClientIdentity, storage: AuthStorage, policy: OutboundPolicy,
                 step_up_scope: str | None, granted_scope: str | None) -> None:
        super().__init__(server_url, _client_metadata(identity), storage, None, None,
                         client_metadata_url=identity.client_metadata_url)
        self._identity = identity
        self._policy = policy
        self._step_up = step_up_scope
        self._granted = granted_scope
        self._preregistered = None
        #: the only authorization server a pre-registered client may be used with (None: any)
        self._pinned = identity.issuer if identity.client_id and identity.issuer else None
        if identity.client_id:
            self._preregistered = OAuthClientInformationFull(
                client_id=identity.client_id, client_secret=identity.client_secret or None,
                redirect_uris=[identity.redirect_uri], grant_types=["authorization_code", "refresh_token"],
                token_endpoint_auth_method="client_secret_post" if identity.client_secret else "none")

    async def _initialize(self) -> None:
        # No tokens: the probe must meet the server's challenge (a step-up too); the client identity as stored.
        self.context.current_tokens = None
        self.context.client_info = self._preregistered or await self.context.storage.get_client_info()
        self._initialized = True

    def _select_authorization_server(self, advertised: list[str]) -> str:
        """The advertised authorization server a pinned (pre-registered) client belongs to; refused
        before any request reaches another one when none of them is it."""
        if self._pinned is None:
            return super()._select_authorization_server(advertised)
        for server in advertised:
            if issuers_match(server, self._pinned):
                return server
        raise OAuthFlowError(f"the MCP server names another authorization server than {self._pinned}, "
                             "the one that issued this client id; nothing was sent to it")

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        ctx = self.context
        if ctx.client_info is None:
            raise OAuthFlowError("no client identity for this authorization server")
        if self._pinned is not None:  # the metadata's issuer too (also on the 2025-03-26 path: the origin)
            found = str(ctx.oauth_metadata.issuer) if ctx.oauth_metadata else self._expected_issuer()
            if not issuers_match(found, self._pinned):
                raise OAuthFlowError(f"the authorization server {found} is not {self._pinned}, the one that "
                                     "issued this client id; the client credentials were not sent to it")
        if self._preregistered is not None:  # its token endpoint authentication, as this server supports
            ctx.client_info = preregistered_auth_method(ctx.client_info, ctx.oauth_metadata)
        if ctx.oauth_metadata is not None and ctx.oauth_metadata.authorization_endpoint:
            auth_endpoint = str(ctx.oauth_metadata.authorization_endpoint)
        elif ctx.protected_resource_metadata is not None:
            # a PRM named an authorization server whose metadata was not found: never fall back to
            # endpoints at the MCP server (the code and tokens would go to another party than named)
            raise OAuthFlowError("no authorization server metadata was found for the named authorization server")
        else:
            # 2025-03-26 fallback (no PRM, no metadata): the endpoints at the MCP server's origin root,
            # as the SDK builds them (that revision's server is its own authorization server).
            auth_endpoint = urljoin(ctx.get_authorization_base_url(ctx.server_url), "/authorize")
        if not _browser_url_ok(auth_endpoint, self._policy, origin_of(ctx.server_url)):
            raise OAuthFlowError("the authorization endpoint is not an https URL")
        _check_mix_up(auth_endpoint, ctx.oauth_metadata)
        ctx.client_metadata.scope = union_scopes(union_scopes(ctx.client_metadata.scope, self._identity.scope),
                                                 union_scopes(self._granted, self._step_up) if self._step_up else None)
        pkce = PKCEParameters.generate()
        state = secrets.token_urlsafe(32)
        params = {
            "response_type": "code",
            "client_id": ctx.client_info.client_id,
            "redirect_uri": self._identity.redirect_uri,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
        }
        resource = ctx.get_resource_url() if ctx.should_include_resource_param(ctx.protocol_version) else None
        if resource is not None:
            params["resource"] = resource  # RFC 8707
        if ctx.client_metadata.scope:
            params["scope"] = ctx.client_metadata.scope
            if "offline_access" in ctx.client_metadata.scope.split():
                params["prompt"] = "consent"  # OIDC: offline_access asks for consent
        sep = "&" if urllib.parse.urlsplit(auth_endpoint).query else "?"
        url = f"{auth_endpoint}{sep}{urlencode(params)}"
        if self._preregistered is not None:
            how = "preregistered"
        elif ctx.client_metadata_url and ctx.client_info.client_id == ctx.client_metadata_url:
            how = "cimd"
        else:
            how = "dcr"
        raise _Began(PendingFlow(
            state=state, code_verifier=pkce.code_verifier, authorization_url=url,
            authorization_origin=origin_of(auth_endpoint), redirect_uri=self._identity.redirect_uri,
            server_url=ctx.server_url, issuer=str(ctx.oauth_metadata.issuer) if ctx.oauth_metadata else
            self._expected_issuer(), resource=resource,
            scope=ctx.client_metadata.scope, protocol_version=ctx.protocol_version,
            oauth_metadata=ctx.oauth_metadata.model_dump(mode="json", exclude_none=True) if ctx.oauth_metadata else {},
            protected_resource_metadata=(ctx.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
                                         if ctx.protected_resource_metadata else None),
            client_info=ctx.client_info.model_dump(mode="json", exclude_none=True), how=how))


def _failed(exc: BaseException) -> AuthorizationFailed:
    if isinstance(exc, OutboundRefused):
        return AuthorizationFailed(f"an authorization request was refused: {exc.reason}", code=OUTBOUND_REFUSED)
    if isinstance(exc, OAuthFlowError):
        return AuthorizationFailed(clean_text(str(exc)))
    if isinstance(exc, httpx2.HTTPError):
        return AuthorizationFailed(f"an authorization request failed ({type(exc).__name__})")
    if isinstance(exc, (ValidationError, ValueError)):
        return AuthorizationFailed("the authorization server sent metadata this client cannot use")
    return AuthorizationFailed(f"the authorization flow failed ({type(exc).__name__})")


async def begin_authorization(server_url: str, *, identity: ClientIdentity, storage: AuthStorage,
                              policy: OutboundPolicy, scope: str | None = None,
                              protocol_version: str = PROBE_PROTOCOL_VERSION) -> PendingFlow | None:
    """Start a flow for ``server_url``; ``None`` when the server did not ask for authorization.

    ``storage``: client info read and written here (a DCR or CIMD registration is kept; tokens are
    neither read nor written). ``scope``: a step-up scope (from ``insufficient_scope``), unioned with
    what was granted (the stored tokens' ``scope``) and the discovered scope. Every request but the
    probe to the server's own origin goes through the outbound guard (``policy``).

    Raises:
        AuthorizationFailed: discovery, registration or metadata checks failed (resource mismatch,
            issuer mismatch, no authorization server metadata, no usable client identity, an
            authorization endpoint that is not https, a pre-registered client's authorization server
            other than ``identity.issuer``, a client secret without ``identity.issuer`` (refused before
            any request)...; ``code`` ``outbound_refused`` for a guard refusal).
    """
    if identity.client_secret and not identity.issuer:
        raise AuthorizationFailed("a pre-registered client secret is only used with the issuer of the authorization "
                                  "server that issued it, and none is configured")
    granted = None
    if scope:
        tokens = await storage.get_tokens()
        granted = tokens.scope if tokens is not None else None
    provider = _BeginProvider(server_url, identity, storage, policy, scope, granted)
    probe = {"jsonrpc": "2.0", "id": f"mrtrweb-auth-probe-{secrets.token_hex(8)}", "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream", MCP_PROTOCOL_VERSION_HEADER: protocol_version}
    try:
        # bound_mcp: the server's own well-known URLs are the attacker's too (size and time bounded)
        async with guarded_client(policy, mcp_origin=origin_of(server_url), bound_mcp=True, auth=provider) as client:
            response = await client.post(server_url, json=probe, headers=headers)
    except _Began as began:
        return began.flow
    except AuthorizationFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure of the flow becomes one stable error
        raise _failed(exc) from None
    if response.status_code in (401, 403):
        raise AuthorizationFailed(f"the server still answers HTTP {response.status_code}")
    return None


async def complete_authorization(flow: PendingFlow, *, code: str | None, state: str | None, iss: str | None,
                                 error: str | None, error_description: str | None, storage: AuthStorage,
                                 policy: OutboundPolicy) -> OAuthToken:
    """Finish ``flow`` with the callback's query values; store (``set_tokens``,
    ``set_server_metadata``) and return the SDK ``OAuthToken``.

    Checks, in order: the authorization server's ``error`` (quoted, cleaned); ``state`` equal to the
    flow's (constant time); RFC 9207 ``iss`` (required when the metadata advertises
    ``authorization_response_iss_parameter_supported``); a ``code``. The token request (PKCE
    verifier, ``redirect_uri``, ``resource``, client authentication) is the SDK's; it goes to the
    metadata's ``token_endpoint`` through the guard. Nothing is stored unless all passed.

    Raises:
        AuthorizationFailed: any check failed or the token request was refused.
    """
    if error:
        text = clean_text(error, 80)
        if error_description:
            text = f"{text}: {clean_text(error_description)}"
        raise AuthorizationFailed(f"the authorization server refused: {text}")
    if not isinstance(state, str) or not secrets.compare_digest(state.encode(), flow.state.encode()):
        raise AuthorizationFailed("the callback's state does not belong to this authorization")
    try:
        metadata = OAuthMetadata.model_validate(flow.oauth_metadata) if flow.oauth_metadata else None
        validate_authorization_response_iss(iss, metadata)
    except OAuthFlowError:
        raise AuthorizationFailed("the callback's issuer (iss) is not the authorization server's") from None
    except ValidationError:
        raise AuthorizationFailed("the stored authorization server metadata is unusable") from None
    if not code or not isinstance(code, str) or len(code) > 4096:
        raise AuthorizationFailed("the callback carries no authorization code")
    scratch = MemoryStorage()
    provider = OAuthClientProvider(flow.server_url, OAuthClientMetadata(redirect_uris=[flow.redirect_uri],
                                                                        scope=flow.scope), scratch)
    ctx = provider.context
    ctx.oauth_metadata = metadata
    ctx.client_info = OAuthClientInformationFull.model_validate(flow.client_info)
    ctx.protected_resource_metadata = (ProtectedResourceMetadata.model_validate(flow.protected_resource_metadata)
                                       if flow.protected_resource_metadata else None)
    ctx.protocol_version = flow.protocol_version
    try:
        request = await provider._exchange_token_authorization_code(code, flow.code_verifier)  # noqa: SLF001
        # the MCP server's own origin passes the address rules, as in discovery (an admin chose it)
        async with guarded_client(policy, mcp_origin=origin_of(flow.server_url), bound_mcp=True) as client:
            response = await client.send(request)
            if response.status_code not in (200, 201):
                raise AuthorizationFailed(await _token_error_text(response))
            await provider._handle_token_response(response)  # noqa: SLF001
    except AuthorizationFailed:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _failed(exc) from None
    tokens = await scratch.get_tokens()
    assert tokens is not None
    await storage.set_tokens(tokens)
    await storage.set_server_metadata(flow.server_metadata())
    return tokens


async def _token_error_text(response: httpx2.Response) -> str:
    """``the token request was refused (HTTP 400): invalid_grant: ...`` from an RFC 6749 §5.2 body."""
    what = f"the token request was refused (HTTP {response.status_code})"
    try:
        body = (await response.aread())[:65536]
        data = httpx2.Response(200, content=body).json()
    except Exception:  # noqa: BLE001
        return what
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        what += f": {clean_text(data['error'], 80)}"
        if isinstance(data.get("error_description"), str):
            what += f": {clean_text(data['error_description'])}"
    return what


def token_endpoint(server_metadata: dict[str, Any] | None) -> str | None:
    """The token endpoint a stored :meth:`PendingFlow.server_metadata` names, if any."""
    meta = (server_metadata or {}).get("metadata") or {}
    value = meta.get("token_endpoint")
    return value if isinstance(value, str) else None

