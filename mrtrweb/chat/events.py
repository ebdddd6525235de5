"""A model's proposals in the tenant's audit chain (issue 32, item 7): ``proposed``, ``approved``,
``edited``, ``proposal_denied``, ``model_changed`` (a tenant admin's choice of model), and
``tenant_changed`` with ``method`` ``chat/policy`` (the tenant's rules for a server's tools).

Each event has ``operation_id`` = the proposal's id (the operation an approval starts names the
proposal in its ``initiator_detail``, so the two are joined), ``method`` ``chat/proposal``, the
server's id, origin and the tool's name (a name the model made up: only its digest), ``user_digest`` of the person (for ``proposed``: the
conversation's owner), ``initiator`` ``model`` and ``initiator_detail`` (conversation, proposal,
provider, model: ids and names), ``code``: the proposal's ``status`` or refusal, and digests only:
``actions`` ``{"arguments": <sha256 of the arguments>}`` (for ``edited`` also ``"before"``). No
conversation text and no argument value is ever in a row.

Raises (every function): :class:`mrtrweb.audit.events.AuditUnavailable` or a database error.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..audit.events import append_config, keyed_digest
from ..models import AuditEvent, Proposal

METHOD = "chat/proposal"


def _detail(proposal: Proposal, provider: str, model: str) -> dict[str, str]:
    return {"conversation": str(proposal.conversation_id), "proposal": str(proposal.pk), "provider": provider[:200],
            "model": model[:200]}


def _name(proposal: Proposal) -> str:
    """The tool's name as its server lists it; for a name the model made up (no such tool: its own
    text, which may carry the conversation's) only ``unknown tool sha256:<16 hex>``."""
    if proposal.tool:
        return proposal.tool[:500]
    digest = hashlib.sha256(proposal.called_as.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"unknown tool sha256:{digest}"


def _append(event: str, proposal: Proposal, user_id: Any, provider: str, model: str, **values: Any) -> AuditEvent:
    server = proposal.server
    return append_config({
        "tenant_id": proposal.conversation.tenant_id, "operation_id": proposal.pk, "event": event, "method": METHOD,
        "server_id": str(server.pk) if server else "", "server_origin": server.origin if server else "",
        "name": _name(proposal), "user_digest": keyed_digest(f"user:{user_id}"),
        "initiator": "model", "initiator_detail": _detail(proposal, provider, model), **values})


def proposed(proposal: Proposal, provider: str, model: str) -> AuditEvent:
    return _append(AuditEvent.Event.PROPOSED, proposal, proposal.conversation.user_id, provider, model,
                   code=(proposal.refusal or proposal.status)[:64],
                   actions={"arguments": proposal.arguments_digest} if proposal.arguments_digest else {})


def decided(proposal: Proposal, user_id: Any, provider: str, model: str, *, before: str = "") -> AuditEvent:
    """``approved`` (also by the tenant's read-only policy: code ``auto``), ``edited`` (``before``:
    the digest of the arguments the model proposed) or ``proposal_denied``."""
    event = {Proposal.Status.APPROVED: AuditEvent.Event.APPROVED, Proposal.Status.AUTO: AuditEvent.Event.APPROVED,
             Proposal.Status.EDITED: AuditEvent.Event.EDITED}.get(proposal.status, AuditEvent.Event.PROPOSAL_DENIED)
    actions = {"arguments": proposal.arguments_digest}
    if before:
        actions["before"] = before
    return _append(event, proposal, user_id, provider, model, code=str(proposal.status), actions=actions)


def model_changed(tenant_id: Any, user_id: Any, provider: str, model: str, secret: str, key_digest: str) -> AuditEvent:
    """A tenant admin chose ``provider`` / ``model``; ``secret``: ``replaced``, ``removed`` or ``kept``."""
    import uuid

    return append_config({"tenant_id": tenant_id, "operation_id": uuid.uuid4(), "event": AuditEvent.Event.MODEL_CHANGED,
                          "method": "chat/model", "name": f"{provider}/{model}"[:500],
                          "user_digest": keyed_digest(f"user:{user_id}"), "auth_digest": key_digest,
                          "actions": {"provider": provider[:40], "secret": secret}})


def policy_changed(tenant_id: Any, user_id: Any, server: Any, rules: dict[str, str]) -> AuditEvent:
    """A tenant admin set rules for ``server``: ``actions`` tool name (``""``: the server's own rule,
    written ``*``) -> rule."""
    import uuid

    return append_config({"tenant_id": tenant_id, "operation_id": uuid.uuid4(),
                          "event": AuditEvent.Event.TENANT_CHANGED, "method": "chat/policy",
                          "server_id": str(server.pk), "server_origin": server.origin, "name": server.name[:500],
                          "user_digest": keyed_digest(f"user:{user_id}"),
                          "actions": {(tool or "*")[:100]: rule for tool, rule in rules.items()}})
