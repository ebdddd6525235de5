"""OAuth per user at call time: :func:`bearer_auth` (MCP authorization, "Access Token Usage" and
"Token refresh"; RFC 6750 section 2.1).

:class:`StoredBearerAuth` is an ``OAuthClientProvider`` whose flow does **not** run the SDK's
discovery on a ``401``: on every request to the MCP server's own origin it re-reads the tokens from
storage (a disconnect on another worker takes effect on the next request), refreshes them under the
storage's lock when fewer than ``refresh_margin_s`` seconds remain (the SDK's ``_refresh_token``
builds the request, with ``resource`` per RFC 8707; it goes to the stored metadata's
``token_endpoint`` through the outbound guard; ``/token`` at the MCP server's origin only when the
flow found no metadata at all, the 2025-03-26 fallback), adds
``Authorization: Bearer``, sends the request and returns its response as it is. A ``401`` /
``403`` reaches the connection, which raises ``authorization_required`` / ``insufficient_scope``.
Requests to any other origin get no token.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthClientMetadata, OAuthMetadata, OAuthToken, ProtectedResourceMetadata
from pydantic import ValidationError

from ..errors import origin_of
from ..outbound import OutboundPolicy, OutboundRefused, guarded_client
from .storage import AuthStorage

__all__ = ["StoredBearerAuth", "bearer_auth"]

logger = logging.getLogger(__name__)


class StoredBearerAuth(OAuthClientProvider):
    """See module doc. ``refresh_failures`` counts refreshes the authorization server refused."""

    def __init__(self, server_url: str, *, storage: AuthStorage, policy: OutboundPolicy,
                 refresh_margin_s: float = 60.0) -> None:
        super().__init__(server_url, OAuthClientMetadata(redirect_uris=None), storage, None, None)
        self._store = storage
        self._policy = policy
        self._margin = float(refresh_margin_s)
        self._origin = origin_of(server_url)
        self.refresh_failures = 0

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        try:
            ours = origin_of(str(request.url)) == self._origin
        except ValueError:
            ours = False
        if ours:
            tokens = await self._store.refresh_locked(self._margin, self._refresh)
            if tokens is not None and tokens.access_token and (tokens.expires_in is None or tokens.expires_in > 0):
                request.headers["Authorization"] = f"Bearer {tokens.access_token}"
        yield request

    async def _refresh(self, tokens: OAuthToken) -> OAuthToken | None:
        """One refresh-token grant (RFC 6749 section 6); ``None`` when it could not be done."""
        stored = await self._store.get_server_metadata() or {}
        ctx = self.context
        try:
            meta = stored.get("metadata")
            # {} : the 2025-03-26 fallback, the token endpoint at the MCP server's origin (the SDK's rule)
            ctx.oauth_metadata = OAuthMetadata.model_validate(meta) if meta else None
            prm = stored.get("prm")
            ctx.protected_resource_metadata = ProtectedResourceMetadata.model_validate(prm) if prm else None
        except ValidationError:
            logger.warning("refresh for %s skipped: no usable authorization server metadata", self._origin)
            return None
        ctx.protocol_version = stored.get("protocol_version")
        ctx.client_info = await self._store.get_client_info()
        ctx.current_tokens = tokens
        if ctx.client_info is None:
            return None
        try:
            refresh = await self._refresh_token()
            async with guarded_client(self._policy, mcp_origin=self._origin, bound_mcp=True) as client:
                response = await client.send(refresh)
                body = await response.aread()
        except (OutboundRefused, httpx2.HTTPError, ValueError) as exc:
            self.refresh_failures += 1
            logger.warning("token refresh for %s failed: %s", self._origin, getattr(exc, "reason", type(exc).__name__))
            return None
        finally:
            ctx.current_tokens = None
        if response.status_code != 200:
            self.refresh_failures += 1
            logger.warning("token refresh for %s refused: HTTP %s", self._origin, response.status_code)
            return None
        try:
            fresh = OAuthToken.model_validate_json(body)
        except ValidationError:
            self.refresh_failures += 1
            return None
        # RFC 6749 section 6: an omitted scope is unchanged; an omitted refresh token is not rotated.
        update = {}
        if fresh.scope is None:
            update["scope"] = tokens.scope
        if fresh.refresh_token is None:
            update["refresh_token"] = tokens.refresh_token
        return fresh.model_copy(update=update) if update else fresh


def bearer_auth(server_url: str, *, storage: AuthStorage, policy: OutboundPolicy,
                refresh_margin_s: float = 60.0) -> StoredBearerAuth:
    """The call-time ``httpx2.Auth`` of OAuth per user (see module doc)."""
    return StoredBearerAuth(server_url, storage=storage, policy=policy, refresh_margin_s=refresh_margin_s)
