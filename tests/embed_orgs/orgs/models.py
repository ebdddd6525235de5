"""A portal's organisations and their members, as a portal has them before it embeds mrtrweb."""

import uuid

from django.conf import settings
from django.db import models


class Organization(models.Model):
    """An organisation of the portal; ``uid`` is its stable id (the title may change)."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    title = models.CharField(max_length=200)

    def __str__(self) -> str:
        return self.title


class OrgMember(models.Model):
    """A portal user in an organisation; owners administer it."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="org_memberships")
    is_owner = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "user"], name="orgs_unique_member")]
