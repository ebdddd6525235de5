"""A person's connections to MCP servers: one pooled :class:`~mrtrweb.mcp.McpConnection` per
``(user, server)`` and event loop, opened with what that server is configured for.

* :func:`pool` -- the running event loop's :class:`~mrtrweb.mcp.ConnectionPool`
  (``MRTRWEB["CONNECTION_IDLE_S"]``, ``MRTRWEB["CALL_TIMEOUT_S"]``).
* :func:`connection_for` -- the user's open connection to a server, with the credentials of the
  server's auth mode for that user (never anyone else's) and the deprecated client capabilities a
  tenant admin allowed for it (:func:`declared`).

Used by operations (:mod:`mrtrweb.operations`), the server and tool pages (:mod:`mrtrweb.views`)
and the headless client (:mod:`mrtrweb.headless`, ``mrtr_client``), so a listing and a call see
the server the same way.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Final

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from . import conf
from .mcp import ConnectionPool
from .models import McpServer
from .session_roots import configured_roots

__all__ = ["HANDSHAKE_VERSIONS", "connection_for", "declared", "pool"]

#: protocol versions negotiated with the ``initialize`` handshake (a "legacy" server, before 2026-07-28)
HANDSHAKE_VERSIONS: Final = HANDSHAKE_PROTOCOL_VERSIONS

_pools: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ConnectionPool]" = weakref.WeakKeyDictionary()


def pool() -> ConnectionPool:
    """The connection pool of the running event loop (one MCP session per user and server)."""
    loop = asyncio.get_running_loop()
    p = _pools.get(loop)
    if p is None:
        p = _pools[loop] = ConnectionPool(idle_s=float(conf.get("CONNECTION_IDLE_S")),
                                          timeout_s=float(conf.get("CALL_TIMEOUT_S")))
    return p


def loop_pool() -> ConnectionPool | None:
    """The running loop's pool if one was made (the drain closes it), else ``None``."""
    return _pools.get(asyncio.get_running_loop())


def declared(server: McpServer) -> tuple[frozenset[str], str]:
    """The deprecated client capabilities to declare to ``server`` (those a tenant admin allowed
    for it), and the pool key suffix of connections declaring them ("" for none: the connection
    shared with the server's listings)."""
    names = {"sampling/createMessage": "sampling", "roots/list": "roots"}
    declare = frozenset(names[m] for m in server.allowed_deprecated() if m in names)
    return declare, ("#" + "+".join(sorted(declare)) if declare else "")


async def connection_for(user: Any, server: McpServer, *, key: str | None = None,
                         declare: frozenset[str] = frozenset()) -> Any:
    """The pooled connection of ``user`` to ``server``, with the credentials of the server's auth
    mode for that user (:func:`mrtrweb.authz.service.auth_for`; the tenant is the server's). A
    ``roots/list`` the server sends outside a call is answered by :func:`mrtrweb.session_roots.configured_roots`.
    ``key``: the pool's server key (default ``str(server.pk)``). A connection built with other
    credentials (the server's auth settings changed) is replaced.

    Raises:
        McpCallError: as :meth:`ConnectionPool.get` (``authorization_required`` when the server
            answers 401 to the connect).
    """
    from .authz import service as authz

    auth = None
    if server.auth_mode != McpServer.AuthMode.NONE:
        auth = await authz.auth_for(server=server, user=user, tenant=server.tenant_id)
    return await pool().get(str(user.pk), key if key is not None else str(server.pk), server.url, declare=declare,
                            auth=auth, auth_key=authz.auth_key(server, user), outbound=authz.outbound_policy(),
                            session_roots=configured_roots(server))
