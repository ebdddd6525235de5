"""Worker leases, in process (issue 14, item 2): each rule of mrtrweb.runtime.workers on its own.

A worker is judged dead only on evidence -- its lease present and not renewed for three periods
(the database's clock), or absent although an operation names it -- and only by a worker whose
own last three renewals succeeded; a lease that cannot be read counts as alive; an MRTR round
waiting for the person is never interrupted. The real-process checks (Redis restarted empty,
PostgreSQL cut, SIGKILL) are in tests/runtime/test_worker_leases.py.
"""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError
from django.utils import timezone

from mrtrweb import operations
from mrtrweb.runtime import workers
from mrtrweb.models import AuditEvent, Operation, WorkerLease

pytestmark = [pytest.mark.django_db(transaction=True)]

GONE = "gone-host:1:deadbeef"


@pytest.fixture(autouse=True)
def _fresh_lease_state():
    workers.reset()
    yield
    workers.reset()


def _db_now() -> datetime.datetime:
    """The database's clock (what leases are judged by)."""
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("SELECT STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')")
            return datetime.datetime.fromisoformat(cur.fetchone()[0]).replace(tzinfo=datetime.timezone.utc)
        cur.execute("SELECT NOW()")
        return cur.fetchone()[0]


def _lease(worker_id: str, age_s: float) -> None:
    beat = _db_now() - datetime.timedelta(seconds=age_s)
    WorkerLease.objects.update_or_create(worker_id=worker_id, defaults={"beat_at": beat, "started_at": beat})


def _op(seeded, worker: str, status: str = Operation.Status.RUNNING) -> Operation:
    server = seeded["servers"]["acme"]
    return Operation.objects.create(tenant=server.tenant, user=seeded["users"]["alice"], server=server,
                                    method="tools/call", name="long_task", params={}, request_id="r-1",
                                    latest_request_id="r-1", status=status, worker=worker)


def test_renew_writes_the_lease_with_the_databases_clock(db, monkeypatch):
    """The worker's own clock runs an hour ahead (hosts drift): the lease still says "now" as the
    database sees it, so the other workers judge it fresh."""
    monkeypatch.setattr(timezone, "now", lambda: datetime.datetime.now(datetime.timezone.utc)
                        + datetime.timedelta(hours=1))
    workers.renew()
    lease = WorkerLease.objects.get(pk=workers.WORKER_ID)
    assert abs((lease.beat_at - _db_now()).total_seconds()) < 5
    assert lease.started_at <= lease.beat_at and not lease.draining
    first = lease.beat_at
    workers.renew()
    assert WorkerLease.objects.get(pk=workers.WORKER_ID).beat_at >= first
    assert WorkerLease.objects.count() == 1


def _trust() -> None:
    workers._state.streak = workers.TRUSTED_RENEWALS
    workers._state.last_ok = time.monotonic()


def test_dead_only_on_evidence(db):
    _trust()
    _lease("fresh:1:a", age_s=0)
    _lease("late:1:b", age_s=workers.period() * 2)  # two periods late: not yet evidence
    _lease("stale:1:c", age_s=workers.period() * 3 + 2)
    assert not workers.judged_dead("fresh:1:a")
    assert not workers.judged_dead("late:1:b")
    assert workers.judged_dead("stale:1:c")
    assert workers.judged_dead(GONE)  # absent although (the caller says) an operation names it
    assert not workers.judged_dead(workers.WORKER_ID)  # never itself
    assert not workers.judged_dead("")  # no worker named: nothing to judge


def test_an_untrusted_worker_judges_nobody(db):
    """After a database outage every lease is stale: a worker whose own renewals did not succeed
    three times in a row yet gives the others time to renew theirs."""
    _lease("stale:1:c", age_s=3600)
    _trust()
    for streak in range(workers.TRUSTED_RENEWALS):
        workers._state.streak = streak
        assert not workers.judged_dead("stale:1:c") and not workers.judged_dead(GONE)
    workers._state.streak = workers.TRUSTED_RENEWALS
    assert workers.judged_dead("stale:1:c")
    # a worker whose own loop has not renewed for more than two periods (stuck) judges nobody
    workers._state.last_ok = time.monotonic() - workers.period() * 2 - 1
    assert not workers.trusted() and not workers.judged_dead("stale:1:c")


def test_a_lease_that_cannot_be_read_counts_as_alive(db, monkeypatch, caplog):
    _trust()

    def broken():
        raise OperationalError("connection refused")

    monkeypatch.setattr(workers, "fresh_leases", broken)
    assert not workers.judged_dead(GONE)
    assert "counts as alive" in caplog.text


async def test_the_streak_counts_loop_renewals_and_a_failure_resets_it(transactional_db, monkeypatch):
    for n in range(1, workers.TRUSTED_RENEWALS + 1):
        assert not workers.trusted()
        await workers.beat_once()
        assert workers._state.streak == n
    assert workers.trusted()

    def down():
        raise OperationalError("the database is down")

    monkeypatch.setattr(workers, "renew", down)
    await workers.beat_once()
    assert workers._state.streak == 0 and not workers.trusted()


