"""``manage.py mrtr_client`` when a service it needs cannot be reached: one line naming the service
and exit status 1, the reason logged -- never a traceback (the brief: a clear, stable error and a
logged reason). Real parts: the command in a process of its own on the production settings
(psycopg pool), its database at a loopback port where nothing listens."""

from __future__ import annotations

import subprocess
import sys

from ..faults import free_port
from ..store_db import worker_env
from ..topology import ROOT


def test_an_unreachable_database_ends_the_command_with_one_line_naming_it():
    env = worker_env(f"postgres://postgres@127.0.0.1:{free_port()}/nothing", MRTRWEB_DB_POOL_TIMEOUT_S="2")
    done = subprocess.run([sys.executable, "manage.py", "mrtr_client", f"http://127.0.0.1:{free_port()}/mcp",
                           "--tool", "echo", "--args", '{"text": "secret-arg-51c2"}', "--consent", "accept-defaults"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "CommandError: database unavailable (OperationalError): stopped, nothing more is sent; "
        "run it again when it is back"), done.stderr[-3000:]
    assert "mrtr_client stopped: database unavailable (OperationalError)" in done.stderr  # the logged reason
    assert "secret-arg-51c2" not in done.stdout + done.stderr
