"""The authorization operations the browser views and ``mrtr_client`` share (one code path).

Shapes::

    start = await start_connect(user=u, tenant=t, server=s, session_key=k, return_to="/mcp/servers/3/",
                                redirect_uri="https://app.example/mcp/oauth/callback", scope=None)
    start.authorization_url     # where the browser goes (shown first as start.authorization_origin)
    conn = await finish_connect(user=u, session_key=k, query=request.GET)   # the callback, any worker
    await disconnect(user=u, tenant=t, server=s)   # RFC 7009 revocation where supported, then delete
    auth = await auth_for(server=s, user=u, tenant=t)      # httpx2.Auth | None, per the server's mode
    ident = await identity_for(server=s, user=u, tenant=t) # AuthIdentity for the MRTR binding and audit

Errors: :class:`ConnectRefused` with a stable ``code`` (``authorization_failed``,
``outbound_refused``, ``state_invalid`` -- unknown, used, expired, or another person's / session's
state --, ``not_oauth`` -- the server's mode is not OAuth per user) and a ``message`` safe to show.
Nothing is stored on a refused callback.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["AuthIdentity", "ConnectRefused", "ConnectStart", "auth_for", "disconnect", "finish_connect",
           "identity_for", "start_connect"]


class ConnectRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class ConnectStart:
    pending_id: int
    authorization_url: str
    authorization_origin: str


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


async def start_connect(*, user: Any, tenant: Any, server: Any, session_key: str, return_to: str,
                        redirect_uri: str, scope: str | None = None) -> ConnectStart:
    raise NotImplementedError


async def finish_connect(*, user: Any, session_key: str, query: Any) -> Any:
    raise NotImplementedError


async def disconnect(*, user: Any, tenant: Any, server: Any) -> bool:
    raise NotImplementedError


async def auth_for(*, server: Any, user: Any, tenant: Any) -> Any:
    raise NotImplementedError


async def identity_for(*, server: Any, user: Any, tenant: Any) -> AuthIdentity:
    raise NotImplementedError
