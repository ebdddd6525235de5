"""Rounds expire by themselves (issue 14, item 6): no ``mrtr_reconcile`` needed.

In process: the sweep (mrtrweb.operations.expiry) ends a round past its lifetime ``expired`` exactly once
(one conditional update wins, one ``expired`` event), closes its binding and pushes the
person's pages; a round answered in time is never overtaken; the operation page settles its own
operation on read; when nothing is due the sweep is one query. Real processes (two workers,
TTL_S=3, nothing run by hand, a real WebSocket): test_expiry_without_a_command_on_real_workers.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext

from mrtrweb.operations import expiry
from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation
from tests.answering import post_answer, waiting_round

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def short_ttl(settings):
    settings.MRTRWEB = {"TTL_S": 1}
    operations.reset_gate()
    yield
    operations.reset_gate()


async def _waiting(seeded, provider: str = "gitlab"):
    return await waiting_round(seeded, provider)


async def _until_due(op: Operation, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while op.pk not in await sync_to_async(expiry.due_ids)():
        assert time.monotonic() < deadline, "the round never became due"
        await asyncio.sleep(0.1)


async def _events(op: Operation) -> list[str]:
    return [e async for e in AuditEvent.objects.filter(operation_id=op.pk).order_by("sequence")
            .values_list("event", flat=True)]


async def test_a_round_past_its_lifetime_expires_by_itself(seeded, short_ttl):
    client, op = await _waiting(seeded)
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(operations.user_group(op.user_id), channel)
    card = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()  # seen, not answered
    said = re.search(r'Answer before <time class="when" datetime="([^"]+)"', card)
    assert said, "the card names no deadline"
    assert await expiry.sweep() == 0  # not yet due (the round's TTL and the sweep's grace)
    await _until_due(op)
    assert await expiry.sweep() == 1
    op = await Operation.objects.select_related("server", "tenant").aget(pk=op.pk)
    assert (op.status, op.error_code, op.worker) == ("expired", "expired", "")
    assert op.round_expires_at is not None  # kept: the deadline the round closed at (its page says it)
    ended = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    # one deadline: the expired page's "closed at" is the card's "Answer before", not the sweep's moment
    assert f'the round closed at <time class="when" datetime="{said.group(1)}"' in ended
    assert await _events(op) == ["received", "shown", "expired"]
    assert await sync_to_async(operations.get_gate().state)(operations.handle_of(op)) is None  # binding closed
    pushed = await asyncio.wait_for(layer.receive(channel), timeout=5)
    assert pushed == {"type": "operation.update", "operation_id": str(op.id)}
    assert await expiry.sweep() == 0 and await _events(op) == ["received", "shown", "expired"]
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert 'data-status="expired"' in page.content.decode()
    assert seeded["mcp"].calls[("connect_account", True)] == 0  # nothing was sent


async def test_many_sweepers_at_once_settle_each_round_once(seeded, short_ttl):
    """Four workers' sweeps race for the same rounds (threads, each with its own connection)."""
    ops = [(await _waiting(seeded, f"p{i}"))[1] for i in range(3)]
    for op in ops:
        await _until_due(op)
    barrier = threading.Barrier(4)
    won: list[int] = []

    def sweeper() -> None:
        from django.db import connections

        try:
            barrier.wait()
            won.append(sum(expiry.expire(op.pk) is not None for op in ops))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweeper) for _ in range(4)]
    for t in threads:
        t.start()
    await asyncio.to_thread(lambda: [t.join() for t in threads])
    assert sum(won) == 3
    for op in ops:
        assert (await Operation.objects.aget(pk=op.pk)).status == "expired"
        assert (await _events(op)).count("expired") == 1


