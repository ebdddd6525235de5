"""OAuth 2.1 to MCP servers, framework-free (MCP authorization, 2025-11-25 and 2026-07-28 revisions).

Built on the ``mcp`` SDK's client auth (``mcp.client.auth.OAuthClientProvider``: protected
resource metadata (RFC 9728), authorization server metadata (RFC 8414 / OpenID, issuer checked),
CIMD / pre-registered / DCR client identity, PKCE S256, ``resource`` (RFC 8707), scope selection,
step-up, RFC 9207 ``iss``, re-registration when the authorization server changes). The SDK keeps
PKCE and ``state`` inside one waiting coroutine; a web app receives the callback in another
request, maybe on another worker. So the flow is split in two:

:func:`begin_authorization`
    probe the MCP server, discover, register if needed, build the authorization URL; return a
    :class:`PendingFlow` (JSON-able: the Django layer seals and stores it, keyed by ``state``).
:func:`complete_authorization`
    on the callback (any worker): check ``state`` and ``iss``, exchange the code with the stored
    PKCE verifier through the outbound guard, store the tokens through the ``TokenStorage``.

At call time :func:`bearer_auth` (an ``httpx2.Auth``) adds the stored access token, refreshes it
``refresh_margin_s`` before expiry, and never starts a flow: a ``401`` / ``403 insufficient_scope``
comes back to the connection, which raises ``authorization_required`` / ``insufficient_scope``.
:func:`client_credentials_auth` (machine servers) and :func:`static_headers_auth` (tenant
credentials) are the other modes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["AuthorizationFailed", "ClientIdentity", "PendingFlow", "begin_authorization", "bearer_auth",
           "client_credentials_auth", "complete_authorization", "static_headers_auth"]


class AuthorizationFailed(Exception):
    """The flow failed; ``code`` is ``authorization_failed`` (or ``outbound_refused``), ``message``
    is safe to show (server text cleaned and bounded; never a token, code or verifier)."""

    def __init__(self, message: str, *, code: str = "authorization_failed") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class ClientIdentity:
    """How this product identifies itself to authorization servers.

    ``client_metadata_url``: the CIMD URL (used when the authorization server advertises
    ``client_id_metadata_document_supported``); ``client_id``/``client_secret``: pre-registered by an
    admin (used first when set); else DCR with ``client_name`` and ``redirect_uri``.
    """

    redirect_uri: str
    client_name: str = "mrtrweb"
    client_metadata_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    scope: str | None = None


@dataclasses.dataclass
class PendingFlow:
    """One started flow, as JSON (``to_json``/``from_json``). Holds the PKCE ``code_verifier``:
    seal it at rest. ``authorization_url`` is where the person's browser goes;
    ``authorization_origin`` is what the page shows them."""

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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PendingFlow:
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


async def begin_authorization(server_url: str, *, identity: ClientIdentity, storage: Any, policy: Any,
                              scope: str | None = None) -> PendingFlow | None:
    """Start a flow for ``server_url``; ``None`` when the server did not ask for authorization.

    ``storage``: an SDK ``TokenStorage`` (client info read and written here: a DCR registration is
    kept). ``policy``: an :class:`mrtrweb.mcp.outbound.OutboundPolicy`. ``scope``: a step-up scope
    (from ``insufficient_scope``), unioned with what was granted.

    Raises:
        AuthorizationFailed: discovery, registration or metadata checks failed (resource mismatch,
            issuer mismatch, guard refusal, no usable client identity...).
    """
    raise NotImplementedError


async def complete_authorization(flow: PendingFlow, *, code: str | None, state: str | None, iss: str | None,
                                 error: str | None, error_description: str | None, storage: Any,
                                 policy: Any) -> Any:
    """Finish ``flow`` with the callback's query values; store and return the SDK ``OAuthToken``.

    Raises:
        AuthorizationFailed: state mismatch, ``iss`` mismatch (RFC 9207), an ``error`` from the
            authorization server (its text cleaned), the token request refused.
    """
    raise NotImplementedError


def bearer_auth(server_url: str, *, storage: Any, policy: Any, refresh_margin_s: float = 60.0) -> Any:
    """The call-time ``httpx2.Auth`` of OAuth per user (see module doc)."""
    raise NotImplementedError


def client_credentials_auth(server_url: str, *, client_id: str, client_secret: str, scope: str | None,
                            storage: Any, policy: Any) -> Any:
    """The ``httpx2.Auth`` of OAuth client credentials (SDK ``mcp.client.auth.extensions``)."""
    raise NotImplementedError


def static_headers_auth(server_url: str, headers: dict[str, str]) -> Any:
    """The ``httpx2.Auth`` of tenant credentials: adds ``headers`` to requests to the MCP server's
    own origin only (never to another origin)."""
    raise NotImplementedError
