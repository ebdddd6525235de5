"""What the server page, the operation panel and the Connections page show about authorization.

Read-only helpers building template context (no token, no secret, no digest is ever in it):

:func:`server_auth` (async)
    the server page's state for one person: ``{"mode", "needs_connect", "connection"}`` where
    ``connection`` is a :func:`connection_view` or ``None``.
:func:`auth_failure` (sync)
    for an operation that failed with :data:`AUTH_ERROR_CODES`: what its panel offers
    (``{"code", "mode", "connect", "rerun"}``: Connect and run again, or Run again).
:func:`connection_rows` (sync)
    the Connections page's rows of one person.
"""

from __future__ import annotations

from typing import Any, Final

from asgiref.sync import sync_to_async

from ..mcp.errors import AUTHORIZATION_FAILED, AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE, origin_of
from .models import OAuthConnection

__all__ = ["AUTH_ERROR_CODES", "auth_failure", "connection_rows", "connection_view", "server_auth"]

#: the error codes of a call that stopped on authorization (issue 13, item 5)
AUTH_ERROR_CODES: Final = frozenset({AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE, AUTHORIZATION_FAILED})
OAUTH_USER: Final = "oauth_user"


def _origin(url: str) -> str:
    try:
        return origin_of(url)
    except ValueError:
        return url[:300]


def connection_view(conn: OAuthConnection) -> dict[str, Any]:
    """What a page may show of one connection: server (the row), tenant, the authorization
    server's origin (from its ``issuer``), scopes (a list), expiry, connected and refreshed times."""
    return {"server": conn.server, "tenant": conn.tenant, "authorization_origin": _origin(conn.issuer),
            "scopes": conn.scope.split(), "expires_at": conn.expires_at, "created_at": conn.created_at,
            "refreshed_at": conn.refreshed_at}


def _connection(user_id: Any, server: Any) -> OAuthConnection | None:
    return (OAuthConnection.objects.select_related("server", "tenant")
            .filter(user_id=user_id, server_id=server.pk, tenant_id=server.tenant_id).first())


async def server_auth(user: Any, server: Any) -> dict[str, Any]:
    """The server page's authorization state for ``user`` (see module doc). ``needs_connect``:
    the server is ``oauth_user`` and this person has no connection to it in its tenant."""
    if server.auth_mode != OAUTH_USER:
        return {"mode": server.auth_mode, "needs_connect": False, "connection": None}
    conn = await sync_to_async(_connection)(user.pk, server)
    return {"mode": server.auth_mode, "needs_connect": conn is None,
            "connection": connection_view(conn) if conn is not None else None}


def auth_failure(op: Any) -> dict[str, Any] | None:
    """For a ``failed`` operation whose ``error_code`` is one of :data:`AUTH_ERROR_CODES`: ``code``,
    the server's ``mode``, ``connect`` (offer "Connect and run again": the server is ``oauth_user``;
    connecting -- again, for a rejected token or a missing scope -- is the remedy) and ``rerun``
    (offer "Run again with the same arguments" too: the person is connected now, e.g. from another
    tab). ``None`` otherwise. At most one query."""
    if op.status != "failed" or op.error_code not in AUTH_ERROR_CODES:
        return None
    server = op.server
    if server.auth_mode != OAUTH_USER:
        return {"code": op.error_code, "mode": server.auth_mode, "connect": False, "rerun": False}
    connected = _connection(op.user_id, server) is not None
    return {"code": op.error_code, "mode": server.auth_mode, "connect": True, "rerun": connected}


def connection_rows(user_id: Any) -> list[dict[str, Any]]:
    """Every connection of the person (any tenant), newest first, as :func:`connection_view`."""
    rows = (OAuthConnection.objects.select_related("server", "tenant").filter(user_id=user_id)
            .order_by("-created_at", "-pk"))
    return [connection_view(conn) for conn in rows]
