"""What the authorization operations (:mod:`.service`, :mod:`.calltime`) read from settings and
from a server row: the outbound guard's policy, keyed digests, the server's sealed secret, this
product's client identity for a server (pinned to the configured issuer) and the Django token
storage of one person, tenant and server."""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

from django.conf import settings
from mcp.shared.auth import OAuthClientInformationFull

from .. import conf
from ..mcp.auth import ClientIdentity
from ..mcp.outbound import OutboundPolicy
from .crypto import SecretUnreadable, unseal
from .storage import DjangoTokenStorage

__all__ = ["client_identity", "keyed_digest", "outbound_policy", "server_secret", "storage_for"]

logger = logging.getLogger("mrtrweb.authz.service")


def outbound_policy(server: Any = None) -> OutboundPolicy:
    """The outbound guard's policy from ``MRTRWEB["OUTBOUND_*"]``; for a ``server`` added under the
    deployer's URL policy (``server.url_policy``), with that policy for the server's own origin
    (``OutboundPolicy.mcp_policy``: checked and pinned in the authorization flows too)."""
    hosts = conf.get("OUTBOUND_ALLOW_HOSTS") or []
    return OutboundPolicy(allow_http_loopback=bool(conf.get("OUTBOUND_ALLOW_HTTP_LOOPBACK")),
                          allow_hosts=frozenset(str(h).lower().strip("[]") for h in hosts),
                          timeout_s=float(conf.get("OUTBOUND_TIMEOUT_S")), max_bytes=int(conf.get("OUTBOUND_MAX_BYTES")),
                          mcp_policy=conf.server_url_policy() if getattr(server, "url_policy", False) else None)


def keyed_digest(kind: str, value: str) -> str:
    """``hmac-sha256:`` hex of ``value`` under a key derived from ``SECRET_KEY`` for ``kind``
    (``"state"``, ``"session"``): how a sign-in state and a browser session are stored and compared
    (the values themselves never are)."""
    key = hashlib.sha256(f"mrtrweb authz {kind}|{settings.SECRET_KEY}".encode()).digest()
    return "hmac-sha256:" + hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def server_secret(server: Any) -> dict[str, Any]:
    """The server's sealed secret as a dict (``{}``: none, unreadable with the configured keys, or not an object)."""
    try:
        data = unseal(server.auth_secret_sealed or "")
    except SecretUnreadable:
        logger.warning("the credential of server %s cannot be opened with the configured keys", server.pk)
        return {}
    return data if isinstance(data, dict) else {}


def client_identity(server: Any, redirect_uri: str) -> ClientIdentity:
    """This product's client identity for ``server`` (pre-registered id/secret and the issuer they are
    pinned to, CIMD URL, DCR name)."""
    secret = server_secret(server).get("client_secret") if server.oauth_client_id else None
    return ClientIdentity(redirect_uri=redirect_uri, client_name=str(conf.get("OAUTH_CLIENT_NAME")),
                          client_metadata_url=conf.get("OAUTH_CLIENT_METADATA_URL") or None,
                          client_id=server.oauth_client_id or None,
                          client_secret=secret if isinstance(secret, str) and secret else None,
                          scope=server.oauth_scope or None, issuer=server.oauth_issuer or None)


def storage_for(*, tenant: Any, user: Any, server: Any) -> DjangoTokenStorage:
    """The :class:`DjangoTokenStorage` of ``user`` on ``server`` in ``tenant``, with the server's
    pre-registered client (if any) stamped with its configured issuer."""
    pre = None
    if server.oauth_client_id:
        ident = client_identity(server, "")
        pre = OAuthClientInformationFull(
            client_id=server.oauth_client_id, client_secret=ident.client_secret, redirect_uris=None,
            token_endpoint_auth_method="client_secret_post" if ident.client_secret else "none",
            issuer=ident.issuer)  # the storage presents a secret only for a connection of this issuer
    return DjangoTokenStorage(tenant=tenant, user=user, server=server,
                              cimd_url=conf.get("OAUTH_CLIENT_METADATA_URL") or None, preregistered=pre)
