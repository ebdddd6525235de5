"""The first binding-store statement after a database blip (issue 26, item 7d).

A worker keeps its database connection between statements; a blip (every connection cut, then
the database answers again) leaves it broken, and its next statement fails. The database store
makes a read, an overwrite or a delete once more on a new connection, so nothing fails for a
blip that is over; a claim or an index entry -- the first may have committed before its answer
was lost -- is never made twice: it fails closed (StoreUnavailable), and the next one works.

Real parts: a worker process on the production settings (psycopg pool, health checks), a private
PostgreSQL database behind a TCP proxy that cuts every connection (tests/faults.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse

import pytest

from ..faults import TcpProxy
from ..store_db import store_database, worker_env
from ..topology import ROOT

pytestmark = [pytest.mark.services]

SCRIPT = r"""
import json, sys, time
import django
django.setup()
from mrtrweb.bindings.database import DatabaseBindingStore
from mrtrweb.gate import StoreUnavailable
store = DatabaseBindingStore()
record = {"tenant": "acme", "operation_id": "op-1", "round": {"number": 1}}
steps = {
    "load": lambda: store.load("acme", "op-1") == record,
    "index_get": lambda: store.index_get("acme", "alice", "k-0") == "op-1",
    "save": lambda: store.save("acme", "op-1", record, 60) is None,
    "delete": lambda: store.delete("acme", "op-gone") is None,
    "release": lambda: store.release("acme", "t-gone") is None,
    "claim": lambda: store.claim("acme", "t-1", 60),
    "index_add": lambda: store.index_add("acme", "alice", "k-1", "op-1", 60),
}


