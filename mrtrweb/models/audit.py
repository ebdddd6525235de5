"""The append-only, hash-chained audit trail (:mod:`mrtrweb.audit` writes and checks it)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from .tenancy import Tenant


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("audit events are append-only")

    def delete(self):
        raise PermissionError("audit events are append-only")


class AuditEvent(models.Model):
    """One event of a round: append-only, hash-chained per tenant, digests only (never a secret,
    token, ``requestState`` or answer value).

    ``event``: ``received``, ``rejected`` (``code``), ``shown`` (the consent receipt:
    ``display_digest`` of exactly what the person saw), ``submitted`` (``actions`` per key,
    ``retry_id``), and one terminal outcome per operation: ``completed``, ``failed``, ``expired``,
    ``cancelled`` or ``denied`` (``reason``).

    ``sequence``/``prev_hash``/``hash`` chain the events of a tenant: ``hash`` is SHA-256 of
    ``prev_hash`` and the canonical JSON of the event (see :func:`mrtrweb.audit.events.event_hash`).

    ``auth_mode`` / ``auth_digest`` / ``auth_identity``: the server's auth mode, ``sha256:`` of the
    issuer and client id, and the keyed digest of the authorization identity the operation's
    requests went out with (:mod:`mrtrweb.authz.identity`); empty on rows written before issue 13.
    Never a token.
    """

    class Event(models.TextChoices):
        RECEIVED = "received"
        REJECTED = "rejected"
        SHOWN = "shown"
        SUBMITTED = "submitted"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        EXPIRED = "expired"
        DENIED = "denied"
        # a server's configuration (issue 29, :mod:`mrtrweb.serverconfig`): not an operation's
        # events; ``operation_id`` is the action's own id, ``method`` is ``server/config``
        SERVER_ADDED = "server_added"
        SERVER_CHANGED = "server_changed"
        SERVER_DISABLED = "server_disabled"
        SERVER_ENABLED = "server_enabled"
        SERVER_REMOVED = "server_removed"
        AUTH_CHANGED = "auth_changed"
        TENANT_CHANGED = "tenant_changed"
        # an MCP App's HTML approved or revoked by its digest (issue 31, :mod:`mrtrweb.appapproval`)
        APP_APPROVED = "app_approved"
        APP_REVOKED = "app_revoked"
        # an MCP App rendered on the page of the operation (issue 31 item 5, :mod:`mrtrweb.appcalls`):
        # ``name`` its tool, ``display_digest`` the HTML's sha256, ``config_digest`` the CSP's,
        # ``actions`` the resource URI, the CSP's outside domains and the refused count
        APP_RENDERED = "app_rendered"
        # a model's proposal (issue 32, :mod:`mrtrweb.chat.events`): ``operation_id`` is the
        # proposal's id, ``method`` ``chat/proposal``; the operation an approval starts names the
        # proposal in its ``initiator_detail``
        PROPOSED = "proposed"
        APPROVED = "approved"
        EDITED = "edited"
        PROPOSAL_DENIED = "proposal_denied"
        MODEL_CHANGED = "model_changed"

    #: the events of a server's configuration (never of an operation)
    CONFIG = ("server_added", "server_changed", "server_disabled", "server_enabled", "server_removed",
              "auth_changed", "tenant_changed", "app_approved", "app_revoked")

    #: the events of a model's proposals and the tenant's choice of model (never of an operation)
    CHAT = ("proposed", "approved", "edited", "proposal_denied", "model_changed")

    TERMINAL = ("completed", "failed", "cancelled", "expired", "denied")

    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="audit_events")
    sequence = models.PositiveBigIntegerField(default=0)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)
    operation_id = models.UUIDField(db_index=True)
    event = models.CharField(max_length=16, choices=Event.choices)
    code = models.CharField(max_length=64, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    round_number = models.PositiveIntegerField(default=0)
    original_request_id = models.CharField(max_length=64, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    retry_id = models.CharField(max_length=64, blank=True)
    server_id = models.CharField(max_length=32)
    server_origin = models.CharField(max_length=300)
    method = models.CharField(max_length=32)
    name = models.CharField(max_length=500)
    user_digest = models.CharField(max_length=80, db_index=True)
    tenant_digest = models.CharField(max_length=80)
    state_digest = models.CharField(max_length=80, blank=True, db_index=True)
    schema_digests = models.JSONField(default=dict, blank=True)
    display_digest = models.CharField(max_length=80, blank=True)
    config_digest = models.CharField(max_length=80, blank=True)
    actions = models.JSONField(default=dict, blank=True)
    policy_version = models.CharField(max_length=40)
    auth_mode = models.CharField(max_length=16, blank=True)
    auth_digest = models.CharField(max_length=80, blank=True)
    auth_identity = models.CharField(max_length=80, blank=True)
    #: who made the operation's call when not the person themselves: ``app`` or ``model``
    #: (``Operation.initiator``); empty for a person's own call (and on rows written before).
    #: ``initiator_detail``: the operation's ``initiator_detail`` (ids, names, digests; never text
    #: of a conversation nor an argument value). Both hashed when not empty.
    initiator = models.CharField(max_length=16, blank=True, db_index=True)
    initiator_detail = models.JSONField(default=dict, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["tenant_id", "sequence"]
        constraints = [models.UniqueConstraint(fields=["tenant", "sequence"], name="mrtrweb_audit_chain_unique")]

    def __str__(self) -> str:
        return f"{self.event} {self.operation_id} r{self.round_number}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise PermissionError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("audit events are append-only")


class AuditChainHead(models.Model):
    """The last link of a tenant's audit chain (sequence and hash): an append locks this row (the
    database's write lock on SQLite), links its event to it and moves it, in one transaction."""

    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, primary_key=True, related_name="audit_head")
    sequence = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64)


class AuditCheckpoint(models.Model):
    """A signed record of the chain head at a purge: events up to ``sequence`` were removed, and
    the next event must link to ``hash``. ``signature`` is :mod:`django.core.signing` over
    (tenant, sequence, hash)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="audit_checkpoints")
    sequence = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    purged = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    signature = models.TextField()

    class Meta:
        ordering = ["tenant_id", "sequence"]


class AuditOnce(models.Model):
    """The claim of an event an operation has at most once (an append's ``once``: the consent
    receipt of a round and display, a round's ``expired`` outcome). On PostgreSQL the append inserts
    its claim in its own statement (``ON CONFLICT DO NOTHING``) before it locks the chain head and
    appends only when the insert wins: the unique index makes a second inserter wait for the first
    one's transaction and then do nothing, so the check is exact across workers without a lock taken
    by a statement of its own (:class:`mrtrweb.audit.chain.PgAppend`). ``key`` names the ``once``
    fields and their values (:func:`mrtrweb.audit.chain.once_key`). Written with the event, never
    alone; SQLite's append checks under the database's one write lock and writes none."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    operation_id = models.UUIDField()
    event = models.CharField(max_length=16)
    key = models.CharField(max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["operation_id", "event", "key"], name="mrtrweb_auditonce_once")]
