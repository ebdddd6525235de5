"""No false "interrupted" (issue 14, item 2), on real worker processes.

Two uvicorn workers (tests/topology Cluster: production settings, ``--lifespan on``,
HEARTBEAT_S=1) on a private PostgreSQL database and a private ``redis-server`` (tests/faults):

* Redis restarted **empty** while a call runs on B, the operation viewed through A again and
  again: never interrupted, completed with its result (the heartbeats used to be Redis keys: an
  empty Redis made every live worker look dead);
* PostgreSQL cut (a TCP proxy in front of it for the workers' DATABASE_URL) for more than three
  heartbeats while a call runs on B, then restored: every lease is stale by then, yet nothing is
  interrupted (each reaper first needs three renewals of its own in a row), and the call
  completes;
* SIGKILL of B during a call: still interrupted ``worker_lost``, promptly (evidence: B's lease
  stops being renewed).
"""

from __future__ import annotations

import time
import urllib.parse

import pytest

from ..faults import RedisServer, TcpProxy
from ..topology import Cluster, PrivateDatabase, WebSession, status_in

pytestmark = [pytest.mark.services]


@pytest.fixture(scope="module")
def db():
    database = PrivateDatabase()
    yield database
    database.drop()


@pytest.fixture(scope="module")
def redis():
    server = RedisServer()
    yield server
    server.close()


def _until_named(cluster: Cluster, op_id: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while not (worker := cluster.db.query("SELECT worker FROM mrtrweb_operation WHERE id = %s", op_id)[0][0]):
        assert time.monotonic() < deadline, ("the call never started", cluster.db.query("SELECT status, error_code, error_message FROM mrtrweb_operation WHERE id = %s", op_id), {n: l.read_text()[-3000:] for n, l in cluster.logs.items()})
        time.sleep(0.05)
    return worker


def _events(cluster: Cluster, op_id: str) -> list[str]:
    return [r[0] for r in cluster.db.query("SELECT event || ':' || code FROM mrtrweb_auditevent "
                                           "WHERE operation_id = %s ORDER BY id", op_id)]


def _no_traceback(cluster: Cluster) -> None:
    for name, log in cluster.logs.items():
        text = log.read_text()
        assert "Traceback" not in text and "Exception in ASGI application" not in text, (name, text[-3000:])


def test_redis_restarted_empty_during_a_call_is_no_interruption(db, redis, demo_mcp):
    c = Cluster(db, demo_mcp.url, redis_url=redis.url(0))
    try:
        a, b = c.start("A"), c.start("B")
        alice = WebSession()
        alice.login(a, "alice", "alice-demo-pw")
        time.sleep(3.5)  # both workers trusted (three renewals each): their reapers are armed
        op_id = alice.start(b, c.server_id(), "long_task", {"seconds": "8"})
        _until_named(c, op_id)
        time.sleep(1.0)
        redis.restart(down_s=1.0)  # back EMPTY: no key of any worker survives
        deadline = time.monotonic() + 30
        views = 0
        while (status := status_in(alice.page(a, op_id))) == "running":
            views += 1
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert status == "completed", status
        assert views >= 5  # A looked at it, as a reaper, many times during the call
        assert "Worked for 8 s." in alice.page(a, op_id)
        assert _events(c, op_id) == ["completed:"]
        assert "late outcome" not in c.logs["B"].read_text()
    finally:
        c.stop_all()
    _no_traceback(c)


def test_postgres_cut_for_longer_than_three_heartbeats_is_no_interruption(db, redis, demo_mcp):
    parts = urllib.parse.urlsplit(db.url)
    proxy = TcpProxy(parts.hostname, parts.port or 5432)
    proxied = urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
    c = Cluster(db, demo_mcp.url, redis_url=redis.url(1), DATABASE_URL=proxied, MRTRWEB_DB_POOL_TIMEOUT_S="1")
    try:
        a, b = c.start("A"), c.start("B")
        alice = WebSession()
        alice.login(a, "alice", "alice-demo-pw")
        time.sleep(3.5)
        op_id = alice.start(b, c.server_id(), "long_task", {"seconds": "12"})
        _until_named(c, op_id)
        time.sleep(1.0)
        proxy.cut()
        time.sleep(5.0)  # > 3 heartbeats: every lease in the database is stale now
        proxy.restore()
        deadline = time.monotonic() + 40
        seen: list[str | None] = []
        while True:
            status, _, body = alice.request(f"{a}/mcp/operations/{op_id}/")
            seen.append(status_in(body) if status == 200 else str(status))
            if seen[-1] not in ("running", "503"):
                break
            assert time.monotonic() < deadline, seen[-5:]
            time.sleep(0.3)
        assert seen[-1] == "completed", seen
        assert "interrupted" not in seen
        assert _events(c, op_id) == ["completed:"]
        assert "Worked for 12 s." in alice.page(b, op_id)
        stale = c.db.query("SELECT count(*) FROM mrtrweb_workerlease WHERE beat_at < now() - interval '3 seconds'")
        assert stale == [(0,)]  # both renewed again
    finally:
        c.stop_all()
        proxy.close()


def test_sigkill_during_a_call_is_still_worker_lost_promptly(db, redis, demo_mcp):
    c = Cluster(db, demo_mcp.url, redis_url=redis.url(2))
    try:
        a, b = c.start("A"), c.start("B")
        alice = WebSession()
        alice.login(a, "alice", "alice-demo-pw")
        time.sleep(3.5)
        op_id = alice.start(b, c.server_id(), "long_task", {"seconds": "30"})
        _until_named(c, op_id)
        c.kill("B")
        killed = time.monotonic()
        c.wait_status(op_id, "interrupted", timeout_s=20)  # A's own loop: nobody views the page
        took = time.monotonic() - killed
        assert took < 3 * 1 + 4, f"{took:.1f}s"  # three missed renewals + a period or so
        body = alice.page(a, op_id)
        assert "The worker handling this call stopped" in body and "Run again" in body
        assert _events(c, op_id) == ["failed:worker_lost"]
    finally:
        c.stop_all()
