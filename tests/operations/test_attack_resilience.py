"""Attacks on issue 14's durability work: each test is a fault found by trying to break it.

* a sealed ``LiveBinding`` row copied onto another operation of the same tenant was opened as
  that operation's binding (only the tenant was checked);
* a store failure after the round's single-use claim was taken (a connection dropped between
  the gate's statements) left the round claimed but open: the person was told "try again", every
  later answer was refused as "answered by a concurrent submission", and the expiry sweep could
  not retire the round (it counted as "being answered") until the claim ran out;
* a page view on a worker whose clock runs ahead of the database's retired the round's claim
  before the round was due by the database's clock: the round stayed "Waiting for your answer"
  and every answer was refused;
* two readiness probes arriving together on a healthy worker whose checks take a moment: the
  second read the first one's running check as blocked and answered 503;
* a worker forked after the app was imported (gunicorn ``--preload``) kept its parent's id: siblings
  shared one lease and one sibling's drain stopped the other's calls;
* the database lost between an answer's ``submitted`` event and its operation row: the round was
  consumed and audited, no retry sent, the answer refused when given again (now waited out, and past
  the wait the worker sends the recorded retry once the database is back).

Plus one check of what held: two simultaneous answers still consume a round once.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time

import pytest
from asgiref.sync import sync_to_async
from django.db.models.functions import Now
from django.test import AsyncClient
from django.utils import timezone

from mrtrweb.runtime import drain, health
from mrtrweb.operations import expiry
from mrtrweb import operations
from mrtrweb.bindings.database import DatabaseBindingStore
from mrtrweb.gate import StoreUnavailable
from mrtrweb.models import AuditEvent, LiveBinding, Operation
from tests.answering import post_answer, waiting_round

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _waiting(seeded, provider: str = "gitlab"):
    return await waiting_round(seeded, provider, shown=True)


async def _events(op: Operation) -> list[str]:
    return [e async for e in AuditEvent.objects.filter(operation_id=op.pk).order_by("sequence")
            .values_list("event", flat=True)]


# -- sealed rows ------------------------------------------------------------------------------

def test_a_binding_row_copied_to_another_operation_reads_as_absent(caplog):
    store = DatabaseBindingStore()
    record = {"tenant": "acme", "operation_id": "op-1", "user": "u1", "params": {"name": "deploy"}}
    store.save("acme", "op-1", record, 60)
    store.save("acme", "op-2", dict(record, operation_id="op-2", params={"name": "harmless"}), 60)
    sealed = LiveBinding.objects.get(operation_id="op-1").record
    LiveBinding.objects.filter(operation_id="op-2").update(record=sealed)  # op-1's row replayed onto op-2
    assert store.load("acme", "op-1")["params"] == {"name": "deploy"}
    assert store.load("acme", "op-2") is None
    assert "binding record for operation op-2 belongs to another operation; ignored" in caplog.text


# -- a store failure after the claim ----------------------------------------------------------

def _between_claim_and_write(monkeypatch, fault) -> None:
    """Make ``fault`` happen where the consume's writes fail after its claim: on SQLite between
    the claim and the next write (``index_add``, in the consume's transaction); on PostgreSQL the
    consume is one statement (``bindings.statements.chained``), so that statement fails."""
    from django.db import connection

    if connection.vendor == "postgresql":
        import mrtrweb.bindings.database as database

        real = database.chained
        monkeypatch.setattr(database, "chained", lambda *a, **kw: fault(None, *a, real=real, **kw))
    else:
        real = DatabaseBindingStore.index_add
        monkeypatch.setattr(DatabaseBindingStore, "index_add", lambda self, *a, **kw: fault(self, *a, real=real, **kw))


async def test_a_store_failure_after_the_claim_leaves_the_round_answerable(seeded, monkeypatch):
    """The connection drops between the round's claim and the binding's write: the person is told
    nothing was sent and to try again -- and trying again works, and sends once."""
    client, op = await _waiting(seeded)
    failures = []

    def drops_once(self, *args, real, **kwargs):
        if not failures:
            failures.append(1)
            raise StoreUnavailable("binding store unavailable (write)")
        return real(*args, **kwargs) if self is None else real(self, *args, **kwargs)

    _between_claim_and_write(monkeypatch, drops_once)
    url = f"/mcp/operations/{op.id}/answer/"
    first = await post_answer(client, url, {"action": "accept", "round": "1"})
    assert failures and first.status_code in (409, 503)
    assert "nothing was sent" in first.content.decode().lower()
    assert (await Operation.objects.aget(pk=op.pk)).status == "awaiting_input"
    second = await post_answer(client, url, {"action": "accept", "round": "1"})
    assert second.status_code == 302, second.content.decode()[:500]
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op.pk)).status == "completed"
    assert seeded["mcp"].calls[("connect_account", True)] == 1


async def test_a_round_whose_answer_failed_after_the_claim_still_expires(seeded, monkeypatch):
    """The same fault, and the person walks away: the round expires at its time, not when the
    stray claim runs out (TTL later). The round keeps its lifetime (ten minutes, so the answer
    surely reaches the claim however slow the machine); its time then passes by the database's
    clock, which the sweep judges by, while a stray claim would still hold for minutes."""
    client, op = await _waiting(seeded)
    opened = op.round_expires_at

    def drops(self, *args, real, **kwargs):
        raise StoreUnavailable("binding store unavailable (write)")

    _between_claim_and_write(monkeypatch, drops)
    failed = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    monkeypatch.undo()
    # the answer failed after the claim (not refused as expired or concurrent) ...
    assert failed.status_code in (409, 503) and "nothing was sent" in failed.content.decode().lower()
    # ... and left the round as it was shown: still waiting, its expiry not moved
    row = await Operation.objects.aget(pk=op.pk)
    assert (row.status, row.round_expires_at) == ("awaiting_input", opened)
    assert op.pk not in await sync_to_async(expiry.due_ids)()
    # its time passes (the database's clock): due now, the claim free, swept once
    await Operation.objects.filter(pk=op.pk).aupdate(
        round_expires_at=Now() - datetime.timedelta(seconds=expiry.GRACE_S + 1))
    assert op.pk in await sync_to_async(expiry.due_ids)()
    assert await expiry.sweep() == 1
    assert (await Operation.objects.aget(pk=op.pk)).status == "expired"
    assert (await _events(op)).count("expired") == 1


# -- clocks -----------------------------------------------------------------------------------

async def test_a_worker_clock_ahead_of_the_database_never_retires_a_live_round(seeded):
    """A page view on a worker whose clock is a minute ahead: by its clock the round is past its
    lifetime, by the database's it is not. Nothing may be retired; the answer goes through."""
    client, op = await _waiting(seeded)
    ahead = await Operation.objects.select_related("server", "tenant").aget(pk=op.pk)
    ahead.round_expires_at = timezone.now() - datetime.timedelta(seconds=60)  # as that worker reads it
    assert await expiry.settle_if_due(ahead) is False
    assert (await Operation.objects.aget(pk=op.pk)).status == "awaiting_input"
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 302, answer.content.decode()[:500]
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op.pk)).status == "completed"


