"""A Redis restart loses no live round (issue 14, item 1), on real processes: two uvicorn workers
(production settings, the database binding store: the default) on a private PostgreSQL database
and a private ``redis-server`` without persistence (cache and channel layer), restarted EMPTY.

(a) rounds waiting across the restart are each answered -- through A or B -- with exactly one
    retry at the MCP server, and complete; one ``submitted`` audit event per round;
(b) a call in flight across the restart: its round arrives (never ``no_live_request``), is
    answered and completes;
(c) an answer posted while Redis is down is either sent once or refused 503 "nothing was sent"
    and answerable after: never lost, never sent twice, never a 500.

The workers' logs hold no traceback. Retries are counted at the demo MCP server (``calls[(tool,
True)]``), as tests/runtime/test_topology.py does.
"""

from __future__ import annotations

import time

import pytest

from ..faults import RedisServer
from ..topology import Cluster, PrivateDatabase, WebSession, status_in

pytestmark = [pytest.mark.services]


@pytest.fixture(scope="module")
def redis():
    server = RedisServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def cluster(demo_mcp, redis):
    db = PrivateDatabase()
    c = Cluster(db, demo_mcp.url, redis_url=redis.url(0), REDIS_CHANNELS_URL=redis.url(1))
    try:
        c.start("A")
        c.start("B")
        yield c
    finally:
        c.stop_all()
        db.drop()


@pytest.fixture
def alice(cluster):
    session = WebSession()
    session.login(cluster.url("A"), "alice", "alice-demo-pw")
    return session


def _events(cluster, op_id: str) -> list[str]:
    return [r[0] for r in cluster.db.query(
        "SELECT event || coalesce(':' || nullif(code, ''), '') FROM mrtrweb_auditevent WHERE operation_id = %s "
        "ORDER BY id", op_id)]


def _events_ending(cluster, op_id: str, last: str, timeout_s: float = 30.0) -> list[str]:
    """The operation's events once ``last`` is among them: the worker writes the row's terminal
    status just before its terminal event, so a reader seeing the row can be a moment early."""
    deadline = time.monotonic() + timeout_s
    while last not in (events := _events(cluster, op_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return events


def _no_traceback(cluster) -> None:
    for name, log in cluster.logs.items():
        text = log.read_text()
        assert "Traceback" not in text and "Exception in ASGI application" not in text, (name, text[-3000:])


def test_rounds_waiting_across_an_empty_restart_are_each_answered_once(cluster, alice, demo_mcp, redis):
    a, b = cluster.url("A"), cluster.url("B")
    server = cluster.server_id()
    demo_mcp.log.clear()
    ops = [alice.start(a if i % 2 else b, server, "connect_account", {"provider": f"restart-{i}"}) for i in range(6)]
    cluster.wait_status(ops, "awaiting_input")
    for i, op_id in enumerate(ops):
        assert status_in(alice.page(b if i % 2 else a, op_id)) == "awaiting_input"  # shown (consent receipt)

    redis.restart(down_s=0.5)  # every key gone: nothing of a live round was there
    for i, op_id in enumerate(ops):
        base = a if i % 2 == 0 else b  # answered through the other worker than the one that started it
        status, body = alice.answer(base, op_id, 1)
        assert status == 302, (status, body[:400])
    cluster.wait_status(ops, "completed")
    assert demo_mcp.calls[("connect_account", True)] == len(ops)  # exactly one retry per round
    assert demo_mcp.calls[("connect_account", False)] == len(ops)
    for op_id in ops:
        assert _events_ending(cluster, op_id, "completed") == ["received", "shown", "submitted", "completed"]
        status, _ = alice.answer(b, op_id, 1)
        assert status == 409  # answered already: nothing more is sent
    assert demo_mcp.calls[("connect_account", True)] == len(ops)
    _no_traceback(cluster)


def test_a_call_in_flight_across_an_empty_restart_gets_its_round(cluster, alice, demo_mcp, redis):
    a, b = cluster.url("A"), cluster.url("B")
    demo_mcp.log.clear()
    op_id = alice.start(a, cluster.server_id(), "wait_then_ask", {"seconds": "4"})
    deadline = time.monotonic() + 20
    while cluster.status(op_id) != "running" or not cluster.db.query(
            "SELECT worker FROM mrtrweb_operation WHERE id = %s", op_id)[0][0]:
        assert time.monotonic() < deadline, cluster.status(op_id)
        time.sleep(0.05)
    redis.restart(down_s=0.5)  # while the server thinks
    assert cluster.status(op_id) == "running"
    cluster.wait_status(op_id, ("awaiting_input", "failed", "interrupted", "denied"), timeout_s=30)
    row = cluster.db.query("SELECT status, error_code FROM mrtrweb_operation WHERE id = %s", op_id)[0]
    assert row == ("awaiting_input", ""), row  # never no_live_request: the binding was in PostgreSQL
    assert "Go on?" in alice.page(b, op_id)
    status, body = alice.answer(b, op_id, 1)
    assert status == 302, (status, body[:400])
    cluster.wait_status(op_id, "completed")
    assert demo_mcp.calls[("wait_then_ask", True)] == 1
    assert _events_ending(cluster, op_id, "completed") == ["received", "shown", "submitted", "completed"]
    _no_traceback(cluster)


def test_an_answer_while_redis_is_down_is_never_lost_or_sent_twice(cluster, alice, demo_mcp, redis):
    a, b = cluster.url("A"), cluster.url("B")
    demo_mcp.log.clear()
    op_id = alice.start(a, cluster.server_id(), "connect_account", {"provider": "redis-down"})
    cluster.wait_status(op_id, "awaiting_input")
    alice.page(b, op_id)
    redis.stop()
    try:
        status, body = alice.answer(b, op_id, 1)
        assert status in (302, 503), (status, body[:400])  # never a 500
        if status == 503:  # refused: nothing was sent, and the round is still open
            assert "nothing was sent" in body.lower()
            time.sleep(0.5)
            assert demo_mcp.calls[("connect_account", True)] == 0 and cluster.status(op_id) == "awaiting_input"
        else:  # the bindings are in PostgreSQL: sent (a push may fail)
            cluster.wait_status(op_id, "completed")
            assert demo_mcp.calls[("connect_account", True)] == 1
    finally:
        redis.start()  # back, empty
    if status == 503:
        status, body = alice.answer(a, op_id, 1)
        assert status == 302, (status, body[:400])
        cluster.wait_status(op_id, "completed")
    again, _ = alice.answer(a, op_id, 1)
    assert again == 409
    assert demo_mcp.calls[("connect_account", True)] == 1  # once, whatever happened
    assert _events(cluster, op_id).count("submitted") == 1
    _no_traceback(cluster)
