"""Tenants, their MCP servers, operations and the (minimal, append-only) audit trail."""

from __future__ import annotations

import urllib.parse
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .text import display
from .mcp import origin_of


class Tenant(models.Model):
    """An organisation whose members share configured MCP servers."""

    name = models.CharField(_("name"), max_length=120, unique=True)
    slug = models.SlugField(_("slug"), max_length=64, unique=True)
    #: the embedding portal's stable id of the organisation this tenant mirrors (set by the tenant
    #: resolver hook, :mod:`mrtrweb.tenancy`): its name and memberships then follow the portal.
    #: None: a tenant managed by hand here.
    external_key = models.CharField(
        _("portal organisation key"), max_length=200, unique=True, null=True, blank=True, default=None,
        help_text=_("Set by the portal's tenant resolver: this tenant's name and members follow that "
                    "organisation (members added here by hand are removed when the portal is next asked). "
                    "Empty for a tenant managed here."))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def managed(self) -> bool:
        """Whether the portal's tenant resolver manages this tenant (its name and memberships)."""
        return self.external_key is not None


class Membership(models.Model):
    """A user's membership of a tenant, with a role."""

    class Role(models.TextChoices):
        MEMBER = "member", _("Member")
        ADMIN = "admin", _("Tenant admin")

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mrtr_memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="mrtrweb_unique_membership")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


def validate_server_url(url: str) -> None:
    try:
        origin_of(url)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc
    if urllib.parse.urlsplit(url).username:
        raise ValidationError("the URL must not carry credentials")


def validate_roots(value: object) -> None:
    """The configured roots of a server: a list of ``{"uri": "file:///...", "name"?: str}``."""
    from .gate.shapes import valid_list_roots_result

    if not isinstance(value, list):
        raise ValidationError(_("Roots must be a list of {\"uri\": \"file:///...\", \"name\": \"...\"} objects."))
    for root in value:
        if not isinstance(root, dict) or set(root) - {"uri", "name"}:
            raise ValidationError(_("Each root must be an object with a \"uri\" and an optional \"name\"."))
        if not valid_list_roots_result({"roots": [root]}):
            raise ValidationError(_("Root %(uri)s is not a file:// URI with a path (or its name is not text)."),
                                  params={"uri": repr(root.get("uri"))[:200]})


