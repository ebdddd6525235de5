"""The configuration events of a tenant's audit chain (issue 29, item 6).

Adding, changing, disabling, enabling and removing a server (the tenant's or a personal one),
changing its authorization, and turning personal servers on or off for the tenant are appended to
the tenant's chain (:func:`mrtrweb.audit.events.append_config`), in the transaction of the change
itself (call these inside ``transaction.atomic``: the change and its event commit together, or
neither). Each event has its own fresh ``operation_id`` (it is no operation's), ``method``
``server/config``, the server's id, origin and name, ``user_digest`` of who did it, and:

* ``code``: ``personal`` for a personal server (else empty);
* ``actions``: for ``server_changed`` the names of the fields changed (``{"url": "changed"}``),
  never their values; for ``auth_changed`` ``{"auth_mode": <mode>}`` and ``{"secret": "replaced" |
  "removed" | "kept"}``; for ``tenant_changed`` ``{"allow_personal_servers": "on" | "off"}``;
* ``auth_mode`` / ``auth_digest``: the server's authorization mode and the keyed digest of its
  secret (``auth_secret_digest``), never the secret.

Raises (every function): :class:`mrtrweb.audit.events.AuditUnavailable` or a database error: the
caller's transaction rolls the change back with it.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable

from ..audit.events import append_config, keyed_digest
from ..models import AuditEvent, McpServer, Tenant

METHOD = "server/config"


def _server_values(server: McpServer) -> dict[str, Any]:
    return {"tenant_id": server.tenant_id, "server_id": str(server.pk), "server_origin": server.origin,
            "name": server.name[:500], "code": "personal" if server.owner_id else "",
            "config_digest": server.config_digest(), "auth_mode": server.auth_mode,
            "auth_digest": server.auth_secret_digest or ""}


def _append(event: str, user_id: Any, values: dict[str, Any]) -> AuditEvent:
    return append_config({"operation_id": uuid.uuid4(), "event": event, "method": METHOD,
                          "user_digest": keyed_digest(f"user:{user_id}"), **values})


def server_added(server: McpServer, user_id: Any) -> AuditEvent:
    return _append(AuditEvent.Event.SERVER_ADDED, user_id, _server_values(server))


def server_changed(server: McpServer, user_id: Any, fields: Iterable[str]) -> AuditEvent | None:
    """The names of ``fields`` changed (none: nothing appended, None returned)."""
    names = sorted(set(fields))
    if not names:
        return None
    return _append(AuditEvent.Event.SERVER_CHANGED, user_id,
                   dict(_server_values(server), actions={name: "changed" for name in names}))


def server_enabled(server: McpServer, user_id: Any, enabled: bool) -> AuditEvent:
    kind = AuditEvent.Event.SERVER_ENABLED if enabled else AuditEvent.Event.SERVER_DISABLED
    return _append(kind, user_id, _server_values(server))


def server_removed(server: McpServer, user_id: Any, reason: str = "") -> AuditEvent:
    """Call before the row is deleted (its id is still known). ``reason``: why, when nobody
    removed it by itself (``owner_removed``: its owner's account was deleted)."""
    return _append(AuditEvent.Event.SERVER_REMOVED, user_id, dict(_server_values(server), reason=reason))


#: the ``reason`` of the ``server_removed`` event of a personal server deleted with its owner's account
OWNER_REMOVED = "owner_removed"

#: the fields of an authorization change (:func:`admin_saved`: an ``auth_changed`` event)
AUTH_FIELDS = ("auth_mode", "oauth_client_id", "oauth_issuer", "oauth_scope")


def admin_saved(server: McpServer, user_id: Any, added: bool, changed: Iterable[str], new_secret: Any) -> None:
    """The events of a save in the superuser's Django admin (call in its transaction): added; or
    ``server_enabled`` / ``server_disabled`` when ``enabled`` changed, ``auth_changed`` when the
    authorization did (``new_secret``: the form's, None when the secret was kept), and
    ``server_changed`` naming the other fields of ``changed``."""
    if added:
        server_added(server, user_id)
        return
    names = set(changed)
    if "enabled" in names:
        server_enabled(server, user_id, server.enabled)
    if names & set(AUTH_FIELDS) or new_secret is not None:
        auth_changed(server, user_id, "kept" if new_secret is None else "replaced" if new_secret else "removed")
    server_changed(server, user_id, names - {"enabled", *AUTH_FIELDS} - _SECRET_INPUTS)


#: the write-only inputs of the authorization form (their change is ``auth_changed``, never a name)
_SECRET_INPUTS = {"bearer_token", "headers", "oauth_client_secret", "clear_secret"}


def _owner_deleting(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A user deleted: each of their personal servers goes with them (``on_delete=CASCADE``), a
    ``server_removed`` event of its tenant (``reason`` :data:`OWNER_REMOVED`), in the deletion's
    transaction."""
    for server in McpServer.objects.filter(owner_id=instance.pk):
        server_removed(server, instance.pk, reason=OWNER_REMOVED)


def connect_signals() -> None:
    """Wire :func:`_owner_deleting` (called from ``MrtrwebConfig.ready``)."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import pre_delete

    pre_delete.connect(_owner_deleting, sender=get_user_model(), dispatch_uid="mrtrweb-serverconfig-owner-deleting")


def auth_changed(server: McpServer, user_id: Any, secret: str) -> AuditEvent:
    """``secret``: ``replaced``, ``removed`` or ``kept`` (what happened to the stored secret)."""
    return _append(AuditEvent.Event.AUTH_CHANGED, user_id,
                   dict(_server_values(server), actions={"auth_mode": server.auth_mode, "secret": secret}))


def tenant_changed(tenant: Tenant, user_id: Any, allow_personal_servers: bool) -> AuditEvent:
    return _append(AuditEvent.Event.TENANT_CHANGED, user_id,
                   {"tenant_id": tenant.pk, "name": tenant.name[:500],
                    "actions": {"allow_personal_servers": "on" if allow_personal_servers else "off"}})
