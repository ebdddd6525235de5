"""The shapes of an authorization-code flow split across requests (:mod:`.flow`).

:class:`ClientIdentity`: how this product identifies itself to an authorization server (redirect
URI, CIMD URL, pre-registered ``client_id`` / ``client_secret`` pinned to an ``issuer``, scope).
:class:`PendingFlow`: one started flow as JSON (it holds the PKCE verifier: sealed at rest by the
caller). :func:`token_endpoint` reads a stored :meth:`PendingFlow.server_metadata`. No I/O here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ClientIdentity", "PendingFlow", "PROBE_PROTOCOL_VERSION", "token_endpoint"]

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


def token_endpoint(server_metadata: dict[str, Any] | None) -> str | None:
    """The token endpoint a stored :meth:`PendingFlow.server_metadata` names, if any."""
    meta = (server_metadata or {}).get("metadata") or {}
    value = meta.get("token_endpoint")
    return value if isinstance(value, str) else None
