"""The portal's tenant resolver (``MRTRWEB["TENANT_RESOLVER"]``), as docs/embedding.md shows it."""

from django.db.models.signals import post_delete, post_save

from mrtrweb.tenancy import TenantGrant, forget

from .models import Organization, OrgMember


def resolve(user):
    """The organisations ``user`` belongs to, as mrtrweb tenants: keyed by the organisation's
    stable uid, named by its title; owners are tenant admins."""
    return [TenantGrant(key=str(m.org.uid), name=m.org.title, role="admin" if m.is_owner else "member")
            for m in OrgMember.objects.filter(user=user).select_related("org")]


def _member_changed(sender, instance, **kwargs):
    forget(instance.user_id)  # their next request asks resolve() again, TENANT_SYNC_S or not


def _org_renamed(sender, instance, created, **kwargs):
    if not created:
        for user_id in instance.members.values_list("user_id", flat=True):
            forget(user_id)


def connect_signals():
    """A change of membership counts at the member's next request (not only after TENANT_SYNC_S)."""
    post_save.connect(_member_changed, sender=OrgMember, dispatch_uid="orgs.member-saved")
    post_delete.connect(_member_changed, sender=OrgMember, dispatch_uid="orgs.member-deleted")
    post_save.connect(_org_renamed, sender=Organization, dispatch_uid="orgs.org-saved")
