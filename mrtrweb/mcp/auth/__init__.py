"""OAuth 2.1 to MCP servers, framework-free (MCP authorization, 2025-11-25 and 2026-07-28 revisions).

Built on the ``mcp`` SDK's client auth (``mcp.client.auth.OAuthClientProvider``: protected
resource metadata (RFC 9728), authorization server metadata (RFC 8414 / OpenID, issuer checked),
CIMD / pre-registered / DCR client identity, PKCE S256, ``resource`` (RFC 8707), scope selection,
step-up, RFC 9207 ``iss``, re-registration when the authorization server changes). The SDK keeps
PKCE and ``state`` inside one waiting coroutine; a web app receives the callback in another
request, maybe on another worker. So the flow is split in two (:mod:`.flow`):

:func:`begin_authorization`
    probe the MCP server, discover, register if needed, build the authorization URL; return a
    :class:`PendingFlow` (JSON-able: the Django layer seals and stores it, keyed by ``state``).
:func:`complete_authorization`
    on the callback (any worker): check ``state`` and ``iss``, exchange the code with the stored
    PKCE verifier through the outbound guard, store the tokens through the storage.

At call time :func:`bearer_auth` (:mod:`.bearer`, an ``httpx2.Auth``) adds the stored access token,
refreshes it ``refresh_margin_s`` before expiry, and never starts a flow: a ``401`` / ``403
insufficient_scope`` comes back to the connection, which raises ``authorization_required`` /
``insufficient_scope``. :func:`client_credentials_auth` (machine servers) and
:func:`static_headers_auth` (tenant credentials) are the other modes (:mod:`.credentials`).
Storage: :mod:`.storage` (the SDK's ``TokenStorage`` plus server metadata and a locked refresh).
"""

from __future__ import annotations

from .bearer import StoredBearerAuth, bearer_auth
from .credentials import (StaticHeadersAuth, check_header, client_credentials_auth, private_key_jwt_auth,
                          static_headers_auth)
from .discover import discover_issuer
from .errors import AUTHORIZATION_FAILED, OUTBOUND_REFUSED, AuthorizationFailed, clean_text
from .flow import ClientIdentity, PendingFlow, begin_authorization, complete_authorization
from .headless import follow_authorization_url
from .storage import AuthStorage, MemoryStorage

__all__ = ["AUTHORIZATION_FAILED", "OUTBOUND_REFUSED", "AuthStorage", "AuthorizationFailed", "ClientIdentity",
           "MemoryStorage", "PendingFlow", "StaticHeadersAuth", "StoredBearerAuth", "begin_authorization",
           "bearer_auth", "check_header", "clean_text", "client_credentials_auth", "complete_authorization",
           "discover_issuer", "follow_authorization_url", "private_key_jwt_auth",
           "static_headers_auth"]
