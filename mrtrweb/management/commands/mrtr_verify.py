"""``manage.py mrtr_verify FILE.jsonl``: play verification cases against the gate as deployed."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from mrtrweb import conf
from mrtrweb.bindings import DjangoCacheBindingStore, configured_store
from mrtrweb.gate import InMemoryBindingStore
from mrtrweb.gate.verify import run_file


class Command(BaseCommand):
    help = ("Play MRTR gate verification cases (shared/cases format, JSON Lines) against the gate with the "
            "configured binding store and policy; prints a line per step and 'N passed, M failed'.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="a .jsonl file of cases, or - for standard input")
        parser.add_argument("--store", choices=["deployed", "memory"], default="deployed",
                            help="deployed: the configured binding store (MRTRWEB BINDING_STORE: the database, or the binding cache; default); memory: an in-process store")

    def handle(self, *args, **options):
        path = options["file"]
        try:
            stream = sys.stdin if path == "-" else open(path, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        factory = InMemoryBindingStore
        if options["store"] == "deployed":
            factory = configured_store
            if conf.get("BINDING_STORE") == "database" and not _database_store_ready():
                # a fresh checkout (no migrate yet): the same gate over the binding cache's store
                self.stderr.write("the database has no binding tables (run manage.py migrate to verify the database "
                                  "store): playing against the binding cache store (MRTRWEB BINDING_CACHE) instead")
                factory = DjangoCacheBindingStore
        with stream:
            _, failed = run_file(stream, factory, conf.policy(), lambda line: self.stdout.write(line))
        if failed:
            raise CommandError(f"{failed} case(s) failed", returncode=1)


def _database_store_ready() -> bool:
    """Whether the database holds the database binding store's tables (migrations applied)."""
    from django.db import DatabaseError, connection

    from mrtrweb.models import BindingClaim, BindingIndexEntry, LiveBinding

    try:
        tables = set(connection.introspection.table_names())
    except DatabaseError:
        return False
    return all(m._meta.db_table in tables for m in (LiveBinding, BindingIndexEntry, BindingClaim))