class McpServer(models.Model):
    """An MCP server (Streamable HTTP endpoint) configured for one tenant by an admin.

    The *verified origin* is derived from the URL; results are accepted only from it.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="servers")
    name = models.CharField(_("display name"), max_length=120)
    url = models.URLField(_("Streamable HTTP URL"), max_length=500, validators=[validate_server_url])
    enabled = models.BooleanField(default=True)
    allow_sampling = models.BooleanField(
        _("allow sampling (deprecated)"), default=False,
        help_text=_("Let this server ask for sampling/createMessage in its rounds; each request is shown to the "
                    "person and answered only with their explicit approval."))
    allow_roots = models.BooleanField(
        _("allow roots (deprecated)"), default=False,
        help_text=_("Let this server ask for roots/list. Asked during a call, the person sees the roots below on "
                    "the card before they are sent; asked for the session (e.g. right after connecting), they "
                    "are sent at once."))
    class AuthMode(models.TextChoices):
        NONE = "none", _("None")
        TENANT = "tenant", _("Tenant credentials (a bearer token or headers, the same for every member)")
        OAUTH_USER = "oauth_user", _("OAuth per user (each person connects their own account)")
        OAUTH_CLIENT = "oauth_client", _("OAuth client credentials (a machine identity)")

    auth_mode = models.CharField(_("authorization"), max_length=16, choices=AuthMode.choices, default=AuthMode.NONE)
    #: sealed JSON (mrtrweb.authz.crypto), by mode: tenant: {"bearer": str} or {"headers": {name: value}};
    #: oauth_user / oauth_client: {"client_secret": str} when an admin pre-registered one. Write-only.
    auth_secret_sealed = models.TextField(blank=True, editable=False)
    oauth_client_id = models.CharField(
        _("OAuth client id"), max_length=500, blank=True,
        help_text=_("Pre-registered at the authorization server (leave empty to use the Client ID Metadata "
                    "Document or Dynamic Client Registration)."))
    oauth_issuer = models.CharField(
        _("Authorization server (issuer)"), max_length=500, blank=True,
        help_text=_("The issuer identifier of the authorization server that issued the client id and secret "
                    "(e.g. https://auth.example.com). The secret is only ever sent to that authorization server, "
                    "whatever the MCP server names."))
    oauth_scope = models.CharField(
        _("OAuth scope"), max_length=1000, blank=True,
        help_text=_("Space-separated scopes to ask for (empty: what the server asks for, else what it advertises)."))
    #: digest of the sealed secret's content (changes when an admin replaces it; never the secret)
    auth_secret_digest = models.CharField(max_length=80, blank=True, editable=False)
    class Protocol(models.TextChoices):
        AUTO = "auto", _("Automatic (2026-07-28 when the server offers it, else 2025-11-25)")
        MODERN = "2026-07-28", _("2026-07-28 only (Multi Round-Trip Requests)")
        LEGACY = "2025-11-25", _("2025-11-25 (the initialize handshake; server requests during a call)")

    #: the protocol spoken to this server (issue 15): "auto" = ``server/discover``, falling back to
    #: ``initialize``; "2026-07-28" = that version only; "2025-11-25" = the handshake only
    protocol = models.CharField(
        _("protocol"), max_length=16, choices=Protocol.choices, default=Protocol.AUTO,
        help_text=_("Which MCP protocol version to speak to this server. Keep Automatic unless the server "
                    "misbehaves on one version (e.g. it refuses elicitation on 2026-07-28)."))
    roots = models.JSONField(
        _("roots"), default=list, blank=True, validators=[validate_roots],
        help_text=_('The roots answered to roots/list: a JSON list of {"uri": "file:///...", "name": "..."}.'))
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__name", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="mrtrweb_unique_server_name")]
        verbose_name = _("MCP server")

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant})"

    @property
    def origin(self) -> str:
        return origin_of(self.url)

    def config_digest(self) -> str:
        """``sha256:`` of what a consent card shows and a retry depends on (name, URL, enabled, the
        deprecated-request allowances and the roots): an answer is denied when it changed since the
        round arrived. A pinned protocol version counts too."""
        from .gate import digest

        return digest({"name": self.name, "url": self.url, "enabled": self.enabled,
                       "allow_sampling": self.allow_sampling, "allow_roots": self.allow_roots,
                       "roots": self.roots, "auth_mode": self.auth_mode,
                       "oauth_client_id": self.oauth_client_id, "oauth_issuer": self.oauth_issuer,
                       "oauth_scope": self.oauth_scope,
                       "auth_secret": self.auth_secret_digest,
                       # only when pinned: digests of servers left on "auto" stay what they were
                       **({"protocol": self.protocol} if self.protocol != self.Protocol.AUTO else {})})

    def allowed_deprecated(self) -> frozenset[str]:
        """The deprecated client requests this server may ask for (none unless an admin allowed them)."""
        return frozenset(m for m, on in (("sampling/createMessage", self.allow_sampling),
                                         ("roots/list", self.allow_roots)) if on)


class Operation(models.Model):
    """One ``tools/call`` / ``prompts/get`` / ``resources/read`` a user started, with its rounds.

    The live binding (rounds, ``requestState``) is not here: it is in the binding store.
    """

    class Status(models.TextChoices):
        RUNNING = "running", _("Running")
        AWAITING_INPUT = "awaiting_input", _("Waiting for your answer")
        COMPLETED = "completed", _("Completed")
        FAILED = "failed", _("Failed")
        INTERRUPTED = "interrupted", _("Interrupted")
        DENIED = "denied", _("Denied")
        EXPIRED = "expired", _("Expired")

    TERMINAL = (Status.COMPLETED, Status.FAILED, Status.INTERRUPTED, Status.DENIED, Status.EXPIRED)
    #: the statuses of an operation that has not ended
    LIVE = (Status.RUNNING, Status.AWAITING_INPUT)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="operations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mrtr_operations")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="operations")
    method = models.CharField(max_length=32)
    name = models.CharField(max_length=500, help_text=_("tool or prompt name, or resource URI"))
    params = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    request_id = models.CharField(max_length=64)
    latest_request_id = models.CharField(max_length=64)
    rounds = models.PositiveIntegerField(default=0)
    #: the worker (mrtrweb.runtime.workers.WORKER_ID) driving the call or holding a legacy server's call
    #: open, only while it does: empty while an MRTR round waits for the person and once it ended
    worker = models.CharField(max_length=120, blank=True,
                              help_text=_("the worker driving the call or holding it open, while it does"))
    #: the operation that ran this one again ("Run again" / "Connect and run again"), claimed
    #: atomically before it starts: one run again per operation, however often it is submitted
    rerun_as = models.UUIDField(null=True, blank=True, editable=False)
    #: who asked to stop the call in flight (a key of operations.messages.STOPPED_BY), durable
    #: beside the cache's fast stop request: a Redis restarted empty after the click loses nothing
    stop_requested_by = models.CharField(max_length=32, blank=True, default="", editable=False)
    result = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    #: the authorization identity the original request went out with (digests only, see
    #: mrtrweb.authz.identity): a retry goes out only while it is unchanged
    auth_mode = models.CharField(max_length=16, blank=True)
    auth_digest = models.CharField(max_length=80, blank=True)
    auth_identity = models.CharField(max_length=80, blank=True)
    #: while a round waits for the person: when it expires (the gate's round lifetime); every
    #: worker's sweep ends the operation ``expired`` after it (:mod:`mrtrweb.operations.expiry`)
    round_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: a task-augmented call (mrtrweb.operations.tasks): the server's task id (server text, at
    #: most 256 characters, sent back on tasks/get, tasks/update, tasks/cancel; never shown), its
    #: last status and status message (bounded; shown escaped)
    task_id = models.CharField(max_length=256, blank=True, editable=False)
    task_status = models.CharField(max_length=20, blank=True, editable=False)
    task_message = models.CharField(max_length=200, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["user", "status"]), models.Index(fields=["status", "round_expires_at"]),
            # the reaper's query (mrtrweb.runtime.workers): operations that have not ended and name a worker
            models.Index(fields=["worker"], name="mrtrweb_op_live_worker",
                         condition=models.Q(status__in=("running", "awaiting_input")) & ~models.Q(worker="")),
        ]

    def __str__(self) -> str:
        return f"{self.method} {display.shown(self.name)} ({self.status})"  # the name is server text

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL


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


from .authz.models import OAuthClientRegistration, OAuthConnection, PendingAuthorization  # noqa: E402,F401


# --------------------------------------------------------------------------- durability (issue 14)
# What a live round needs survives a restart of the cache (Redis without persistence): the gate's
# binding records, its request-id index and its single-use claims live in the database
# (``MRTRWEB["BINDING_STORE"] = "database"``, :mod:`mrtrweb.bindings.database`), and so do the
# workers' leases (:mod:`mrtrweb.runtime.workers`) and the answers handed to a worker holding a legacy
# server's call (:mod:`mrtrweb.operations`). Rows past ``expires_at`` count as absent and are swept.


class LiveBinding(models.Model):
    """One operation's binding record (:class:`mrtrweb.gate.BindingStore` ``save``/``load``).

    ``record`` is the gate's JSON record sealed (:mod:`mrtrweb.authz.crypto`: Fernet, authenticated)
    together with a digest of its tenant, so a row moved to another tenant or altered reads as
    absent: it holds the operation's arguments and a round's ``requestState``, never readable at
    rest (re-sealed by ``mrtr_rotate_secrets``)."""

    tenant = models.CharField(max_length=64)
    operation_id = models.CharField(max_length=64)
    record = models.TextField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "operation_id"], name="mrtrweb_livebinding_once")]


class BindingIndexEntry(models.Model):
    """``(tenant, user, request-id key) -> operation`` of the gate's index; ``key_digest`` is a
    SHA-256 of user and request-id key (a request id is server-visible but long and arbitrary)."""

    tenant = models.CharField(max_length=64)
    key_digest = models.CharField(max_length=64)
    operation_id = models.CharField(max_length=64)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "key_digest"], name="mrtrweb_bindingindex_once")]


class BindingClaim(models.Model):
    """A single-use token of the gate (``claim``): the unique constraint makes exactly one insert
    win across workers; ``token_digest`` is a SHA-256 of the token. Also the settle key of a legacy
    round (see :mod:`mrtrweb.operations`)."""

    tenant = models.CharField(max_length=64)
    token_digest = models.CharField(max_length=64)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "token_digest"], name="mrtrweb_bindingclaim_once")]


class LegacyAnswer(models.Model):
    """The validated response to a legacy (2025-11-25) server's request, handed by the worker that
    took the person's answer to the worker holding the server's call; taken (deleted) once.
    ``payload`` is sealed like :class:`LiveBinding.record`, with its operation and round inside
    (:mod:`mrtrweb.runtime.handover`)."""

    operation_id = models.UUIDField()
    round_number = models.PositiveIntegerField()
    payload = models.TextField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["operation_id", "round_number"], name="mrtrweb_legacyanswer_once")]


class WorkerLease(models.Model):
    """A worker process's lease (:mod:`mrtrweb.runtime.workers`): written before it drives any operation,
    renewed every ``HEARTBEAT_S`` with the database's clock, deleted when it exits after draining.
    A worker is judged dead only on evidence: its lease present and not renewed for three periods,
    or absent although an operation names it."""

    worker_id = models.CharField(max_length=120, primary_key=True)
    host = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)
    draining = models.BooleanField(default=False)
