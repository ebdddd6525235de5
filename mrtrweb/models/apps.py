"""An MCP App's HTML approved (or waiting) by its digest, per server (issue 31, item 1;
:mod:`mrtrweb.appapproval` decides and records)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .servers import McpServer


class AppApproval(models.Model):
    """One app document of a server whose admin requires approval (``McpServer.apps_require_approval``):
    the ``ui://`` ``resource_uri`` and the SHA-256 ``digest`` (``sha256:<hex>``) of its HTML as the
    server sent it, and what a tenant admin decided.

    A row is made ``pending`` the first time a person's page asks to show that exact HTML; it renders
    for members only while ``approved``. A changed HTML has another digest: another row, pending.
    ``tool``, ``domains`` (the outside domains the CSP builder accepted, in order), ``refused``
    (``[[list, value, reason], ...]`` of the declared domains it refused) and ``permissions`` (the
    names the resource declared) are what the admin reads before deciding; server text, shown escaped.
    """

    class Status(models.TextChoices):
        PENDING = "pending", _("waiting for approval")
        APPROVED = "approved", _("approved")
        REVOKED = "revoked", _("revoked")

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="app_approvals")
    resource_uri = models.CharField(max_length=2000)
    digest = models.CharField(max_length=80)
    tool = models.CharField(max_length=200, blank=True)
    size = models.PositiveIntegerField(default=0, help_text="bytes of the HTML (UTF-8)")
    domains = models.JSONField(default=list, blank=True)
    refused = models.JSONField(default=list, blank=True)
    permissions = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    first_seen_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")

    class Meta:
        ordering = ["server_id", "-first_seen_at"]
        constraints = [models.UniqueConstraint(fields=["server", "resource_uri", "digest"],
                                               name="mrtrweb_app_approval_unique")]

    def __str__(self) -> str:
        return f"{self.resource_uri} {self.digest[:19]} ({self.status})"
