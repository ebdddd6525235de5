"""``manage.py mrtr_client`` when a service it needs cannot be reached: one line naming the service
and exit status 1, the reason logged -- never a traceback (the brief: a clear, stable error and a
logged reason). Real parts: the command in a process of its own on the production settings
(psycopg pool), its database at a loopback port where nothing listens."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..faults import free_port
from ..store_db import worker_env
from ..topology import ROOT, PrivateDatabase


def test_an_unreachable_database_ends_the_command_with_one_line_naming_it():
    env = worker_env(f"postgres://postgres@127.0.0.1:{free_port()}/nothing", MRTRWEB_DB_POOL_TIMEOUT_S="2")
    done = subprocess.run([sys.executable, "manage.py", "mrtr_client", f"http://127.0.0.1:{free_port()}/mcp",
                           "--tool", "echo", "--consent", "accept-defaults"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "CommandError: database unavailable (OperationalError): stopped, nothing more is sent; "
        "run it again when it is back"), done.stderr[-3000:]
    assert "mrtr_client stopped: database unavailable (OperationalError: " in done.stderr  # the logged reason


@pytest.mark.services
def test_an_error_that_is_no_outage_is_not_called_one():
    """A database that answers but has no tables (not migrated): ``ProgrammingError`` -- a fault to
    fix, not an outage to wait out -- keeps its own message (here Django's traceback), never
    "database unavailable ... run it again"."""
    db = PrivateDatabase()
    try:
        done = subprocess.run([sys.executable, "manage.py", "mrtr_client", f"http://127.0.0.1:{free_port()}/mcp",
                               "--tool", "echo"], cwd=ROOT, env=worker_env(db.url), capture_output=True, text=True,
                              timeout=120)
    finally:
        db.drop()
    assert done.returncode != 0
    assert "unavailable" not in done.stderr and "ProgrammingError" in done.stderr, done.stderr[-3000:]
