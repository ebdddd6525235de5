"""An operation: one call a person started, with its rounds (:mod:`mrtrweb.operations` drives it)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from ..text import display
from .servers import McpServer
from .tenancy import Tenant


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

    class Initiator(models.TextChoices):
        """Who made the call (the brief: every outbound call has one; all go through the same path)."""
        PERSON = "person", _("Person")
        APP = "app", _("MCP App")
        MODEL = "model", _("Model")

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
    #: the tool was destructive by its listing's annotations when the person started it
    #: (:func:`mrtrweb.catalog.is_destructive`): its call page and every card of it say so
    destructive = models.BooleanField(default=False, editable=False)
    #: the tool's ``outputSchema`` as listed when the person started it (at most
    #: MAX_OUTPUT_SCHEMA_BYTES of JSON, else None): its structuredContent is checked against it
    output_schema = models.JSONField(null=True, blank=True, editable=False)
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
    #: the server's log messages during the operation's calls (issue 28, mrtrweb.operations.serverlog): the
    #: last KEPT_LINES ``[level, logger, data]``, newest last, already bounded and made visible; shown escaped
    server_log = models.JSONField(default=list, blank=True, editable=False)
    #: who made the call: the person (``user``) themselves, an MCP App on the person's page
    #: (issue 31) or a model whose proposal the person approved (issue 32). ``user`` is always
    #: the person on whose behalf it runs (the page's person, the approving person).
    initiator = models.CharField(max_length=16, choices=Initiator.choices, default=Initiator.PERSON,
                                 editable=False)
    #: what names the initiator, never a secret (:func:`mrtrweb.operations.initiators.detail`):
    #: for an app ``{"app_of": <operation id>, "tool": <the app's tool>, "app_digest": "sha256:..."}``,
    #: for a model ``{"conversation": <id>, "proposal": <id>, "provider": <name>, "model": <name>}``;
    #: string values only, at most 8 keys of 200 characters. Empty for a person.
    initiator_detail = models.JSONField(default=dict, blank=True, editable=False)
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
