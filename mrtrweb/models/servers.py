"""A tenant's configured MCP servers, and the checks of their URL and roots."""

from __future__ import annotations

import urllib.parse

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from ..mcp import origin_of
from .tenancy import Tenant


def validate_server_url(url: str) -> None:
    try:
        origin_of(url)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc
    if urllib.parse.urlsplit(url).username:
        raise ValidationError("the URL must not carry credentials")


def validate_roots(value: object) -> None:
    """The configured roots of a server: a list of ``{"uri": "file:///...", "name"?: str}``."""
    from ..gate.shapes import valid_list_roots_result

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
    #: a personal server (issue 29): only this member of the tenant sees and uses it; None: the
    #: tenant's server, for every member
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
                              related_name="mrtr_personal_servers", verbose_name=_("owner (personal server)"))
    #: MCP Apps (issue 31, docs/apps.md): off by default; on, the client declares the extension to
    #: this server and its tools' apps render in the sandbox (where ``APPS_SANDBOX_ORIGIN`` is set)
    apps_enabled = models.BooleanField(
        _("MCP Apps"), default=False,
        help_text=_("Let this server's tools show their own user interface (an MCP App) beside their results, "
                    "in a sandbox on a separate origin. Off: their results are shown as text."))
    #: each app's HTML must be approved by its digest before it renders for members
    apps_require_approval = models.BooleanField(
        _("approve each app first"), default=False,
        help_text=_("Render an app for members only after a tenant admin approved its HTML (by its digest); "
                    "a changed app waits for a new approval."))
    #: who added the server (None: the superuser's admin, a migration, or a user since deleted)
    added_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="+", editable=False)
    #: whether the deployer's URL policy (``MRTRWEB["SERVER_URL_POLICY"]``) holds for this server:
    #: set when a tenant admin or a person adds it or changes its URL; never for one the superuser
    #: adds in the Django admin. Checked again at every connection (:mod:`mrtrweb.serverconfig`).
    url_policy = models.BooleanField(default=False, editable=False)
    #: what the last "Test" found (:mod:`mrtrweb.serverconfig`; bounded JSON, no secret) and when
    last_test = models.JSONField(default=dict, blank=True, editable=False)
    last_tested_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: a personal server disabled by a tenant admin (issue 29): its owner may not enable it again
    #: (only a tenant admin may); False for every other disabling
    disabled_by_admin = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__name", "name"]
        constraints = [
            # the tenant's servers have unique names; a person's own ones are unique among theirs
            models.UniqueConstraint(fields=["tenant", "name"], condition=models.Q(owner__isnull=True),
                                    name="mrtrweb_unique_server_name"),
            models.UniqueConstraint(fields=["tenant", "owner", "name"], condition=models.Q(owner__isnull=False),
                                    name="mrtrweb_unique_personal_server_name"),
        ]
        verbose_name = _("MCP server")

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant})"

    @property
    def personal(self) -> bool:
        """Whether this is one person's own server (``owner`` set)."""
        return self.owner_id is not None

    @property
    def origin(self) -> str:
        return origin_of(self.url)

    def config_digest(self) -> str:
        """``sha256:`` of what a consent card shows and a retry depends on (name, URL, enabled, the
        deprecated-request allowances and the roots): an answer is denied when it changed since the
        round arrived. A pinned protocol version counts too."""
        from ..gate import digest

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


class ServerLogLevel(models.Model):
    """The least level of a server's log messages (``notifications/message``) one person asks for
    on their operations with that server (issue 28); no row: none asked. Applied per request
    (2026-07-28 ``_meta``) or per session (2025-11-25 ``logging/setLevel``): :mod:`mrtrweb.mcp.server_log`."""

    class Level(models.TextChoices):
        DEBUG = "debug", _("debug")
        INFO = "info", _("info")
        NOTICE = "notice", _("notice")
        WARNING = "warning", _("warning")
        ERROR = "error", _("error")
        CRITICAL = "critical", _("critical")
        ALERT = "alert", _("alert")
        EMERGENCY = "emergency", _("emergency")

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="+")
    level = models.CharField(max_length=16, choices=Level.choices)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "server"], name="mrtrweb_unique_log_level")]
        verbose_name = _("server log level")
