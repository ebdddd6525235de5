"""Authorization rows: client registrations, people's connections, started flows.

Every secret here is sealed (:mod:`mrtrweb.authz.crypto`); no field holds a token, a code
verifier or a client secret in the clear, and none is ever shown, logged, audited or exported
(digests only). ``__str__`` names rows without secrets.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class OAuthClientRegistration(models.Model):
    """This product's client identity at one authorization server, for one MCP server.

    ``how``: ``cimd`` (the client id is the Client ID Metadata Document URL this product serves),
    ``preregistered`` (an admin entered a client id and maybe a secret on the server), ``dcr``
    (RFC 7591 Dynamic Client Registration). ``client_info`` is the SDK's
    ``OAuthClientInformationFull`` as JSON, sealed (it may hold a ``client_secret``). A changed
    authorization server (another ``issuer``) means registering again (SEP-2352).
    """

    class How(models.TextChoices):
        CIMD = "cimd", _("Client ID Metadata Document")
        PREREGISTERED = "preregistered", _("Pre-registered by an admin")
        DCR = "dcr", _("Dynamic Client Registration")

    server = models.ForeignKey("mrtrweb.McpServer", on_delete=models.CASCADE, related_name="oauth_registrations")
    issuer = models.CharField(max_length=500)
    how = models.CharField(max_length=16, choices=How.choices)
    client_id = models.CharField(max_length=500, help_text=_("public: the client id the authorization server knows"))
    client_info_sealed = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "issuer"], name="mrtrweb_unique_oauth_registration")]
        verbose_name = _("OAuth client registration")

    def __str__(self) -> str:
        return f"{self.how} client at {self.issuer}"


class OAuthConnection(models.Model):
    """One person's authorization to one MCP server in one tenant (OAuth per user).

    ``tokens_sealed``: the SDK's ``OAuthToken`` as JSON (access, refresh, expiry, scope), sealed.
    ``family``: a random id minted when the person connects; a refresh keeps it, a new Connect
    replaces it. The MRTR binding carries ``identity`` (issuer + subject/family digest): a retry only
    goes out with the same person's credentials. ``expires_at``: the access token's expiry (None:
    not said). ``oauth_metadata``: the authorization server metadata (public; token, revocation
    endpoints) used to refresh and revoke.
    """

    tenant = models.ForeignKey("mrtrweb.Tenant", on_delete=models.CASCADE, related_name="oauth_connections")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mrtr_oauth_connections")
    server = models.ForeignKey("mrtrweb.McpServer", on_delete=models.CASCADE, related_name="oauth_connections")
    issuer = models.CharField(max_length=500)
    client_id = models.CharField(max_length=500)
    family = models.CharField(max_length=64)
    subject_digest = models.CharField(max_length=80, blank=True)
    scope = models.CharField(max_length=2000, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    tokens_sealed = models.TextField()
    oauth_metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    refreshed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "user", "server"], name="mrtrweb_unique_oauth_connection")]
        verbose_name = _("OAuth connection")

    def __str__(self) -> str:
        return f"{self.user} -> {self.server} ({self.issuer})"


class PendingAuthorization(models.Model):
    """A started authorization-code flow, waiting for its callback (any worker may receive it).

    Keyed by ``state_digest`` (HMAC of the ``state`` sent to the authorization server; the state
    itself is never stored in the clear). Single use (``used_at``), short-lived (``expires_at``),
    and bound to the person, tenant, server **and browser session** (``session_digest``): a
    callback from another session or person is refused and stores nothing. ``flow_sealed``: the
    framework-free flow record (:class:`mrtrweb.mcp.auth.PendingFlow` as JSON: PKCE verifier,
    redirect URI, resource, scope, metadata, client info), sealed. ``return_to``: a path of this
    site to go back to (checked with ``url_has_allowed_host_and_scheme``).
    """

    state_digest = models.CharField(max_length=80, unique=True)
    tenant = models.ForeignKey("mrtrweb.Tenant", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    server = models.ForeignKey("mrtrweb.McpServer", on_delete=models.CASCADE, related_name="+")
    session_digest = models.CharField(max_length=80)
    authorization_origin = models.CharField(max_length=300)
    flow_sealed = models.TextField()
    return_to = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["expires_at"])]
        verbose_name = _("pending authorization")

    def __str__(self) -> str:
        return f"pending authorization of {self.user} for {self.server}"