# -- readiness --------------------------------------------------------------------------------

async def test_probes_arriving_together_on_a_healthy_worker_all_read_ready(monkeypatch):
    """Two load balancers probe at the same moment; the database answers in 0.3 s (well within
    the check's 1.5 s): both read ready -- the second joins the running check."""
    health.reset()
    drain.reset()
    real = health._database

    def slow_but_healthy() -> None:
        time.sleep(0.3)
        real()

    await AsyncClient().get("/readyz")  # warm (the first probe runs its checks in sequence)
    monkeypatch.setattr(health, "_database", slow_but_healthy)
    try:
        answers = await asyncio.gather(*(AsyncClient().get("/readyz") for _ in range(3)))
        assert [a.status_code for a in answers] == [200, 200, 200]
    finally:
        health.reset()


# -- worker identity --------------------------------------------------------------------------

def _report_ids(conn) -> None:
    from mrtrweb.runtime import leases, workers

    conn.send((os.getpid(), leases.WORKER_ID, workers.WORKER_ID))
    conn.close()


def test_a_forked_worker_has_an_id_of_its_own():
    """gunicorn --preload (or any server that imports the app, then forks its workers): each
    child is another worker. With the parent's id, siblings renewed one lease (a SIGKILLed
    sibling's calls were never reaped) and one sibling's drain interrupted the other's calls."""
    import multiprocessing

    from mrtrweb.runtime import leases, workers

    parent = leases.WORKER_ID
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_report_ids, args=(theirs,))
    child.start()
    try:
        assert ours.poll(20), "the forked child did not answer"
        pid, in_leases, in_workers = ours.recv()
    finally:
        child.join(10)
    assert in_leases == in_workers != parent
    assert f":{pid}:" in in_leases
    assert leases.WORKER_ID == workers.WORKER_ID == parent


# -- the database lost between the answer's audit and its operation row -------------------------

async def test_the_database_lost_after_the_answers_audit_loses_no_answer(seeded, monkeypatch):
    from django.db import OperationalError

    client, op = await _waiting(seeded)
    # on PostgreSQL the move is a step of the 'submitted' append's own statement (no moment between the
    # two): the path where it is a statement of its own (SQLite, a server-side binding cursor) is taken
    monkeypatch.setattr(operations.retries, "move_sql", lambda *args, **kwargs: None)
    real = operations.retries.move  # the row's move to running (operations.rows.move)
    cut = []

    def drops_once(op_id, values, **kwargs):
        if values.get("status") == Operation.Status.RUNNING and not cut:
            cut.append(1)  # the connection dropped just after the 'submitted' event was written
            raise OperationalError("server closed the connection unexpectedly")
        return real(op_id, values, **kwargs)

    monkeypatch.setattr(operations.retries, "move", drops_once)
    url = f"/mcp/operations/{op.id}/answer/"
    first = await post_answer(client, url, {"action": "accept", "round": "1"})
    await operations.wait_idle()
    final = await Operation.objects.aget(pk=op.pk)
    # the blip is waited out: the answer the person gave goes out, once
    assert cut and first.status_code == 302, first.status_code
    assert final.status == "completed", final.status
    assert seeded["mcp"].calls[("connect_account", True)] == 1


