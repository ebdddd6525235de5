"""The credentials a request to an MCP server goes out with (:func:`auth_for`, :func:`auth_key`),
and the issuer lookup an admin confirms (:func:`discover_issuer`). Re-exported by :mod:`.service`.

A client secret or private key an admin entered is only ever sent to the authorization server
whose issuer the admin configured (``McpServer.oauth_issuer``; MCP authorization, "Authorization
Server Discovery", RFC 8414 section 3.3): client credentials without one send nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils.translation import gettext_noop

from .. import conf
from ..mcp import auth as mcp_auth
from ..mcp.auth import (AuthorizationFailed, bearer_auth, client_credentials_auth, private_key_jwt_auth,
                        static_headers_auth)
from ..mcp.errors import AUTHORIZATION_FAILED, McpCallError
from .config import outbound_policy, server_secret, storage_for

__all__ = ["NO_ISSUER", "CredentialsNotConfigured", "auth_for", "auth_key", "discover_issuer"]

logger = logging.getLogger("mrtrweb.authz.service")


#: why client credentials without a configured issuer send nothing (shown to the person)
NO_ISSUER = (gettext_noop("No authorization server is configured for this server's client credentials: nothing was sent. "
             "A tenant admin must set its “Authorization server (issuer)” in the server's settings."))


class CredentialsNotConfigured(McpCallError):
    """``authorization_failed`` raised before any request (:func:`auth_for`); ``message`` is the
    product's own text, shown to the person as it is (``shown_message``)."""

    def __init__(self, message: str) -> None:
        super().__init__(AUTHORIZATION_FAILED, message)
        self.shown_message = message


async def auth_for(*, server: Any, user: Any, tenant: Any) -> Any:
    """The ``httpx2.Auth`` of ``server``'s mode for ``user`` in ``tenant``, or ``None``.

    ``none`` -> ``None``; ``tenant`` -> the sealed ``{"bearer"}`` / ``{"headers"}`` as static headers
    (to the server's origin only); ``oauth_user`` -> :func:`mrtrweb.mcp.auth.bearer_auth` over the
    person's stored connection (none stored: requests go without a token and the server's ``401``
    becomes ``authorization_required``); ``oauth_client`` -> client credentials with the sealed
    ``{"client_secret"}``, or ``private_key_jwt`` with ``{"private_key_pem", "signing_algorithm"}``,
    tokens requested only from the authorization server of ``server.oauth_issuer``.
    An unreadable or malformed secret gives ``None`` (the server then refuses: a named error).

    Raises:
        McpCallError: ``authorization_failed`` (:class:`CredentialsNotConfigured`, message
            :data:`NO_ISSUER`): client credentials without a configured issuer; nothing is sent.
    """
    mode = server.auth_mode
    if mode == "tenant":
        secret = server_secret(server)
        try:
            if isinstance(secret.get("bearer"), str) and secret["bearer"]:
                return static_headers_auth(server.url, {"Authorization": f"Bearer {secret['bearer']}"})
            if isinstance(secret.get("headers"), dict) and secret["headers"]:
                return static_headers_auth(server.url, {str(k): str(v) for k, v in secret["headers"].items()})
        except ValueError:
            logger.warning("the tenant credential of server %s is not a usable header", server.pk)
        return None
    if mode == "oauth_user":
        return bearer_auth(server.url, storage=storage_for(tenant=tenant, user=user, server=server),
                           policy=outbound_policy(server), refresh_margin_s=float(conf.get("OAUTH_REFRESH_MARGIN_S")))
    if mode == "oauth_client" and server.oauth_client_id:
        if not server.oauth_issuer:  # fail closed: the MCP server would choose where the secret goes
            raise CredentialsNotConfigured(NO_ISSUER)
        secret = server_secret(server)
        scope = server.oauth_scope or None
        issuer = server.oauth_issuer
        if isinstance(secret.get("private_key_pem"), str):
            try:
                return private_key_jwt_auth(server.url, client_id=server.oauth_client_id, issuer=issuer,
                                            private_key_pem=secret["private_key_pem"],
                                            signing_algorithm=str(secret.get("signing_algorithm") or "RS256"),
                                            scope=scope)
            except ValueError:
                return None
        if isinstance(secret.get("client_secret"), str):
            method = secret.get("token_endpoint_auth_method")
            try:
                return client_credentials_auth(server.url, client_id=server.oauth_client_id, issuer=issuer,
                                               client_secret=secret["client_secret"], scope=scope,
                                               token_endpoint_auth_method=method if method == "client_secret_post"
                                               else "client_secret_basic")
            except ValueError:
                raise CredentialsNotConfigured(NO_ISSUER) from None
    return None


#: the longest the whole issuer look-up takes (all its discovery requests), seconds: it runs while a
#: settings form is validated, so a slow server must not hold the page for several request timeouts
LOOKUP_BUDGET_S = 5.0


async def discover_issuer(server: Any, *, budget_s: float = LOOKUP_BUDGET_S) -> str | None:
    """The issuer identifier of the authorization server ``server``'s protected resource metadata
    names (RFC 9728, then its RFC 8414 / OpenID metadata's ``issuer``), through the outbound guard;
    ``None`` when the server does not ask for authorization, names none, discovery failed or took
    longer than ``budget_s`` in all (logged, without server text). Nothing is registered or sent but
    discovery requests. A suggestion for an admin to confirm, never trusted on its own: the MCP
    server chooses it."""
    import asyncio

    try:
        async with asyncio.timeout(budget_s):
            return await mcp_auth.discover_issuer(server.url, policy=outbound_policy(server))
    except AuthorizationFailed as exc:
        logger.info("issuer lookup for server %s failed (%s)", getattr(server, "pk", None), exc.code)
        return None
    except TimeoutError:
        logger.info("issuer lookup for server %s took longer than %gs", getattr(server, "pk", None), budget_s)
        return None


def auth_key(server: Any, user: Any) -> str:
    """What a pooled connection's auth was built from (the pool replaces a connection when it changes):
    the server's configuration digest (auth mode, client id, scope, secret digest)."""
    return server.config_digest()
