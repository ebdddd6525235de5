"""A private PostgreSQL database with only the binding store's tables (and the workers' leases), and the environment of a
worker process on the production settings using it (tests/bindings/test_db_clock.py, tests/bindings/test_db_blip.py).

The tables are made from the models by Django's schema editor in one short process: the store
needs nothing else, and a full ``migrate`` cost most of those tests' time on a busy machine."""

from __future__ import annotations

import os
import subprocess
import sys

from .topology import ROOT, PrivateDatabase

CREATE_TABLES = r"""
import django
django.setup()
from django.db import connection
from mrtrweb.models import BindingClaim, BindingIndexEntry, LegacyAnswer, LiveBinding, WorkerLease
with connection.schema_editor() as editor:
    for model in (LiveBinding, BindingIndexEntry, BindingClaim, LegacyAnswer, WorkerLease):
        editor.create_model(model)
"""


def worker_env(url: str, **extra: str) -> dict[str, str]:
    """A worker's environment on the production settings (psycopg pool, health checks) with the
    database at ``url``; Redis is never reached by the database store."""
    return dict(os.environ, DJANGO_SETTINGS_MODULE="mrtrweb.site.settings_prod", DATABASE_URL=url,
                REDIS_URL="redis://127.0.0.1:1/0", DJANGO_SECRET_KEY="store-db-test-" + "k" * 40,
                DJANGO_ALLOWED_HOSTS="localhost", MRTRWEB_LOG_LEVEL="WARNING", **extra)


def store_database() -> PrivateDatabase:
    """A new private database holding the binding store's tables (drop it when done)."""
    db = PrivateDatabase()
    done = subprocess.run([sys.executable, "-c", CREATE_TABLES], cwd=ROOT, env=worker_env(db.url),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        db.drop()
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    return db
