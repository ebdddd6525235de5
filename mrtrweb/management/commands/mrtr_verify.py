"""``manage.py mrtr_verify FILE.jsonl``: play verification cases against the gate as deployed."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from mrtrweb import conf
from mrtrweb.bindings import configured_store
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
        factory = configured_store if options["store"] == "deployed" else InMemoryBindingStore
        with stream:
            _, failed = run_file(stream, factory, conf.policy(), lambda line: self.stdout.write(line))
        if failed:
            raise CommandError(f"{failed} case(s) failed", returncode=1)
