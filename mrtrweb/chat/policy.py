"""The tenant's policy per server and tool (issue 32, item 3), and the cross-server rule.

A rule (``ToolPolicy.Rule``): ``ask`` (every time; the default), ``read_only`` (a call of a tool the
server lists with ``readOnlyHint: true`` is approved without asking), ``never`` (the tool is not
offered; a call of it is refused). A rule for the tool wins over the server's (``tool`` empty).

Cross-server rule: a call proposed after the model read another server's result in this conversation is
asked even where ``read_only`` would approve it (a server cannot steer the model into another
server silently). The annotations are the server's claims: they only ever decide *not to ask*
for a read-only tool the tenant said may pass, never to skip a refusal.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..catalog import tool_hints
from ..models import ToolPolicy

ASK, READ_ONLY, NEVER = ToolPolicy.Rule.ASK.value, ToolPolicy.Rule.READ_ONLY.value, ToolPolicy.Rule.NEVER.value


def rules_of(tenant_id: Any, server_ids: Iterable[int]) -> dict[tuple[int, str], str]:
    """Sync: the tenant's rules for these servers: ``(server id, tool or "") -> rule``."""
    return {(r.server_id, r.tool): r.rule
            for r in ToolPolicy.objects.filter(tenant_id=tenant_id, server_id__in=list(server_ids))}


def rule(rules: dict[tuple[int, str], str], server_id: int, tool: str) -> str:
    return rules.get((server_id, tool)) or rules.get((server_id, "")) or ASK


def decide(rules: dict[tuple[int, str], str], server_id: int, tool: str, listed: Any,
           sources: Iterable[int]) -> str:
    """``never``, ``auto`` (approve without asking) or ``ask`` for a proposed call of ``tool`` on
    ``server_id`` (``listed``: the tool as the server lists it), ``sources``: the servers whose
    results the model read in this conversation (:func:`mrtrweb.chat.turns._sources`)."""
    found = rule(rules, server_id, tool)
    if found == NEVER:
        return NEVER
    if found == READ_ONLY and tool_hints(listed).read_only and all(s == server_id for s in sources):
        return "auto"
    return ASK
