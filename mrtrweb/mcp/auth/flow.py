"""The authorization-code flow split across requests: :func:`begin_authorization` and
:func:`complete_authorization` (MCP authorization 2025-11-25 / 2026-07-28, "Authorization Flow").

The SDK's ``OAuthClientProvider`` does discovery and registration in one ``httpx2.Auth`` flow and
then waits, inside the same coroutine, for the browser's callback. Here a subclass,
:class:`~.provider.BeginProvider`, runs that flow on a harmless probe (a JSON-RPC ``ping`` POSTed without
a token through the outbound guard): protected resource metadata (RFC 9728: the
``WWW-Authenticate`` ``resource_metadata``, then the path-based, then the root well-known URL; its
``resource`` must match the server), authorization server metadata (RFC 8414 / OpenID, path-aware,
``issuer`` checked), client identity (pre-registered, else CIMD when advertised, else DCR), scope
selection (``WWW-Authenticate``, else ``scopes_supported``; ``offline_access`` when the
authorization server advertises it), then stops where the SDK would redirect: it builds the
authorization URL exactly as the SDK does (PKCE S256, ``state``, ``resource`` (RFC 8707),
``scope``, ``prompt=consent`` with ``offline_access``) and raises :class:`~.provider.Began` carrying the
:class:`PendingFlow`. The callback, on any worker, rebuilds the provider's context from that flow
and lets the SDK build the token request (``_exchange_token_authorization_code``) and read its
response (``_handle_token_response``), sent through the guard.

The shapes (:class:`ClientIdentity`, :class:`PendingFlow`) live in :mod:`.pending`, the provider in
:mod:`.provider`; both are re-exported here.
"""

from __future__ import annotations

import secrets

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import validate_authorization_response_iss
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, OAuthToken, \
    ProtectedResourceMetadata
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import ValidationError

from ..errors import origin_of
from ..outbound import OutboundPolicy, OutboundRefused, guarded_client
from .errors import OUTBOUND_REFUSED, AuthorizationFailed, clean_text
from .pending import PROBE_PROTOCOL_VERSION, ClientIdentity, PendingFlow, token_endpoint
from .provider import Began, BeginProvider, preregistered_auth_method
from .storage import AuthStorage, MemoryStorage

__all__ = ["ClientIdentity", "PendingFlow", "begin_authorization", "complete_authorization", "PROBE_PROTOCOL_VERSION",
           "authorization_failure", "preregistered_auth_method", "token_endpoint"]


def authorization_failure(exc: BaseException) -> AuthorizationFailed:
    """Any failure of a flow's requests as one stable :class:`AuthorizationFailed` (a guard refusal:
    ``outbound_refused``; the SDK's flow errors quoted, cleaned; others by their type only)."""
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
    provider = BeginProvider(server_url, identity, storage, policy, scope, granted)
    probe = {"jsonrpc": "2.0", "id": f"mrtrweb-auth-probe-{secrets.token_hex(8)}", "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream", MCP_PROTOCOL_VERSION_HEADER: protocol_version}
    try:
        # bound_mcp: the server's own well-known URLs are the attacker's too (size and time bounded)
        async with guarded_client(policy, mcp_origin=origin_of(server_url), bound_mcp=True, auth=provider) as client:
            response = await client.post(server_url, json=probe, headers=headers)
    except Began as began:
        return began.flow
    except AuthorizationFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure of the flow becomes one stable error
        raise authorization_failure(exc) from None
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
        raise authorization_failure(exc) from None
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