async def test_an_answer_recorded_as_the_database_stays_away_goes_out_when_it_is_back(seeded, monkeypatch):
    """Past the answer's own wait the person reads that the answer was recorded and goes out by
    itself (never "nothing was sent"); the worker sends it once the database answers again."""
    from django.db import OperationalError

    client, op = await _waiting(seeded)
    monkeypatch.setattr(operations.retries, "ANSWER_DB_WAIT_S", 0.3)
    monkeypatch.setattr(operations.retries, "move_sql", lambda *args, **kwargs: None)  # as above
    real = operations.retries.move  # the row's move to running (operations.rows.move)
    down_until = []

    def down_for_a_second(op_id, values, **kwargs):
        if values.get("status") == Operation.Status.RUNNING:
            if not down_until:
                down_until.append(time.monotonic() + 1.0)
            if time.monotonic() < down_until[0]:
                raise OperationalError("server closed the connection unexpectedly")
        return real(op_id, values, **kwargs)

    monkeypatch.setattr(operations.retries, "move", down_for_a_second)
    first = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    body = first.content.decode()
    assert first.status_code == 503 and "answer was recorded" in body and "nothing was sent" not in body.lower()
    await operations.wait_idle(timeout=20)
    final = await Operation.objects.aget(pk=op.pk)
    assert final.status == "completed", final.status
    assert seeded["mcp"].calls[("connect_account", True)] == 1
    assert await AuditEvent.objects.filter(operation_id=op.pk, event="submitted").acount() == 1


async def test_a_read_back_that_fails_after_the_row_moved_sends_nothing_and_ends_the_operation(seeded, monkeypatch):
    """On PostgreSQL the row's move to running is made in the 'submitted' append's own statement,
    before the read-back: a read-back that then fails sends nothing, and the operation is ended
    (denied, audit_unavailable), never left running with no retry on its way (on SQLite the move
    follows the read-back: the row is still waiting when it fails, and is ended the same way)."""
    import mrtrweb.audit.events as events

    client, op = await _waiting(seeded)
    real = events.read_event
    failed = []

    def fails_once(conn, pk):
        if not failed:
            failed.append(pk)
            return None  # as a row that is not there: the read-back fails
        return real(conn, pk)

    monkeypatch.setattr(events, "read_event", fails_once)
    await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    await operations.wait_idle()
    final = await Operation.objects.aget(pk=op.pk)
    assert failed, "the read-back was not made"
    assert (final.status, final.error_code) == ("denied", "denied"), (final.status, final.error_code)
    assert final.worker == ""
    assert seeded["mcp"].calls[("connect_account", True)] == 0  # no retry left
    assert (await _events(op))[-2:] == ["submitted", "denied"]


async def test_two_answers_at_once_consume_the_round_once(seeded):
    """What held, kept: the round consumed in one transaction (claim and writes) still lets exactly
    one of two simultaneous answers through -- the other is refused, none fails on the store."""
    import threading

    from django.db import connections

    from mrtrweb.text import results
    from mrtrweb.gate import GateRejection

    _, op = await _waiting(seeded)
    gate = operations.get_gate()
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    # read before the race: the winner closes the round, so a loser reading it afterwards finds none
    def read_responses() -> dict:
        try:
            return _responses(op)
        finally:
            connections.close_all()  # this thread's connection: none left open at the database's drop

    responses, params = await asyncio.to_thread(read_responses), results.stored_params(op.params)

    def answer(i: int) -> None:
        try:
            barrier.wait()
            gate.respond(operations.handle_of(op), retry_id=f"race-{i}", responses=responses, user=str(op.user_id),
                         tenant=str(op.tenant_id), params=params)
            outcomes.append("sent")
        except GateRejection as exc:
            outcomes.append(exc.code)
        except Exception as exc:  # noqa: BLE001 -- reported by the assertion
            outcomes.append(type(exc).__name__)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    await asyncio.to_thread(lambda: [t.join() for t in threads])
    assert sorted(outcomes) == ["inactive_mrtr_round", "sent"], outcomes


def _responses(op: Operation) -> dict:
    """An accept for every input request of ``op``'s open round (read from its binding)."""
    state = operations.get_gate().state(operations.handle_of(op))
    return {key: {"action": "accept"} for key in state.round.requests}