def grow():  # five threads each take a connection of the pool at once and give it back: five idle
    import threading
    from django.db import connection
    together = threading.Barrier(5)
    def hold():
        connection.ensure_connection()
        together.wait(timeout=20)
        connection.close()
    threads = [threading.Thread(target=hold) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from django.db import connections
    return len(connections["default"].pool._pool) >= 5


steps["grow"] = grow


def fresh():  # a new thread's first statement, as a request's: Django's own cursor, from the pool
    import threading
    out = []
    def run():
        from django.db import connection
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT 1")
                out.append(cur.fetchone()[0] == 1)
        except Exception as exc:
            out.append(type(exc).__name__)
        finally:
            connection.close()
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


from mrtrweb.runtime import leases
steps["fresh"] = fresh
steps["renewing"] = lambda: leases.keep_renewing(lambda: True) is None
steps["recovered"] = lambda: leases.trusted()
store.save("acme", "op-1", record, 60)
store.index_add("acme", "alice", "k-0", "op-1", 60)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    name = line.strip()
    started = time.monotonic()
    try:
        outcome = steps[name]()
    except StoreUnavailable:
        outcome = "unavailable"
    print(json.dumps({"step": name, "outcome": outcome, "s": time.monotonic() - started}), flush=True)
"""


@pytest.fixture(scope="module")
def database():
    db = store_database()
    yield db
    db.drop()


def _env(url: str) -> dict[str, str]:
    return worker_env(url, MRTRWEB_DB_POOL_TIMEOUT_S="3")


class Worker:
    """The script above in a process of its own, one step per line."""

    def __init__(self, url: str, **env: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, env=dict(_env(url), **env), text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert json.loads(self._line()) == {"ready": True}

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()[-3000:] if self.proc.poll() is not None else "no answer"
        return line

    def step(self, name: str) -> tuple[object, float]:
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self._line())
        assert answer["step"] == name
        return answer["outcome"], answer["s"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def test_the_first_statement_after_a_blip_is_made_again_only_where_that_is_safe(database):
    proxy = TcpProxy("127.0.0.1", 5432)
    parts = urllib.parse.urlsplit(database.url)
    worker = Worker(urllib.parse.urlunsplit(parts._replace(netloc=f"postgres@127.0.0.1:{proxy.port}")))
    try:
        for name in ("load", "index_get", "save", "delete", "release"):
            proxy.cut()  # the blip: every connection dropped ...
            proxy.restore()  # ... and the database answers again
            assert worker.step(name)[0] is True, name  # made again on a new connection: it works
        for name in ("claim", "index_add"):
            proxy.cut()
            proxy.restore()
            assert worker.step(name)[0] == "unavailable", name  # never twice: fails closed ...
            assert worker.step(name)[0] is True, name  # ... and the next one works (it had not committed)
        # the database still away: a read fails closed (its second try too), within the pool's timeout
        proxy.cut()
        outcome, seconds = worker.step("load")
        assert outcome == "unavailable" and seconds < 10, (outcome, seconds)
        proxy.restore()
        # back: reads work again as soon as the pool has a connection (it reconnects with a back-off
        # of its own, which a loaded machine can stretch past one step's pool timeout); until then
        # each read fails closed, never otherwise
        outcomes, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            outcomes.append(worker.step("load")[0])
            if outcomes[-1] is True:
                break
        assert outcomes[-1] is True and set(outcomes[:-1]) <= {"unavailable"}, outcomes
    finally:
        worker.close()
        proxy.close()
    stderr_lines = [line for line in worker.proc.stderr.read().splitlines() if "binding store" in line]
    # one warning line per failure that reached the gate (two claims, the read while down, and each
    # read that failed closed while the pool reconnected), no traceback
    expected = 3 + outcomes.count("unavailable")
    assert len(stderr_lines) == expected and all("Traceback" not in line for line in stderr_lines), stderr_lines


def test_a_blip_that_broke_every_idle_connection_of_the_pool_is_over_for_the_next_statement(database):
    """A pool holding five idle connections when the blip comes: all five are broken. The first
    statement finds its own connection broken, and its retry must not meet the five one by one --
    psycopg_pool's ``getconn`` waits 1, 2, 4... s between two failed health checks, so the retry
    failed with the pool's timeout (3 s here) although the database answered again (ci, stop 42:
    a loaded machine's pool had grown to four). The store has the pool test its idle connections
    at once (:func:`mrtrweb.prepared.check_pool`), so the retry works, every time."""
    proxy = TcpProxy("127.0.0.1", 5432)
    parts = urllib.parse.urlsplit(database.url)
    worker = Worker(urllib.parse.urlunsplit(parts._replace(netloc=f"postgres@127.0.0.1:{proxy.port}")))
    try:
        for name in ("load", "save", "release", "index_get", "delete"):
            assert worker.step("grow")[0] is True
            proxy.cut()
            proxy.restore()
            assert worker.step(name)[0] is True, name
    finally:
        worker.close()
        proxy.close()
    stderr = worker.proc.stderr.read()
    assert "binding store" not in stderr and "Traceback" not in stderr, stderr[-3000:]


def test_when_the_database_is_back_the_lease_has_the_pool_test_its_idle_connections(database):
    """Five idle connections in the pool when the database goes away for a while: no store statement
    runs meanwhile, so nothing of the product finds them broken -- but the worker's lease renewals
    fail, and the first that succeeds again has the pool test its idle connections at once
    (``leases._check_pool``). A request's first statement then gets a working connection, instead
    of meeting the five broken ones one by one until the pool's timeout (3 s here)."""
    proxy = TcpProxy("127.0.0.1", 5432)
    parts = urllib.parse.urlsplit(database.url)
    worker = Worker(urllib.parse.urlunsplit(parts._replace(netloc=f"postgres@127.0.0.1:{proxy.port}")),
                    MRTRWEB_HEARTBEAT_S="1")
    try:
        assert worker.step("renewing")[0] is True
        deadline = time.monotonic() + 30
        while worker.step("recovered")[0] is not True:  # renewing, trusted (three renewals in a row)
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert worker.step("grow")[0] is True
        proxy.cut()
        deadline = time.monotonic() + 30
        while worker.step("recovered")[0] is not False:  # a renewal failed
            assert time.monotonic() < deadline
            time.sleep(0.2)
        proxy.restore()
        deadline = time.monotonic() + 60
        while worker.step("recovered")[0] is not True:  # renewed again, three times
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert worker.step("fresh")[0] is True
    finally:
        worker.close()
        proxy.close()
