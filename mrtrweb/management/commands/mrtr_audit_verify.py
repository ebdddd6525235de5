"""``manage.py mrtr_audit_verify [--tenant SLUG]``: prove each tenant's audit chain intact or name
its first broken link; exits 1 when one is broken."""

from django.core.management.base import BaseCommand, CommandError

from mrtrweb.audit.events import verify_chain
from mrtrweb.models import Tenant


class Command(BaseCommand):
    help = "Verify the hash chain of the audit events of every tenant (or one)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", help="only this tenant (slug)")

    def handle(self, *args, **options):
        tenants = Tenant.objects.order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
            if not tenants.exists():
                raise CommandError(f"no tenant {options['tenant']!r}")
        broken = 0
        for tenant in tenants:
            report = verify_chain(tenant.pk)
            if report.broken:
                broken += 1
                self.stdout.write(f"BROKEN {tenant.slug}: {report.broken}")
            else:
                self.stdout.write(f"OK {tenant.slug}: {report.events} events, chain intact up to sequence "
                                  f"{report.head_sequence}")
        if broken:
            raise CommandError(f"{broken} tenant chain(s) broken", returncode=1)
