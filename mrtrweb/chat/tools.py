"""The tools a conversation offers the model, namespaced per server.

A tool is offered as ``<server>_<id>__<tool>`` (``[a-zA-Z0-9_-]``, at most 64 characters, what
chat-completions endpoints accept): the server's name made plain and its id, so two servers'
``search`` never collide; a tool name with other characters, or too long, gets a digest of its
real name. :class:`Offered` maps each offered name back to ``(server id, tool name)`` -- the
model's name is never trusted beyond that map: a name not in it is an unknown tool.

Never offered: a tool only its app may call (``_meta.ui.visibility`` without ``"model"``,
:func:`mrtrweb.mcpapps.meta.app_only`), a tool the tenant's policy never allows, a tool or server
the person turned off for this conversation, a server of another tenant or another person.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from typing import Any

from asgiref.sync import sync_to_async

from ..mcpapps import meta as app_meta
from ..models import Conversation, McpServer
from ..providers import ToolSpec
from ..tenancy import access
from . import policy

logger = logging.getLogger("mrtrweb.chat")

_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: the longest description given to the model, characters
MAX_DESCRIPTION = 1000
#: the largest inputSchema given to the model (compact JSON, characters); a larger tool is left out
MAX_SCHEMA_CHARS = 16000


def server_prefix(server: McpServer) -> str:
    plain = re.sub(r"[^a-z0-9]+", "_", server.name.lower()).strip("_")[:20] or "server"
    return f"{plain}_{server.pk}"


def offered_name(server: McpServer, tool: str) -> str:
    prefix = server_prefix(server) + "__"
    if _NAME_OK.match(prefix + tool):
        return prefix + tool
    plain = re.sub(r"[^A-Za-z0-9_-]+", "_", tool)[:30]
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{prefix}{plain}_{digest}"[:64]


@dataclasses.dataclass
class Offered:
    """What one model step was offered: ``specs`` for the provider, ``names`` offered name ->
    ``[server id, tool]``, ``tools`` offered name -> the listed tool (annotations, schema)."""

    specs: list[ToolSpec] = dataclasses.field(default_factory=list)
    names: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    tools: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    servers: dict[int, McpServer] = dataclasses.field(default_factory=dict)
    #: tools the tenant's policy never allows, not offered: a call of one is refused as such
    withheld: dict[str, list[Any]] = dataclasses.field(default_factory=dict)


def servers_of(conversation: Conversation) -> list[McpServer]:
    """Sync: the servers the conversation may use: the person's (the tenant's enabled ones and
    their own) in the conversation's tenant, narrowed to ``conversation.servers`` when set."""
    qs = McpServer.objects.filter(access.mine(conversation.user_id), tenant_id=conversation.tenant_id, enabled=True,
                                  tenant__memberships__user_id=conversation.user_id).order_by("name", "pk")
    if conversation.servers is not None:
        ids = [i for i in conversation.servers if isinstance(i, int)]
        qs = qs.filter(pk__in=ids)
    return list(qs)


def all_servers_of(conversation: Conversation) -> list[McpServer]:
    """Sync: every server the person could choose for the conversation."""
    return list(McpServer.objects.filter(access.mine(conversation.user_id), tenant_id=conversation.tenant_id,
                                         enabled=True, tenant__memberships__user_id=conversation.user_id)
                .order_by("name", "pk"))


async def offered(conversation: Conversation, user: Any) -> Offered:
    """The tools offered at this step (a server whose listing fails is left out, logged)."""
    from ..mcp import McpCallError
    from ..servers.connections import connection_for

    out = Offered()
    servers = await sync_to_async(servers_of)(conversation)
    rules = await sync_to_async(policy.rules_of)(conversation.tenant_id, [s.pk for s in servers])
    off = conversation.tools_off if isinstance(conversation.tools_off, dict) else {}
    for server in servers:
        try:
            conn = await connection_for(user, server)
            listed = await conn.list_tools()
        except McpCallError as exc:
            logger.info("chat: tools of server %s not offered (%s)", server.pk, exc.code)
            continue
        out.servers[server.pk] = server
        for tool in listed:
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str) or not name or app_meta.app_only(tool):
                continue
            if name in (off.get(str(server.pk)) or []):
                continue
            if policy.rule(rules, server.pk, name) == policy.NEVER:
                out.withheld[offered_name(server, name)] = [server.pk, name]
                continue
            schema = tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict) else {"type": "object"}
            if len(json.dumps(schema, ensure_ascii=False)) > MAX_SCHEMA_CHARS:
                logger.info("chat: tool of server %s not offered: its inputSchema is too large", server.pk)
                continue
            as_name = offered_name(server, name)
            if as_name in out.names:
                continue
            description = tool.get("description") if isinstance(tool.get("description"), str) else ""
            out.specs.append(ToolSpec(name=as_name, parameters=schema, description=(
                f"[Tool {name!r} of MCP server {server.name!r}] " + description)[:MAX_DESCRIPTION]))
            out.names[as_name] = [server.pk, name]
            out.tools[as_name] = tool
    return out
