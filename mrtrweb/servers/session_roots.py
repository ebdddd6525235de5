"""The roots a server gets when it asks ``roots/list`` outside any call (issue 15 item 2).

A 2025-11-25 server may ask for roots on the standalone stream (the reference "everything" server
350 ms after ``initialized``, the filesystem server on ``initialized``, the Python SDK's
``list_roots()`` always): no operation asked, so there is no round and no card. Where a tenant
admin allowed roots for the server (``McpServer.allow_roots``; the connection then declared
``roots``: :func:`mrtrweb.servers.connections.declared`), the answer is exactly the server's configured
roots, the list a consent card shows (:func:`mrtrweb.consent.sampling.roots_answer`); otherwise an error
(:data:`mrtrweb.mcp.server_requests.ROOTS_NOT_ALLOWED`). Nothing is read from or opened on disk:
the roots are the row's configuration.

The server's row is read when the server asks (not when the connection opened), so a change of
the allowance or of the roots counts at once on a pooled connection. Each answer is logged with
the server's origin, the number of roots and their digest (the one the card shows), never the
roots themselves. No audit record: there is no operation to attach one to.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
from django.db import DatabaseError

from ..mcp.server_requests import ROOTS_NOT_ALLOWED, RootsProvider
from ..runtime.outage import LogLimiter

__all__ = ["LOG_EVERY_S", "configured_roots"]

logger = logging.getLogger("mrtrweb.session_roots")

#: at most one "answered" line per server every this many seconds
LOG_EVERY_S = 10.0


def configured_roots(server: Any) -> RootsProvider:
    """The :data:`~mrtrweb.mcp.server_requests.RootsProvider` of ``server`` (an ``McpServer``).

    The provider returns ``{"roots": [...]}`` (the row's roots, as :func:`~mrtrweb.consent.sampling.roots_answer`
    gives them) while ``allow_roots`` is on; an ``ErrorData`` ``-32600`` "roots/list refused by the
    client: roots are not allowed for this server" once it is off or the row is gone; ``-32603`` when
    the database does not answer (logged). It never raises.
    """
    server_id, origin = server.pk, server.origin
    log = LogLimiter(logger, LOG_EVERY_S)  # one provider per connection: a flood is one connection's

    async def roots() -> dict[str, Any] | types.ErrorData:
        from ..gate import digest
        from ..models import McpServer
        from ..consent.sampling import roots_answer

        try:
            row = await McpServer.objects.filter(pk=server_id).afirst()
        except DatabaseError as exc:
            logger.warning("roots/list from %s outside a call: the server's roots could not be read (%s)", origin,
                           exc.__class__.__name__)
            return types.ErrorData(code=types.INTERNAL_ERROR, message="roots/list: the client could not read its roots")
        if row is None or not row.allow_roots:
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"roots/list refused by the client: "
                                                                        f"{ROOTS_NOT_ALLOWED}")
        answer = roots_answer(row)
        log.info("answered", "roots/list from %s outside a call: answered with the %d configured root(s) "
                  "(%s)", origin, len(answer["roots"]), digest(answer))
        return answer

    return roots
