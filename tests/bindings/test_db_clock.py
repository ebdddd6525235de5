"""Binding rows live by the database's clock, never a worker's (issue 26, item 7a).

Two worker processes share a private PostgreSQL database: one writes a live record, index entry,
claim and handed-over legacy answer with a 30 s lifetime; the other runs with its clock a minute
ahead -- under Debian's ``faketime`` (libfaketime: every clock call of the process is shifted), or,
without it, with ``time.time`` and ``django.utils.timezone.now`` shifted in Python -- and sweeps,
claims, binds and reads. It must sweep nothing, win nothing and still read the record; the
parent checks the rows in the database itself.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import psycopg
import pytest

from ..store_db import store_database, worker_env
from ..topology import ROOT, PrivateDatabase

pytestmark = [pytest.mark.services]

SKEW_S = 60

SCRIPT = r"""
import json, os, sys, time, uuid, types
import django
if os.environ.get("SKEW_PY"):
    offset = float(os.environ["SKEW_PY"])
    _time = time.time
    time.time = lambda: _time() + offset
django.setup()
if os.environ.get("SKEW_PY"):
    import datetime
    from django.utils import timezone
    timezone.now = lambda: datetime.datetime.fromtimestamp(time.time(), tz=datetime.timezone.utc)
from mrtrweb.runtime import handover
from mrtrweb.bindings.database import DatabaseBindingStore, sweep
store = DatabaseBindingStore()
record = {"tenant": "acme", "operation_id": "op-1", "round": {"number": 1}}
op = types.SimpleNamespace(id=uuid.UUID(os.environ["OP_ID"]))
out = {"clock": time.time()}
if sys.argv[1] == "write":
    store.save("acme", "op-1", record, 30)
    out["index"] = store.index_add("acme", "alice", "s:r-1", "op-1", 30)
    out["claim"] = store.claim("acme", "round:op-1:1", 30)
    handover.put_answer(op, 1, {"retry_id": "r-1", "response": {"ok": True}})
else:
    out["swept"] = sweep()
    out["claim"] = store.claim("acme", "round:op-1:1", 30)
    out["index"] = store.index_add("acme", "alice", "s:r-1", "op-2", 30)
    out["load"] = store.load("acme", "op-1")
    out["new_claim"] = store.claim("acme", "round:op-9:1", 30)
    try:
        handover.put_answer(op, 1, {"retry_id": "r-2", "response": {"ok": False}})
        out["answer_replaced"] = True
    except RuntimeError:
        out["answer_replaced"] = False
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def database():
    db = store_database()
    yield db
    db.drop()


def _env(db: PrivateDatabase, **extra: str) -> dict[str, str]:
    return worker_env(db.url, **extra)


def _run(db: PrivateDatabase, role: str, op_id: str, prefix: list[str] | None = None, **extra: str) -> dict:
    done = subprocess.run([*(prefix or []), sys.executable, "-c", SCRIPT, role], cwd=ROOT,
                          env=_env(db, OP_ID=op_id, **extra), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("skew", ["faketime", "python"])
def test_a_worker_whose_clock_runs_ahead_sweeps_and_takes_over_nothing_live(database, skew):
    if skew == "faketime" and shutil.which("faketime") is None:
        pytest.skip("Debian's faketime package is not installed (apt-get install faketime)")
    for table in ("mrtrweb_livebinding", "mrtrweb_bindingindexentry", "mrtrweb_bindingclaim", "mrtrweb_legacyanswer"):
        with psycopg.connect(database.url, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {table}")
    op_id = str(__import__("uuid").uuid4())
    [(before,)] = database.query("SELECT now()")  # the database's clock before anything is written
    wrote = _run(database, "write", op_id)
    assert wrote["index"] is True and wrote["claim"] is True
    if skew == "faketime":
        skewed = _run(database, "skewed", op_id, prefix=["faketime", "-f", f"+{SKEW_S}s"])
    else:
        skewed = _run(database, "skewed", op_id, SKEW_PY=str(SKEW_S))
    # the second worker really lives a minute ahead (else this test proves nothing)
    assert skewed["clock"] - time.time() > SKEW_S - 10, skewed
    assert skewed["swept"] == 0, skewed
    assert skewed["claim"] is False and skewed["index"] is False and skewed["answer_replaced"] is False, skewed
    assert skewed["load"] == {"tenant": "acme", "operation_id": "op-1", "round": {"number": 1}}
    for table, live in (("mrtrweb_livebinding", 1), ("mrtrweb_bindingindexentry", 1), ("mrtrweb_bindingclaim", 2),
                        ("mrtrweb_legacyanswer", 1)):
        assert database.query(f"SELECT count(*) FROM {table} WHERE expires_at > now()") == [(live,)], table
    # what the skewed worker writes lives 30 s by the database's clock too (not 30 s + its skew)
    assert skewed["new_claim"] is True
    # each claim expires 30 s after it was written, by the database's clock: after `before` + 30 s
    # and by now + 30 s (however long the two workers took to start on a loaded machine)
    spans = [(float(after), float(elapsed)) for after, elapsed in database.query(
        "SELECT extract(epoch FROM expires_at - %s), extract(epoch FROM now() - %s) FROM mrtrweb_bindingclaim",
        before, before)]
    assert len(spans) == 2 and all(30 - 1 <= after <= elapsed + 30 + 1 for after, elapsed in spans), spans
