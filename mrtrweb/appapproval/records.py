"""The approval records of MCP Apps' HTML (see the package doc).

Shapes: a *digest* is ``"sha256:" + 64 hex``; a *policy* is :class:`mrtrweb.mcpapps.csp.CspPolicy`
(its accepted ``outside_domains`` and its ``refused`` triples); ``permissions`` the names a
resource's ``_meta.ui.permissions`` declared (server text, kept as strings, at most 8 of 40 chars).

Everything here is synchronous (call through ``sync_to_async``). Never raises on what a server
sent; the database's errors and :class:`mrtrweb.audit.events.AuditUnavailable` pass through
(:func:`decide`'s transaction then rolls the decision back with its event).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..audit.events import append_config, keyed_digest
from ..mcpapps.csp import CspPolicy
from ..models import AppApproval, AuditEvent, McpServer, Membership
from ..tenancy import access

logger = logging.getLogger("mrtrweb.apps")

#: pending records kept per server; past it a new document is not recorded (it still does not render)
MAX_PENDING = 50
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
#: the ``method`` of the audit events here (configuration events, as :mod:`mrtrweb.serverconfig.events`)
METHOD = "server/config"


def _permissions(declared: Any) -> list[str]:
    if not isinstance(declared, Mapping):
        return []
    return [str(name)[:40] for name in list(declared)[:8]]


def status_for(server: McpServer, uri: str, digest: str, *, tool: str = "", policy: CspPolicy | None = None,
               permissions: Any = None, size: int = 0) -> str:
    """The decision on the document ``digest`` of ``server``'s app ``uri``: ``"approved"``,
    ``"pending"`` or ``"revoked"``. Seen for the first time: recorded as pending (with ``tool``, the
    policy's domains and refusals, the declared permissions and ``size`` in bytes, for the admin to
    read), unless :data:`MAX_PENDING` are already pending for the server (then ``"pending"``,
    logged, not recorded). A decision is of the HTML *with* what it declared: the same digest now
    declaring other outside domains or permissions (``policy`` given) waits again
    (:func:`_declared_otherwise`)."""
    found = AppApproval.objects.filter(server=server, resource_uri=uri, digest=digest).first()
    if found is not None:
        if policy is not None and (found.domains != list(policy.outside_domains)
                                   or found.permissions != _permissions(permissions)):
            return _declared_otherwise(found, policy, permissions)
        return found.status
    if not DIGEST.match(digest):
        return AppApproval.Status.PENDING
    if AppApproval.objects.filter(server=server, status=AppApproval.Status.PENDING).count() >= MAX_PENDING:
        logger.warning("server %s: %d apps already wait for approval; %s %s not recorded", server.pk, MAX_PENDING,
                       uri[:200], digest)
        return AppApproval.Status.PENDING
    policy = policy or CspPolicy("")
    try:
        with transaction.atomic():
            AppApproval.objects.create(
                server=server, resource_uri=uri[:2000], digest=digest, tool=str(tool)[:200], size=max(0, int(size)),
                domains=list(policy.outside_domains), permissions=_permissions(permissions),
                refused=[[name, value, why] for name, value, why in policy.refused[:20]])
    except IntegrityError:  # another page recorded it first
        return AppApproval.objects.filter(server=server, resource_uri=uri, digest=digest).values_list(
            "status", flat=True).first() or AppApproval.Status.PENDING
    logger.info("server %s: app %s %s waits for approval", server.pk, uri[:200], digest)
    return AppApproval.Status.PENDING


def _declared_otherwise(found: AppApproval, policy: CspPolicy, permissions: Any) -> str:
    """The same HTML now declares other outside domains or permissions than the record holds: what
    was decided (if anything) was not this, so the record waits for the admin again, showing what
    is declared now. An approval taken back so is an ``app_revoked`` event (``code`` ``changed``,
    no person) in the same transaction. Returns ``"pending"``."""
    with transaction.atomic():
        row = AppApproval.objects.select_for_update().filter(pk=found.pk).first()
        if row is None:
            return AppApproval.Status.PENDING
        was = row.status
        row.domains, row.permissions = list(policy.outside_domains), _permissions(permissions)
        row.refused = [[name, value, why] for name, value, why in policy.refused[:20]]
        row.status, row.decided_at, row.decided_by = AppApproval.Status.PENDING, None, None
        row.save(update_fields=["domains", "permissions", "refused", "status", "decided_at", "decided_by"])
        if was == AppApproval.Status.APPROVED:
            server = row.server
            append_config({"operation_id": uuid.uuid4(), "event": AuditEvent.Event.APP_REVOKED, "method": METHOD,
                           "user_digest": "",  # no person: the server's declaration changed
                           "tenant_id": server.tenant_id, "server_id": str(server.pk), "server_origin": server.origin,
                           "name": row.resource_uri[:500], "code": "changed", "config_digest": server.config_digest(),
                           "actions": {"digest": row.digest, "tool": row.tool[:200],
                                       "domains": " ".join(row.domains)[:200]}})
    logger.warning("server %s: app %s %s now declares other domains or permissions; waits for approval again",
                   found.server_id, found.resource_uri[:200], found.digest)
    return AppApproval.Status.PENDING


def manageable_server(user: Any, server_id: Any) -> McpServer | None:
    """``server_id`` if ``user`` may approve its apps (a tenant admin of its tenant; for a personal
    server its owner alone, as its settings page), else None."""
    server = McpServer.objects.select_related("tenant").filter(pk=server_id).first()
    if server is None or access.denial(user.pk, server.tenant_id):
        return None
    if server.owner_id is not None:
        return server if server.owner_id == user.pk else None
    admin = Membership.objects.filter(tenant_id=server.tenant_id, user=user, role=Membership.Role.ADMIN).exists()
    return server if admin else None


def decide(server: McpServer, approval_id: Any, user_id: Any, approve: bool) -> AppApproval | None:
    """Approve (``approve``) or revoke the record ``approval_id`` of ``server``, by ``user_id``, and
    append its ``app_approved`` / ``app_revoked`` event in the same transaction (the ``name`` is the
    app's URI, ``actions`` ``{"digest": <digest>, "tool": <tool>}``). None: no such record of this
    server. Deciding what is already so changes nothing and appends nothing."""
    wanted = AppApproval.Status.APPROVED if approve else AppApproval.Status.REVOKED
    with transaction.atomic():
        approval = AppApproval.objects.select_for_update().filter(pk=approval_id, server=server).first()
        if approval is None:
            return None
        if approval.status == wanted:
            return approval
        approval.status = wanted
        approval.decided_at = timezone.now()
        approval.decided_by_id = user_id
        approval.save(update_fields=["status", "decided_at", "decided_by"])
        event = AuditEvent.Event.APP_APPROVED if approve else AuditEvent.Event.APP_REVOKED
        append_config({"operation_id": uuid.uuid4(), "event": event, "method": METHOD,
                       "user_digest": keyed_digest(f"user:{user_id}"), "tenant_id": server.tenant_id,
                       "server_id": str(server.pk), "server_origin": server.origin, "name": approval.resource_uri[:500],
                       "code": "personal" if server.owner_id else "", "config_digest": server.config_digest(),
                       "actions": {"digest": approval.digest, "tool": approval.tool[:200]}})
    logger.info("server %s: app %s %s %s by user %s", server.pk, approval.resource_uri[:200], approval.digest,
                wanted, user_id)
    return approval
