"""A model in the loop (issue 32, :mod:`mrtrweb.chat` drives it): a tenant's choice of model, its
policy per server and tool, a person's conversations, their messages and the model's proposals."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .operations import Operation
from .servers import McpServer
from .tenancy import Tenant


class TenantModel(models.Model):
    """The provider and model a tenant uses (chosen by a tenant admin among the deployer's
    ``MODEL_PROVIDERS``), and its API key sealed at rest (:func:`mrtrweb.authz.crypto.seal`;
    ``api_key_digest``: a keyed digest telling that it changed, never the key)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="model_choice")
    provider = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=200, blank=True)
    api_key_sealed = models.TextField(blank=True, editable=False)
    api_key_digest = models.CharField(max_length=80, blank=True, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)


class ToolPolicy(models.Model):
    """A tenant's rule for a server's tool (``tool`` empty: the server's default): ask every time
    (the default when there is no row), approve read-only tools without asking, or never allow."""

    class Rule(models.TextChoices):
        ASK = "ask", _("Ask every time")
        READ_ONLY = "read_only", _("Approve read-only calls without asking")
        NEVER = "never", _("Never allow")

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tool_policies")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tool_policies")
    tool = models.CharField(max_length=500, blank=True)
    rule = models.CharField(max_length=16, choices=Rule.choices, default=Rule.ASK)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "tool"], name="mrtrweb_unique_tool_policy")]


class Conversation(models.Model):
    """A person's conversation with the tenant's model. ``servers``: the ids of the servers it may
    use (None: all of the person's); ``tools_off``: ``{"<server id>": [tool, ...]}`` left out.
    ``state``: ``idle``, ``thinking`` (a model step runs, since ``step_started_at``), ``waiting``
    (proposals wait for the person or their calls run), ``failed`` (the last step failed: ``error_code``).
    ``worker``: the worker that runs its step (:data:`mrtrweb.runtime.workers.WORKER_ID`, its lease written
    first; "" when none could be named): a step whose worker is judged dead is interrupted."""

    class State(models.TextChoices):
        IDLE = "idle", _("Idle")
        THINKING = "thinking", _("The model is replying")
        WAITING = "waiting", _("Waiting for your decision")
        FAILED = "failed", _("The last step failed")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="conversations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mrtr_conversations")
    title = models.CharField(max_length=200, default="New conversation")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)
    servers = models.JSONField(null=True, blank=True, default=None)
    tools_off = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.IDLE)
    step_started_at = models.DateTimeField(null=True, blank=True)
    steps = models.PositiveIntegerField(default=0)  #: model steps of the current turn
    error_code = models.CharField(max_length=40, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    worker = models.CharField(max_length=120, blank=True, default="")

    class Meta:
        ordering = ["-updated_at"]


class ChatMessage(models.Model):
    """One message of a conversation, in order (``seq``). ``role``: ``user``, ``assistant`` (with
    ``tool_calls`` as the model wrote them, and ``offered``: the namespaced tool names it was offered,
    name -> ``[server id, tool name]``), ``tool`` (a call's final result as given to the model, or a
    refusal; ``tool_call_id``, ``server_id``), ``notice`` (what the product said: never sent)."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16)
    text = models.TextField(blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    offered = models.JSONField(default=dict, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    server_id = models.IntegerField(null=True, blank=True)
    provider = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["conversation_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["conversation", "seq"], name="mrtrweb_unique_chat_seq")]


class Proposal(models.Model):
    """A call the model proposed (one tool call of an assistant message), and what became of it.

    ``status``: ``pending`` (the person decides), ``approved`` / ``edited`` (an operation started:
    ``operation``), ``auto`` (approved by the tenant's read-only policy), ``denied`` (by the person),
    ``refused`` (by the product: the policy says never, an unknown or unusable tool, too many at once,
    malformed arguments; ``refusal`` says which), ``answered`` (its result or refusal went to the model).
    ``sources``: the servers whose data the model had read in this conversation (``[[id, name], ...]``).
    """

    class Status(models.TextChoices):
        PENDING = "pending", _("Waiting for you")
        APPROVED = "approved", _("Approved")
        EDITED = "edited", _("Approved with changes")
        AUTO = "auto", _("Approved by the tenant's policy")
        DENIED = "denied", _("Denied")
        REFUSED = "refused", _("Refused")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="proposals")
    message = models.ForeignKey(ChatMessage, on_delete=models.CASCADE, related_name="proposals")
    call_id = models.CharField(max_length=200)
    position = models.PositiveIntegerField(default=0)
    server = models.ForeignKey(McpServer, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    tool = models.CharField(max_length=500, blank=True)
    called_as = models.CharField(max_length=300, blank=True)  #: the name the model gave
    arguments = models.JSONField(null=True, blank=True)
    arguments_digest = models.CharField(max_length=80, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    destructive = models.BooleanField(default=False)
    sources = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    refusal = models.CharField(max_length=40, blank=True)
    operation = models.ForeignKey(Operation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    answered = models.BooleanField(default=False)  #: its result or refusal was given to the model
    #: the person's answered values in its rounds, as ``[length, keyed digest]`` (mrtrweb.chat.withheld)
    withheld = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "position"]


class AppOffer(models.Model):
    """What an MCP App on the page of a model's call asks to put into that call's conversation
    (``ui/message``: ``kind`` ``message``; ``ui/update-model-context``: ``context``), waiting for the
    person (``status`` ``pending``, then ``accepted`` or ``discarded``). ``text``: the app's text,
    shown as text; given to the model only once accepted, marked as from that app."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Waiting for you")
        ACCEPTED = "accepted", _("Added")
        DISCARDED = "discarded", _("Discarded")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="app_offers")
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16)
    text = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
