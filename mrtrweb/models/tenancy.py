"""Tenants and their members (:mod:`mrtrweb.tenancy` owns who may act on what)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


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
    #: whether members may add personal servers (issue 29; a tenant admin's choice, off by default)
    allow_personal_servers = models.BooleanField(
        _("allow personal servers"), default=False,
        help_text=_("Let members add MCP servers only they see and use (within the deployer's URL policy)."))
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