async def test_a_round_answered_in_time_is_never_expired(seeded, short_ttl):
    client, op = await _waiting(seeded)
    await client.get(f"/mcp/operations/{op.id}/")
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 302
    await operations.wait_idle()
    await asyncio.sleep(expiry.GRACE_S + 1.2)  # well past the round's lifetime
    assert await expiry.sweep() == 0
    assert await sync_to_async(expiry.expire)(op.pk) is None  # a sweeper that read it as due earlier
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == "completed" and "expired" not in await _events(op)
    assert seeded["mcp"].calls[("connect_account", True)] == 1


async def test_an_answer_that_holds_the_rounds_claim_is_never_expired(seeded, short_ttl):
    """The race the claim settles: an answer the gate accepted just before the expiry holds the
    round's single-use claim while its row still awaits input; a sweep right after leaves it."""
    client, op = await _waiting(seeded)
    gate = operations.get_gate()
    claimed = await sync_to_async(gate.store.claim)(str(op.tenant_id), f"round:{op.id}:{op.rounds}", 60)
    assert claimed  # as gate.respond does for the answer
    await _until_due(op)
    assert await expiry.sweep() == 0
    assert (await Operation.objects.aget(pk=op.pk)).status == "awaiting_input"
    assert "expired" not in await _events(op)


async def test_the_operation_page_settles_its_own_operation(seeded, short_ttl):
    client, op = await _waiting(seeded)
    await _until_due(op)
    page = await client.get(f"/mcp/operations/{op.id}/")  # no sweep ran
    assert page.status_code == 200 and 'data-status="expired"' in page.content.decode()
    panel = await client.get(f"/mcp/operations/{op.id}/panel/")
    assert 'data-status="expired"' in panel.content.decode()
    assert (await _events(op)).count("expired") == 1


async def test_an_answer_after_the_sweep_is_refused(seeded, short_ttl):
    client, op = await _waiting(seeded)
    await client.get(f"/mcp/operations/{op.id}/")
    await _until_due(op)
    assert await expiry.sweep() == 1
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 409 and "no longer open" in answer.content.decode()
    assert seeded["mcp"].calls[("connect_account", True)] == 0


def test_nothing_due_is_one_query(db):
    with CaptureQueriesContext(connection) as queries:
        assert expiry.due_ids() == []
    assert len(queries) == 1
    assert "round_expires_at" in queries[0]["sql"]


