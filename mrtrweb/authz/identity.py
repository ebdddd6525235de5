"""Who the MCP server sees for a person's request, as digests: the authorization identity an MRTR
round is bound to (issue 13, item 6).

A round's retry goes out only with the credentials the original request went out with: at the
operation's start the identity is recorded on the :class:`~mrtrweb.models.Operation`
(``auth_mode``, ``auth_digest``, ``auth_identity``), every round's ``received`` audit row carries
it again, and before any retry leaves (an answer, a ``requestState``-only round) it is recomputed:
a different one denies the round (``authorization_changed``), nothing is sent.

What the identity digest covers, by the server's ``auth_mode``:

``none``
    nothing (``""``): every request is anonymous.
``tenant``
    the tenant credential's digest (``McpServer.auth_secret_digest``): an admin who replaces the
    bearer token or headers changes it.
``oauth_user``
    the person's :class:`~mrtrweb.authz.models.OAuthConnection` for (tenant, person, server): its
    ``issuer`` and ``family`` (minted at Connect, kept by a refresh). A refresh keeps the identity;
    Disconnect (no connection: ``connected`` False, digest ``""``) or a new Connect (a new family,
    maybe another account) changes it.
``oauth_client``
    the configured issuer (``McpServer.oauth_issuer``), the pre-registered client id and the client
    secret's digest (a machine identity): an admin who points the credentials at another
    authorization server changes it.

``issuer_client_digest`` (audit rows' ``auth_digest``) is ``sha256:`` of issuer and client id
(public values, so an auditor can check a row against a known registration), ``""`` when the mode
has neither. No token, secret or code ever enters a digest here: only the digests and public ids
the rows already hold.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

__all__ = ["AuthIdentity", "NONE", "binding_fields", "identity_for", "identity_for_sync", "identity_of"]


@dataclasses.dataclass(frozen=True)
class AuthIdentity:
    """Who the MCP server sees, as digests: ``mode`` (the server's auth mode), ``digest`` (``sha256:``
    of issuer + the connection's family / subject, or of the tenant credential's digest; ``""`` for
    mode ``none``), ``issuer_client_digest`` (``sha256:`` of issuer + client id, for audit rows).
    ``connected``: False when the mode needs a connection the person does not have."""

    mode: str
    digest: str
    issuer_client_digest: str
    connected: bool


NONE = AuthIdentity(mode="none", digest="", issuer_client_digest="", connected=True)


def _sha(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def identity_of(server: Any, connection: Any = None, registration: Any = None) -> AuthIdentity:
    """The identity of ``server`` (an ``McpServer``) for one person, from rows already read.

    Args:
        connection: the person's ``OAuthConnection`` to ``server`` (mode ``oauth_user``), or None.
        registration: the server's current ``OAuthClientRegistration`` (mode ``oauth_client``:
            its issuer names the authorization server), or None.

    Returns:
        an :class:`AuthIdentity`; an unknown mode is treated as needing a connection it does not
        have (``connected`` False), never as ``none``.
    """
    mode = str(getattr(server, "auth_mode", "none") or "none")
    if mode == "none":
        return NONE
    if mode == "tenant":
        secret = str(server.auth_secret_digest or "")
        return AuthIdentity(mode=mode, digest=_sha("tenant", secret) if secret else "", issuer_client_digest="",
                            connected=bool(secret))
    if mode == "oauth_user":
        if connection is None:
            return AuthIdentity(mode=mode, digest="", issuer_client_digest="", connected=False)
        return AuthIdentity(mode=mode, digest=_sha("oauth_user", connection.issuer, connection.family),
                            issuer_client_digest=_sha(connection.issuer, connection.client_id), connected=True)
    if mode == "oauth_client":
        client_id = str(server.oauth_client_id or "")
        # the configured issuer: the only authorization server the client secret goes to
        issuer = str(getattr(server, "oauth_issuer", "") or getattr(registration, "issuer", "") or "")
        if not client_id:
            return AuthIdentity(mode=mode, digest="", issuer_client_digest="", connected=False)
        return AuthIdentity(mode=mode, digest=_sha("oauth_client", issuer, client_id,
                                                   str(server.auth_secret_digest or "")),
                            issuer_client_digest=_sha(issuer, client_id), connected=True)
    return AuthIdentity(mode=mode, digest="", issuer_client_digest="", connected=False)


def identity_for_sync(*, server: Any, user: Any, tenant: Any) -> AuthIdentity:
    """:func:`identity_of` with the rows read from the database (sync: one or two queries).

    ``user`` / ``tenant``: model instances or primary keys. ``server`` is used as given (the
    caller re-reads it when its configuration may have changed)."""
    from .models import OAuthClientRegistration, OAuthConnection

    mode = getattr(server, "auth_mode", "none")
    connection = registration = None
    if mode == "oauth_user":
        connection = (OAuthConnection.objects.filter(tenant_id=getattr(tenant, "pk", tenant),
                                                     user_id=getattr(user, "pk", user), server_id=server.pk)
                      .only("issuer", "client_id", "family").first())
    elif mode == "oauth_client":
        registration = (OAuthClientRegistration.objects.filter(server_id=server.pk).order_by("-created_at")
                        .only("issuer").first())
    return identity_of(server, connection, registration)


async def identity_for(*, server: Any, user: Any, tenant: Any) -> AuthIdentity:
    """:func:`identity_for_sync` from async code (one thread hop)."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(identity_for_sync)(server=server, user=user, tenant=tenant)


def binding_fields(identity: AuthIdentity) -> dict[str, str]:
    """What an operation row and its audit rows record of ``identity``: ``auth_mode``,
    ``auth_digest`` (issuer + client id) and ``auth_identity`` (the identity digest keyed with the
    audit key, so a tenant credential's digest is not exposed to offline guessing through exports;
    ``""`` when there is none). Compared as a whole at answer time."""
    from ..audit.events import keyed_digest

    return {"auth_mode": identity.mode, "auth_digest": identity.issuer_client_digest,
            "auth_identity": keyed_digest("auth-identity:" + identity.digest) if identity.digest else ""}
