"""A person's connections to MCP servers: one pooled :class:`~mrtrweb.mcp.McpConnection` per
``(user, server)`` and event loop, opened with what that server is configured for.

* :func:`pool` -- the running event loop's :class:`~mrtrweb.mcp.ConnectionPool`
  (``MRTRWEB["CONNECTION_IDLE_S"]``, ``MRTRWEB["CALL_TIMEOUT_S"]``).
* :func:`connection_for` -- the user's open connection to a server, with the credentials of the
  server's auth mode for that user (never anyone else's), the deprecated client capabilities a
  tenant admin allowed for it (:func:`declared`) and the protocol it is set to
  (``McpServer.protocol``).
* :func:`server_key` -- the pool key of that connection (closing it: ``pool().close(user, key)``).
* :func:`release_while_waiting` -- a 2026-07-28 connection is closed once a round of it waits for
  the person and nothing else uses it (:meth:`~mrtrweb.mcp.ConnectionPool.release`): the retry
  carries ``requestState`` and opens a new session; the worker keeps no session (~100 KiB and
  ~400 objects the collector walks) per waiting round. Never a 2025-11-25 session.

Used by operations (:mod:`mrtrweb.operations`), the server and tool pages (:mod:`mrtrweb.views`)
and the headless client (:mod:`mrtrweb.headless`, ``mrtr_client``), so a listing and a call see
the server the same way: the same declared capabilities, protocol and pooled connection (a
server that lists some tools only to clients declaring sampling or roots lists them on the pages
too, issue 15).

A server's ``notifications/*/list_changed`` (:mod:`mrtrweb.mcp.list_changed`) is pushed to the
user's browser connections as ``{"type": "server.listing", "server_id": <int>, "kind": "tools" |
"prompts" | "resources"}`` (no server text); an open server page re-reads its listing.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Final

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from .. import conf
from ..mcp import ConnectionPool
from ..models import McpServer
from .session_roots import configured_roots

__all__ = ["HANDSHAKE_VERSIONS", "LISTING_PUSH", "STATELESS_VERSIONS", "connection_for", "declared", "pool",
           "release_after_s", "release_while_waiting", "server_key"]

#: the channel-layer event type of a listing-changed push (handled by ``OperationsConsumer.server_listing``)
LISTING_PUSH: Final = "server.listing"

#: protocol versions negotiated with the ``initialize`` handshake (a "legacy" server, before 2026-07-28)
HANDSHAKE_VERSIONS: Final = HANDSHAKE_PROTOCOL_VERSIONS

#: protocol versions whose rounds need no session while they wait: the retry carries ``requestState``
STATELESS_VERSIONS: Final = MODERN_PROTOCOL_VERSIONS

loop_pools: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ConnectionPool]" = weakref.WeakKeyDictionary()


def pool() -> ConnectionPool:
    """The connection pool of the running event loop (one MCP session per user and server)."""
    loop = asyncio.get_running_loop()
    p = loop_pools.get(loop)
    if p is None:
        p = loop_pools[loop] = ConnectionPool(idle_s=float(conf.get("CONNECTION_IDLE_S")),
                                          timeout_s=float(conf.get("CALL_TIMEOUT_S")))
    return p


def loop_pool() -> ConnectionPool | None:
    """The running loop's pool if one was made (the drain closes it), else ``None``."""
    return loop_pools.get(asyncio.get_running_loop())


def release_after_s() -> float:
    """How long a connection whose round waits for the person must stay idle before it is
    released, seconds: twice ``MRTRWEB["TASK_POLL_MAX_S"]`` plus one (a task's ``tasks/get`` polls
    are activity, so a connection another operation of the person polls a task on is never idle
    that long), and never less than 5 s (an answer given at once -- a headless client -- finds the
    session still open)."""
    return max(5.0, 2 * float(conf.get("TASK_POLL_MAX_S")) + 1.0)


def release_while_waiting(user_id: Any, key: str, connection: Any) -> bool:
    """A round of ``connection`` (the pooled one of ``user_id`` under ``key``) now waits for the
    person: close the connection once idle :func:`release_after_s` seconds, if it speaks a
    :data:`STATELESS_VERSIONS` protocol (:meth:`mrtrweb.mcp.ConnectionPool.release` says when it
    stays). Returns whether a release was scheduled; never raises."""
    try:
        return pool().release(str(user_id), key, connection, after_s=release_after_s(), stateless=STATELESS_VERSIONS)
    except Exception:  # noqa: BLE001 -- a kept session costs memory, never correctness
        return False