@pytest.mark.parametrize("skew_s", [-60, 60])
def test_a_rounds_lifetime_is_kept_on_the_databases_clock(db, monkeypatch, skew_s):
    """A worker whose clock is a minute off writes the round's remaining lifetime from the
    database's now (the clock the sweep judges by): the round is swept neither a minute early
    nor a minute late (issue 26)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    row = get_user_model().objects.create(username="clock-probe")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew_s)  # this worker's clock (and its gate's)
    gate_expires_at = time.time() + 600  # what the gate gives a round: its now + TTL
    stored = get_user_model().objects.filter(pk=row.pk).annotate(at=expiry.expires_at(gate_expires_at)) \
        .values_list("at", flat=True).get()
    monkeypatch.undo()
    left = (stored - timezone.now()).total_seconds()
    assert 590 < left <= 600, left


def test_reconcile_pushes_what_it_expires(seeded, settings, monkeypatch):
    """mrtr_reconcile reuses the same settlement (and now pushes the person's pages too)."""
    from mrtrweb.audit import reconcile

    client = AsyncClient()

    async def start() -> Operation:
        await client.aforce_login(seeded["users"]["alice"])
        return (await _waiting(seeded))[1]

    from asgiref.sync import async_to_sync

    op = async_to_sync(start)()
    pushed: list[str] = []
    monkeypatch.setattr(expiry, "push", lambda o: pushed.append(str(o.pk)))
    settings.MRTRWEB = {"TTL_S": 1}
    time.sleep(1.2)
    report = reconcile.reconcile()
    assert {"operation": str(op.id), "round": 1} in report["expired"]
    assert pushed == [str(op.id)]
    assert Operation.objects.get(pk=op.pk).status == "expired"
    assert json.dumps(report)  # the report stays JSON


# --------------------------------------------------------------------------- real processes


@pytest.mark.services
def test_expiry_without_a_command_on_real_workers(demo_mcp):
    """Two workers with TTL_S=3: a round received on A, nobody answers, nobody runs anything: it
    is ``expired`` by itself, with one ``expired`` event, pushed to the person's socket on B."""
    from websockets.sync.client import connect

    from ..topology import Cluster, PrivateDatabase, WebSession

    db = PrivateDatabase()
    c = Cluster(db, demo_mcp.url, MRTRWEB_TTL_S="3")
    try:
        a, b = c.start("A"), c.start("B")
        alice = WebSession()
        alice.login(a, "alice", "alice-demo-pw")
        cookie = "; ".join(f"{k.name}={k.value}" for k in alice.jar)
        with connect(b.replace("http://", "ws://") + "/ws/mrtrweb/", origin=b,
                     additional_headers={"Cookie": cookie}, open_timeout=10) as ws:
            demo_mcp.log.clear()
            op_id = alice.start(a, c.server_id(), "connect_account", {"provider": "nobody-answers"})
            c.wait_status(op_id, "awaiting_input")
            opened = time.monotonic()
            statuses: list[str] = []
            deadline = opened + 3 + expiry.GRACE_S + 15
            while "expired" not in statuses:
                left = deadline - time.monotonic()
                assert left > 0, statuses
                try:
                    message = json.loads(ws.recv(timeout=left))
                except TimeoutError:
                    break
                if message.get("type") == "operation" and message.get("id") == op_id:
                    statuses.append(message["status"])
            assert "expired" in statuses, statuses
            took = time.monotonic() - opened
        assert c.status(op_id) == "expired"
        events = [r[0] for r in c.db.query("SELECT event FROM mrtrweb_auditevent WHERE operation_id = %s "
                                           "ORDER BY id", op_id)]
        assert events == ["received", "shown", "expired"]  # shown: the card was pushed to B's socket
        assert 3 <= took <= 3 + expiry.GRACE_S + 6, f"expired {took:.1f}s after the round opened"
        assert demo_mcp.calls[("connect_account", True)] == 0
    finally:
        c.stop_all()
        db.drop()


@pytest.mark.parametrize("skew_s", [-60, 60])
def test_a_moved_rows_lifetime_is_bound_into_sql_compiled_once(db, monkeypatch, skew_s):
    """The row move writes the round's lifetime through SQL compiled once per database, the
    interval bound as its parameter each time (issue 30: no ORM compile per round): the text is
    Django's own for that interval, and the stored expiry is the remaining lifetime from the
    database's now, whatever this worker's clock says (issue 26)."""
    import datetime

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from mrtrweb.models import McpServer, Tenant
    from mrtrweb.operations import rows

    tenant = Tenant.objects.create(name="t-expiry-sql", slug="t-expiry-sql")
    server = McpServer.objects.create(tenant=tenant, name="s", url="http://127.0.0.1:9/mcp")
    user = get_user_model().objects.create(username="expiry-sql")
    op = Operation.objects.create(tenant=tenant, user=user, server=server, method="tools/call", name="x",
                                  params={}, status=Operation.Status.RUNNING)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew_s)
    for ttl in (600, 1200):
        expression = expiry.expires_at(time.time() + ttl)
        sql, params = rows._compiled(connection, expression)
        django_sql, django_params = rows._compile(connection, expression)
        assert (sql, params) == (django_sql, django_params)
        assert rows._NOW_PLUS.get((connection.alias, connection.vendor)) is not None or \
            connection.vendor not in ("postgresql",)
        assert rows.move(op.pk, {"round_expires_at": expression}, status_in=(Operation.Status.RUNNING,)) == 1
        stored = Operation.objects.values_list("round_expires_at", flat=True).get(pk=op.pk)
        left = (stored - timezone.now()).total_seconds()
        assert ttl - 10 < left <= ttl, left
    assert isinstance(expression.now_plus, datetime.timedelta)
