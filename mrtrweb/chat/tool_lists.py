"""The tools a server lists, for the tenant admin choosing a rule for one of them (issue 32, item
3): the rule is set on a tool the server lists, chosen from a list, not typed -- a typed name the
server does not list would be a rule for nothing, silently.

:func:`listed` lists the server's tools through the admin's own connection
(:func:`mrtrweb.servers.connections.connection_for`, as the server pages do) and keeps the names and
annotations (never descriptions or schemas) in the cache ``MRTRWEB["BINDING_CACHE"]`` for
:data:`LIST_CACHE_S` seconds; a server that cannot be listed is remembered as such for
:data:`FAILED_CACHE_S` seconds, and the page then offers a typed name instead. Tools only an app may
call (``_meta.ui.visibility`` without ``"model"``) are left out: they are never offered to a model.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import conf
from ..catalog import tool_hints
from ..mcpapps import meta as app_meta

logger = logging.getLogger("mrtrweb.chat")

#: seconds a server's listing is kept for the policy form
LIST_CACHE_S = 300
#: seconds a server that could not be listed is remembered as such
FAILED_CACHE_S = 60
#: the most tools kept of one server's listing
MAX_TOOLS = 500


def _cache():
    from django.core.cache import caches

    return caches[conf.get("BINDING_CACHE")]


def _key(server_id: Any) -> str:
    return f"mrtrweb:chat-policy-tools:{server_id}"


async def listed(user: Any, server: Any) -> list[dict[str, Any]] | None:
    """The tools ``server`` lists to ``user`` as ``[{"name", "read_only", "destructive"}]`` sorted by
    name, or None when it cannot be listed now (cached, see the module doc). Never raises."""
    from ..catalog import is_destructive
    from ..mcp import McpCallError
    from ..servers.connections import connection_for

    key = _key(server.pk)
    try:
        hit = await _cache().aget(key)
    except Exception:  # noqa: BLE001 -- the cache is down: listed afresh
        hit = None
    if isinstance(hit, dict):
        return hit.get("tools")
    tools: list[dict[str, Any]] | None
    try:
        raw = await (await connection_for(user, server)).list_tools()
        tools = sorted(({"name": t["name"], "read_only": bool(tool_hints(t).read_only),
                         "destructive": bool(is_destructive(t))}
                        for t in raw if isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"]
                        and not app_meta.app_only(t)), key=lambda t: t["name"])[:MAX_TOOLS]
    except McpCallError as exc:
        logger.info("chat: the tools of server %s could not be listed for the policy form (%s)", server.pk, exc.code)
        tools = None
    try:
        await _cache().aset(key, {"tools": tools}, LIST_CACHE_S if tools is not None else FAILED_CACHE_S)
    except Exception:  # noqa: BLE001 -- not kept: listed again next time
        pass
    return tools


async def forget(server_id: Any) -> None:
    """Drop the kept listing (the form's "List again")."""
    try:
        await _cache().adelete(_key(server_id))
    except Exception:  # noqa: BLE001
        pass