async def test_reaper_interrupts_a_call_whose_worker_is_dead(seeded, trusted_worker):
    await sync_to_async(_lease)("stale:1:c", workers.period() * 3 + 2)
    await sync_to_async(_lease)("fresh:1:a", 0)
    stale = await sync_to_async(_op)(seeded, "stale:1:c")
    gone = await sync_to_async(_op)(seeded, GONE)
    alive = await sync_to_async(_op)(seeded, "fresh:1:a")
    mine = await sync_to_async(_op)(seeded, workers.WORKER_ID)
    assert await operations.reap_interrupted() == 2
    assert await operations.reap_interrupted() == 0  # settled once
    for op in (stale, gone):
        op = await Operation.objects.aget(pk=op.pk)
        assert (op.status, op.error_code, op.worker) == (Operation.Status.INTERRUPTED, workers.WORKER_LOST, "")
        assert "worker handling this call stopped" in op.error_message
        events = [e async for e in AuditEvent.objects.filter(operation_id=op.pk).values_list("event", "code")]
        assert events == [("failed", workers.WORKER_LOST)]
    for op in (alive, mine):
        assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.RUNNING


async def test_untrusted_reaper_does_nothing(seeded):
    op = await sync_to_async(_op)(seeded, GONE)
    assert not workers.trusted()
    assert await operations.reap_interrupted() == 0
    assert await operations.reap_interrupted(op.pk) == 0
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.RUNNING


async def test_an_mrtr_round_waiting_is_never_reaped(seeded, trusted_worker):
    """Even when it (wrongly, e.g. a row written by an older version) names a dead worker: only a
    call in flight or a legacy round held open depends on its worker."""
    op = await sync_to_async(_op)(seeded, GONE, Operation.Status.AWAITING_INPUT)
    assert await operations.reap_interrupted() == 0
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.AWAITING_INPUT


async def test_worker_named_only_while_it_drives_the_call(seeded, trusted_worker):
    """Started: names this worker (its lease written first). Round handed to the person: no
    worker, round_expires_at set. Answered: this worker sends the retry. Ended: no worker."""
    from tests.answering import post_answer

    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/connect_account/", {"arg-provider": "gitlab"})
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert await WorkerLease.objects.filter(pk=workers.WORKER_ID).aexists()
    assert op.worker in (workers.WORKER_ID, "")  # "" once the round already arrived
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.AWAITING_INPUT and op.worker == ""
    assert op.round_expires_at is not None
    assert 0 < (op.round_expires_at - timezone.now()).total_seconds() <= 600
    await client.get(f"/mcp/operations/{op.id}/")  # the consent receipt
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 302
    running = await Operation.objects.aget(pk=op.pk)
    assert running.status in (Operation.Status.RUNNING, Operation.Status.COMPLETED)
    if running.status == Operation.Status.RUNNING:
        assert running.worker == workers.WORKER_ID and running.round_expires_at is None
    await operations.wait_idle()
    done = await Operation.objects.aget(pk=op.pk)
    assert (done.status, done.worker, done.round_expires_at) == (Operation.Status.COMPLETED, "", None)


def test_stale_leases_are_forgotten_after_long(db):
    _trust()
    _lease("ancient:1:a", workers.FORGET_S + 60)
    _lease("stale:1:b", workers.period() * 10)
    assert workers.forget_stale_leases() == 1
    assert set(WorkerLease.objects.values_list("pk", flat=True)) == {"stale:1:b"}


def test_release_deletes_only_this_workers_lease(db):
    workers.renew()
    _lease("other:1:a", 0)
    assert workers.release()
    assert set(WorkerLease.objects.values_list("pk", flat=True)) == {"other:1:a"}
    assert not workers._state.written


async def test_renewals_go_on_while_the_event_loop_is_busy(transactional_db, settings):
    """The lease thread renews on its own schedule: a burst of work on the event loop (here: the
    loop blocked for five periods) or a slow reaper never makes a live worker's lease go stale."""
    settings.MRTRWEB = {"HEARTBEAT_S": 0.3}
    await workers.ensure_heartbeat()
    try:
        before = workers._state.streak
        time.sleep(1.5)  # the event loop does nothing else meanwhile
        assert workers._state.streak >= before + 3, workers._state.__dict__
        beat = await WorkerLease.objects.aget(pk=workers.WORKER_ID)
        age = (await sync_to_async(_db_now)() - beat.beat_at).total_seconds()
        assert age < 0.3 * workers.STALE_PERIODS
    finally:
        await workers.stop_heartbeat()
    await workers.lease_call(lambda: None)  # after a renewal that was under way
    stopped = workers._state.streak
    await asyncio.sleep(0.9)
    assert workers._state.streak == stopped  # no heartbeat loop: no renewals


async def test_a_running_heartbeat_does_not_wake_the_lease_thread_again(transactional_db, monkeypatch):
    """Every operation calls ensure_heartbeat: once the heartbeat runs and the lease thread renews
    under it, a call wakes the thread for nothing (issue 30: a queue put and a thread switch per
    operation); a thread gone (a fork, a crash) is woken, so started again."""
    from mrtrweb.runtime import leases

    await workers.ensure_heartbeat()
    try:
        woken = []
        real_wake = leases._lease_thread.wake
        monkeypatch.setattr(leases._lease_thread, "wake", lambda: (woken.append(1), real_wake())[1])
        await workers.ensure_heartbeat()
        await workers.ensure_heartbeat()
        assert woken == []
        monkeypatch.setattr(leases._lease_thread, "running", lambda: False)
        await workers.ensure_heartbeat()
        assert woken == [1]
    finally:
        await workers.stop_heartbeat()
