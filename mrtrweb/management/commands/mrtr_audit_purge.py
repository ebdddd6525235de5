"""``manage.py mrtr_audit_purge --older-than DAYS``: retention. Removes audit events older than
DAYS, tenant by tenant, behind a signed checkpoint of the last removed link, so that
``mrtr_audit_verify`` still proves the rest of the chain."""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from mrtrweb.audit.events import purge_before
from mrtrweb.models import Tenant


class Command(BaseCommand):
    help = "Delete audit events older than N days (keeping the chain verifiable with a signed checkpoint)."

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, required=True, metavar="DAYS")

    def handle(self, *args, **options):
        days = options["older_than"]
        if days < 0:
            raise CommandError("--older-than must be >= 0")
        cutoff = timezone.now() - timezone.timedelta(days=days)
        total = 0
        for tenant in Tenant.objects.order_by("slug"):
            deleted, sequence = purge_before(tenant.pk, cutoff)
            total += deleted
            if deleted:
                self.stdout.write(f"{tenant.slug}: purged {deleted} events, checkpoint at sequence {sequence}")
        self.stdout.write(f"purged {total} events older than {days:g} days")
