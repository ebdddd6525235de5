"""Graceful drain on SIGTERM (issue 14, item 3): calls in flight finish, then the worker exits.

In process: a draining worker refuses new operations (503, ``worker_draining``, nothing sent)
but takes answers; :func:`mrtrweb.runtime.drain.drain` lets a call finish within the grace, marks one
that cannot ``interrupted`` (``worker_stopped``) with its own message and event, deletes the
lease; the lifespan protocol. Real processes (tests/topology Cluster, ``--lifespan on``,
HEARTBEAT_S=1): SIGTERM during a ``long_task`` -- it completes and the worker exits after it, not
before; a call longer than the grace is ``worker_stopped`` and the worker exits within grace + a
few seconds; a round waiting at SIGTERM is answered through the other worker.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

import pytest
from django.test import AsyncClient

from mrtrweb.runtime import drain, workers
from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation, WorkerLease
from tests.answering import post_answer

from ..topology import Cluster, PrivateDatabase, WebSession, status_in


@pytest.fixture
def drained():
    drain.reset()
    workers.reset()
    yield
    drain.reset()
    workers.reset()


async def _client(seeded) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client


async def _start(client: AsyncClient, seeded, tool: str, **args: str) -> Operation:
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:500]
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def _until(op: Operation, what, timeout: float = 20.0) -> Operation:
    deadline = time.monotonic() + timeout
    while not what(op := await Operation.objects.aget(pk=op.pk)):
        assert time.monotonic() < deadline, (op.status, op.error_code)
        await asyncio.sleep(0.05)
    return op


@pytest.mark.django_db(transaction=True)
async def test_a_draining_worker_refuses_new_operations_but_takes_answers(seeded, drained):
    client = await _client(seeded)
    waiting = await _start(client, seeded, "connect_account", provider="before")
    waiting = await _until(waiting, lambda o: o.status == "awaiting_input")
    await client.get(f"/mcp/operations/{waiting.id}/")
    drain.begin_draining()
    server = seeded["servers"]["acme"]
    refused = await client.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": "hi"})
    assert refused.status_code == 503
    assert "This worker is restarting; nothing was sent; try again." in refused.content.decode()
    assert seeded["mcp"].calls[("echo", False)] == 0 and await Operation.objects.acount() == 1
    with pytest.raises(operations.OperationRefused) as err:
        await operations.start_operation(user=seeded["users"]["alice"], server=server, method="tools/call",
                                         name="echo", params={"name": "echo", "arguments": {"text": "x"}})
    assert (err.value.code, err.value.status) == (operations.WORKER_DRAINING, 503)
    answer = await post_answer(client, f"/mcp/operations/{waiting.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 302  # an answer the person gave is never refused for a restart
    assert (await _until(waiting, lambda o: o.is_terminal)).status == "completed"


@pytest.mark.django_db(transaction=True)
async def test_drain_lets_a_call_finish_within_the_grace(seeded, drained):
    client = await _client(seeded)
    op = await _start(client, seeded, "long_task", seconds="2")
    outcome = await drain.drain(grace=20)
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == "completed" and op.result["content"][0]["text"] == "Worked for 2 s."
    assert outcome == {"finished": 1, "stopped": 0, "cancelled": 0}
    assert not await WorkerLease.objects.filter(pk=workers.WORKER_ID).aexists()  # released after


@pytest.mark.django_db(transaction=True)
async def test_drain_stops_a_call_longer_than_the_grace(seeded, drained):
    client = await _client(seeded)
    op = await _start(client, seeded, "long_task", seconds="30")
    await _until(op, lambda o: o.worker == workers.WORKER_ID)
    started = time.monotonic()
    outcome = await drain.drain(grace=1)
    assert time.monotonic() - started < 1 + drain.WIND_DOWN_S + 6
    op = await Operation.objects.aget(pk=op.pk)
    assert (op.status, op.error_code, op.worker) == ("interrupted", drain.WORKER_STOPPED, "")
    assert "restarted (a deploy or a restart)" in op.error_message and "run it again" in op.error_message
    assert outcome["stopped"] == 1
    events = [e async for e in AuditEvent.objects.filter(operation_id=op.pk).values_list("event", "code")]
    assert events == [("failed", drain.WORKER_STOPPED)]
    assert await asyncio.to_thread(operations.get_gate().state, operations.handle_of(op)) is None
    assert not [t for t in operations.running_tasks if not t.done()]
    assert not await WorkerLease.objects.filter(pk=workers.WORKER_ID).aexists()
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert "restarted (a deploy or a restart)" in page.content.decode()


@pytest.mark.django_db(transaction=True)
async def test_the_lifespan_protocol(seeded, drained):
    inbox: asyncio.Queue = asyncio.Queue()
    sent: list[str] = []

    async def send(message):
        sent.append(message["type"])

    app = asyncio.create_task(drain.lifespan({"type": "lifespan"}, inbox.get, send))
    await inbox.put({"type": "lifespan.startup"})
    while sent != ["lifespan.startup.complete"]:
        await asyncio.sleep(0.01)
    assert await WorkerLease.objects.filter(pk=workers.WORKER_ID).aexists()  # written at start-up
    assert not drain.is_draining()
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(app, timeout=10)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert drain.is_draining() and not await WorkerLease.objects.filter(pk=workers.WORKER_ID).aexists()


# --------------------------------------------------------------------------- real processes


@pytest.fixture(scope="module")
def db_():
    database = PrivateDatabase()
    yield database
    database.drop()


def _term_and_time(cluster: Cluster, name: str) -> tuple[subprocess.Popen, float]:
    proc, _ = cluster.workers.pop(name)
    proc.send_signal(signal.SIGTERM)
    return proc, time.monotonic()


def _exited_at(proc: subprocess.Popen, timeout: float) -> float:
    proc.wait(timeout=timeout)
    return time.monotonic()


def _start_refused(session: WebSession, base: str, server_id: int) -> object:
    """POST a start to a draining worker: uvicorn closed its listening socket at SIGTERM, so the
    connection is refused; a request that still got through is answered 503 (worker_draining)."""
    import urllib.error

    try:
        status, _, body = session.request(f"{base}/mcp/servers/{server_id}/tools/echo/", {"arg-text": "late"},
                                          timeout=5)
    except urllib.error.URLError as exc:
        return "connection refused" if isinstance(exc.reason, ConnectionRefusedError) else repr(exc.reason)
    except ConnectionResetError:
        # accepted by the kernel into the listening socket's backlog just before uvicorn closed it:
        # the connection is reset unread (the caller checks that nothing started)
        return "connection reset"
    assert status != 503 or "This worker is restarting; nothing was sent; try again." in body
    return status


def _lease_rows(cluster: Cluster) -> int:
    return cluster.db.query("SELECT count(*) FROM mrtrweb_workerlease")[0][0]


@pytest.mark.services
def test_sigterm_during_a_call_lets_it_finish_then_exits(db_, demo_mcp):
    c = Cluster(db_, demo_mcp.url, MRTRWEB_DRAIN_GRACE_S="30")
    try:
        a, b = c.start("A"), c.start("B")
        alice = WebSession()
        alice.login(a, "alice", "alice-demo-pw")
        op_id = alice.start(a, c.server_id(), "long_task", {"seconds": "5"})
        deadline = time.monotonic() + 10
        while c.db.query("SELECT worker FROM mrtrweb_operation WHERE id = %s", op_id)[0][0] == "":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # the call is under way at the server
        proc, termed = _term_and_time(c, "A")
        time.sleep(0.5)
        assert proc.poll() is None and c.status(op_id) == "running"  # still draining: not killed
        refused = _start_refused(alice, a, c.server_id())  # a start sent to the draining worker
        assert refused in ("connection refused", "connection reset", 503), refused
        assert c.db.query("SELECT count(*) FROM mrtrweb_operation")[0][0] == 1  # nothing started
        proc.wait(timeout=30)
        exited = time.time()
        # the worker wrote the outcome itself (nobody else could have: B would have written
        # worker_lost), and before it exited: the database's clock and ours are this host's
        row = c.db.query("SELECT status, extract(epoch FROM updated_at) FROM mrtrweb_operation WHERE id = %s", op_id)
        assert row[0][0] == "completed"
        assert float(row[0][1]) <= exited + 0.01, (float(row[0][1]), exited)
        body = alice.page(b, op_id)
        assert status_in(body) == "completed" and "Worked for 5 s." in body
        events = [r[0] for r in c.db.query("SELECT event FROM mrtrweb_auditevent WHERE operation_id = %s", op_id)]
        assert events == ["completed"]
        assert _lease_rows(c) == 1  # A's lease was released; B's remains
        log = c.logs["A"].read_text()
        assert "draining" in log and "Traceback" not in log
    finally:
        c.stop_all()


@pytest.mark.services
def test_sigterm_with_a_call_longer_than_the_grace(db_, demo_mcp):
    c = Cluster(db_, demo_mcp.url, MRTRWEB_DRAIN_GRACE_S="2")
    try:
        a, b = c.start("A"), c.start("B")
        alice = WebSession()
        alice.login(a, "alice", "alice-demo-pw")
        waiting = alice.start(a, c.server_id(), "connect_account", {"provider": "drain"})
        c.wait_status(waiting, "awaiting_input")
        alice.page(a, waiting)  # alice saw the card on A
        op_id = alice.start(a, c.server_id(), "long_task", {"seconds": "20"})
        deadline = time.monotonic() + 10
        while c.db.query("SELECT worker FROM mrtrweb_operation WHERE id = %s", op_id)[0][0] == "":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc, termed = _term_and_time(c, "A")
        exited = _exited_at(proc, timeout=2 + 15)
        assert exited - termed < 2 + 8, f"exited {exited - termed:.1f}s after SIGTERM"
        row = c.db.query("SELECT status, error_code, error_message FROM mrtrweb_operation WHERE id = %s", op_id)[0]
        assert row[:2] == ("interrupted", "worker_stopped") and "restarted" in row[2]
        body = alice.page(b, op_id)
        assert "restarted (a deploy or a restart)" in body and "Run again" in body
        events = [r[0] for r in c.db.query("SELECT event || ':' || code FROM mrtrweb_auditevent "
                                           "WHERE operation_id = %s", op_id)]
        assert events == ["failed:worker_stopped"]
        # the round that waited at SIGTERM was left alone: answered through B, once
        assert c.status(waiting) == "awaiting_input"
        demo_mcp.log.clear()
        status, body = alice.answer(b, waiting, 1)
        assert status == 302, body[:300]
        c.wait_status(waiting, "completed")
        assert demo_mcp.calls[("connect_account", True)] == 1
        assert "Traceback" not in c.logs["A"].read_text()
    finally:
        c.stop_all()
