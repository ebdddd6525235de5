"""Token revocation (RFC 7009) at Disconnect: the refresh token, then the access token, each POSTed to
the metadata's ``revocation_endpoint`` through the outbound guard, the client authenticated as for
the token endpoint (the SDK's ``prepare_token_auth``: Basic, post, or none)."""

from __future__ import annotations

from typing import Any

from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from ..outbound import OutboundPolicy, guarded_client
from .storage import MemoryStorage

__all__ = ["revoke_tokens"]


async def revoke_tokens(metadata: dict[str, Any], client_info: OAuthClientInformationFull, tokens: OAuthToken, *,
                        policy: OutboundPolicy, mcp_origin: str | None = None) -> list[int]:
    """Revoke ``tokens`` at ``metadata["revocation_endpoint"]``; the HTTP statuses, in order.
    ``mcp_origin``: the MCP server's configured origin, which passes the guard's address rules (as
    in discovery, token and refresh requests).

    Raises:
        OutboundRefused, httpx2.HTTPError: the endpoint was refused by the guard or unreachable.
    """
    endpoint = metadata.get("revocation_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        return []
    ctx = OAuthContext(server_url=endpoint, client_metadata=OAuthClientMetadata(redirect_uris=None),
                       storage=MemoryStorage(), redirect_handler=None, callback_handler=None, client_info=client_info)
    statuses = []
    async with guarded_client(policy, mcp_origin=mcp_origin, bound_mcp=True) as client:
        for token, hint in ((tokens.refresh_token, "refresh_token"), (tokens.access_token, "access_token")):
            if not token:
                continue
            data, headers = ctx.prepare_token_auth({"token": token, "token_type_hint": hint,
                                                    "client_id": client_info.client_id},
                                                   {"Content-Type": "application/x-www-form-urlencoded"})
            response = await client.post(endpoint, data=data, headers=headers)
            await response.aread()
            statuses.append(response.status_code)
    return statuses
