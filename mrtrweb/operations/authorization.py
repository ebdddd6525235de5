"""The authorization identity an operation's requests go out with (issue 13): the digests
recorded on the operation and its audit rows, and whether they changed since the original request
(a retry never goes out under another identity); the scope a 403 ``insufficient_scope`` asked for.
"""

from __future__ import annotations

import logging
from typing import Any

from ..mcp import McpCallError
from ..models import McpServer, Operation

logger = logging.getLogger("mrtrweb.operations")


def current_auth(server: McpServer, user_id: Any, tenant_id: Any) -> dict[str, str]:
    """The authorization identity a request to ``server`` goes out with now, for ``user_id``, as the
    digests an operation and its audit rows record (:func:`mrtrweb.authz.identity.binding_fields`;
    sync)."""
    from ..authz import identity

    return identity.binding_fields(identity.identity_for_sync(server=server, user=user_id, tenant=tenant_id))


async def _authorization_changed(op: Operation) -> dict[str, str] | None:
    """:func:`authorization_changed_sync` from async code (one thread hop)."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(authorization_changed_sync)(op)


def authorization_changed_sync(op: Operation, server: McpServer | None = None) -> dict[str, str] | None:
    """The current authorization digests when they differ from those the operation's original
    request went out with (the person disconnected, connected another account, a tenant credential
    was replaced, the server's auth mode changed), else None. ``op.server`` is re-read first (an
    admin's change made a moment ago counts), unless the caller passes ``server``: the row it read
    in this same thread hop, just now. A refresh keeps them (same token family). Sync."""
    now = current_auth(server if server is not None else McpServer.objects.get(pk=op.server_id), op.user_id,
                       op.tenant_id)
    recorded = {name: getattr(op, name) for name in now}
    return None if now == recorded else now


async def _note_challenge(op: Operation, exc: McpCallError) -> None:
    """Keep the scope an ``insufficient_scope`` challenged with, for the next Connect (SEP-2350)."""
    from ..authz import service as authz

    try:
        await authz.note_challenge(server=op.server, user=op.user, tenant=op.server.tenant_id, scope=exc.scope)
    except Exception:  # noqa: BLE001 - a note for later; the operation fails with its code regardless
        logger.exception("operation %s: the scope challenge could not be noted", op.id)
