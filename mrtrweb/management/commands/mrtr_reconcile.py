"""``manage.py mrtr_reconcile [--json] [--dry-run]``: pair every received round with exactly one
outcome, settle expired rounds and stranded operations, report anomalies; exits 1 when one cannot be settled."""

import json

from django.core.management.base import BaseCommand, CommandError

from mrtrweb.audit.reconcile import reconcile, summary


class Command(BaseCommand):
    help = ("Reconcile the audit trail (expired rounds, duplicate/late answers, foreign attempts, replayed and "
            "reused states) and the operations whose state cannot be right (stranded: ended or reported).")

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--dry-run", action="store_true", help="report expired rounds and stranded operations without settling them")

    def handle(self, *args, **options):
        report = reconcile(settle=not options["dry_run"])
        self.stdout.write(json.dumps(report, indent=2, default=str) if options["json"] else summary(report))
        if report["unsettled"]:
            raise CommandError(f"{report['unsettled']} anomaly(ies) cannot be settled", returncode=1)