def declared(server: McpServer) -> tuple[frozenset[str], str]:
    """The optional client capabilities to declare to ``server`` (those a tenant admin allowed
    for it: the deprecated sampling and roots, and ``"apps"`` when MCP Apps are on for it,
    ``McpServer.apps_enabled``), and the pool key suffix of connections declaring them ("" for
    none; pages, the headless client and operations share the one of :func:`server_key`)."""
    names = {"sampling/createMessage": "sampling", "roots/list": "roots"}
    declare = frozenset(names[m] for m in server.allowed_deprecated() if m in names)
    if getattr(server, "apps_enabled", False):
        declare |= {"apps"}
    return declare, ("#" + "+".join(sorted(declare)) if declare else "")


def server_key(server: McpServer) -> str:
    """The pool's server key of the connections to ``server`` that pages, the headless client and
    operations share: ``"<pk>"``, plus :func:`declared`'s suffix (``"7#roots+sampling"``)."""
    return f"{server.pk}{declared(server)[1]}"


def _listing_pusher(user_id: Any, server_id: int):
    """The ``on_list_changed`` of a connection of ``user_id`` to ``server_id``: a push to that
    user's browser connections (see the module doc). Never raises (:func:`mrtrweb.runtime.push.group_send`)."""

    async def changed(kind: str) -> None:
        from ..runtime import push
        from ..runtime.push import user_group

        await push.group_send(user_group(user_id), {"type": LISTING_PUSH, "server_id": server_id, "kind": kind},
                              what="listing change")

    return changed


def kept_connection(user: Any, server: McpServer) -> Any:
    """The pooled connection of ``user`` to ``server`` that :func:`connection_for` would hand out now
    without replacing it (same URL, capabilities, credentials' configuration, protocol setting and
    URL policy), or None (sync: no wait, nothing opened)."""
    from ..authz import service as authz

    return pool().matching_connection(
        str(user.pk), server_key(server), server.url, declare=declared(server)[0],
        auth_key=authz.auth_key(server, user), protocol=server.protocol,
        url_policy=conf.server_url_policy() if getattr(server, "url_policy", False) else None)


async def connection_for(user: Any, server: McpServer, *, key: str | None = None,
                         declare: frozenset[str] | None = None) -> Any:
    """The pooled connection of ``user`` to ``server``, with the credentials of the server's auth
    mode for that user (:func:`mrtrweb.authz.service.auth_for`; the tenant is the server's), the
    server's ``protocol`` setting and the capabilities of :func:`declared`. A ``roots/list`` the
    server sends outside a call is answered by :func:`mrtrweb.servers.session_roots.configured_roots`.

    Args:
        key: the pool's server key (default :func:`server_key`; an operation's own connection to a
            2025-11-25 server gets a key of its own).
        declare: the deprecated capabilities to declare (default: :func:`declared`'s).

    A server added under the deployer's URL policy (``server.url_policy``) is connected under
    :func:`mrtrweb.conf.server_url_policy`: checked again at each connection and pinned to the
    checked address (:class:`mrtrweb.mcp.url_policy.UrlPolicy`); a server the superuser added is not.

    A connection built with other credentials, capabilities, protocol or URL policy (the server's
    settings changed) is replaced.

    Raises:
        McpCallError: as :meth:`ConnectionPool.get` (``authorization_required`` when the server
            answers 401 to the connect; ``transport_error`` when the server does not speak the
            protocol version it is set to, or, ``reason="policy"``, the URL policy refuses it now).
    """
    from ..authz import service as authz

    if declare is None:
        declare = declared(server)[0]
    auth = None
    if server.auth_mode != McpServer.AuthMode.NONE:
        auth = await authz.auth_for(server=server, user=user, tenant=server.tenant_id)
    return await pool().get(str(user.pk), key if key is not None else server_key(server), server.url,
                            declare=declare, auth=auth, auth_key=authz.auth_key(server, user),
                            outbound=authz.outbound_policy(server), protocol=server.protocol,
                            on_list_changed=_listing_pusher(user.pk, server.pk),
                            session_roots=configured_roots(server),
                            url_policy=conf.server_url_policy() if getattr(server, "url_policy", False) else None)
