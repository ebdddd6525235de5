"""The SDK's ``OAuthClientProvider`` run up to the redirect (:class:`BeginProvider`), for
:func:`mrtrweb.mcp.auth.flow.begin_authorization`.

It discovers, registers and selects scopes as the SDK does, then builds the authorization URL (PKCE
S256, ``state``, ``resource``, ``scope``, ``prompt=consent`` with ``offline_access``) and raises
:class:`Began` carrying the :class:`~.pending.PendingFlow` instead of waiting for the callback. It
never sends or stores tokens. Its checks (a pinned pre-registered client's issuer, an authorization
endpoint fit for a browser, RFC 9700 mix-up) raise the SDK's ``OAuthFlowError``.
"""

from __future__ import annotations

import secrets
import urllib.parse
from typing import Any
from urllib.parse import urlencode, urljoin

from mcp.client.auth import OAuthClientProvider, OAuthFlowError, PKCEParameters
from mcp.client.auth.utils import issuers_match, union_scopes
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata

from ..errors import origin_of
from ..outbound import OutboundPolicy
from .pending import ClientIdentity, PendingFlow
from .storage import AuthStorage

__all__ = ["Began", "BeginProvider", "browser_url_ok", "check_mix_up", "client_metadata", "preregistered_auth_method"]


class Began(BaseException):  # not an Exception: the SDK logs and re-raises those ("OAuth flow error")
    """Raised where the SDK would redirect the browser: carries the started :class:`PendingFlow`."""

    def __init__(self, flow: PendingFlow) -> None:
        super().__init__("authorization flow started")
        self.flow = flow


def client_metadata(identity: ClientIdentity) -> OAuthClientMetadata:
    """The client metadata a DCR registration sends for ``identity`` (``web`` for an https redirect)."""
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


def browser_url_ok(url: str, policy: OutboundPolicy, mcp_origin: str | None = None) -> bool:
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


def check_mix_up(auth_endpoint: str, metadata: OAuthMetadata | None) -> None:
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


class BeginProvider(OAuthClientProvider):
    """The SDK provider up to the redirect (see module doc); never sends or stores tokens."""

    def __init__(self, server_url: str, identity: ClientIdentity, storage: AuthStorage, policy: OutboundPolicy,
                 step_up_scope: str | None, granted_scope: str | None) -> None:
        super().__init__(server_url, client_metadata(identity), storage, None, None,
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
        if not browser_url_ok(auth_endpoint, self._policy, origin_of(ctx.server_url)):
            raise OAuthFlowError("the authorization endpoint is not an https URL")
        check_mix_up(auth_endpoint, ctx.oauth_metadata)
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
        raise Began(PendingFlow(
            state=state, code_verifier=pkce.code_verifier, authorization_url=url,
            authorization_origin=origin_of(auth_endpoint), redirect_uri=self._identity.redirect_uri,
            server_url=ctx.server_url, issuer=str(ctx.oauth_metadata.issuer) if ctx.oauth_metadata else
            self._expected_issuer(), resource=resource,
            scope=ctx.client_metadata.scope, protocol_version=ctx.protocol_version,
            oauth_metadata=ctx.oauth_metadata.model_dump(mode="json", exclude_none=True) if ctx.oauth_metadata else {},
            protected_resource_metadata=(ctx.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
                                         if ctx.protected_resource_metadata else None),
            client_info=ctx.client_info.model_dump(mode="json", exclude_none=True), how=how))
