"""Which authorization server an MCP server names: :func:`discover_issuer` (MCP authorization,
"Authorization Server Discovery"; RFC 9728 then RFC 8414 / OpenID), for an admin to look up and
confirm the issuer that pre-registered client credentials are pinned to.

It runs the SDK's discovery (``OAuthClientProvider``: the ``WWW-Authenticate``
``resource_metadata``, then the path-based and root well-known URLs; the PRM ``resource`` checked;
the authorization server metadata's ``issuer`` checked against the PRM's) on an unauthenticated
``ping`` probe, and stops before any registration or token request: nothing is registered, no
credential is sent. Every request but the probe to the server's own origin goes through the
outbound guard; the server's own well-known URLs are size- and time-bounded as well.
"""

from __future__ import annotations

import secrets

from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

from ..errors import origin_of
from ..outbound import OutboundPolicy, guarded_client
from .flow import PROBE_PROTOCOL_VERSION, authorization_failure
from .storage import MemoryStorage

__all__ = ["discover_issuer"]


class _Found(BaseException):  # not an Exception: the SDK logs and re-raises those
    def __init__(self, issuer: str | None) -> None:
        super().__init__("issuer found")
        self.issuer = issuer


class _LookupProvider(OAuthClientProvider):
    """The SDK's discovery up to the token request, which it replaces by raising :class:`_Found`."""

    def __init__(self, server_url: str) -> None:
        super().__init__(server_url, OAuthClientMetadata(redirect_uris=None), MemoryStorage(), None, None)

    async def _initialize(self) -> None:
        self.context.current_tokens = None
        # a placeholder client: the SDK's step 4 (DCR / CIMD) is skipped, nothing is registered
        self.context.client_info = OAuthClientInformationFull(client_id="mrtrweb-issuer-lookup", redirect_uris=None)
        self._initialized = True

    async def _perform_authorization(self):  # noqa: ANN202 - never returns
        metadata = self.context.oauth_metadata
        raise _Found(str(metadata.issuer) if metadata is not None else None)


async def discover_issuer(server_url: str, *, policy: OutboundPolicy) -> str | None:
    """The ``issuer`` of the authorization server metadata the MCP server at ``server_url`` leads
    to (its protected resource metadata's first ``authorization_servers`` entry), as the metadata
    spells it; ``None`` when the server does not ask for authorization or no authorization server
    metadata was found (the 2025-03-26 fallback).

    Raises:
        AuthorizationFailed: discovery failed (a resource mismatch, an issuer mismatch, metadata
            this client cannot use...; ``code`` ``outbound_refused`` for a guard refusal).
    """
    probe = {"jsonrpc": "2.0", "id": f"mrtrweb-issuer-lookup-{secrets.token_hex(8)}", "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream", MCP_PROTOCOL_VERSION_HEADER: PROBE_PROTOCOL_VERSION}
    try:
        async with guarded_client(policy, mcp_origin=origin_of(server_url), bound_mcp=True,
                                  auth=_LookupProvider(server_url)) as client:
            await client.post(server_url, json=probe, headers=headers)
    except _Found as found:
        return found.issuer
    except Exception as exc:  # noqa: BLE001 - one stable error
        raise authorization_failure(exc) from None
    return None
