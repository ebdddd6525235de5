"""What a worker holds while the database is away (mrtrweb.operations.holding, issue 26): an
outcome waits past OUTCOME_HOLD_S (logged once as an error) until the database answers, the
gauge counts it meanwhile, MAX_HELD_OUTCOMES bounds how many, and which operations a task follows
is tracked. The real outage, with worker processes and PostgreSQL cut: tests/operations/test_outage_hold.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.db import IntegrityError, OperationalError, ProgrammingError

from mrtrweb.runtime import metrics
from mrtrweb.operations import holding


class Database:
    """``holding._fresh_connection`` that fails while ``down``."""

    def __init__(self) -> None:
        self.down = True
        self.calls = 0

    def __call__(self, op_id) -> None:
        self.calls += 1
        if self.down:
            raise OperationalError("connection refused")


def _gauge() -> float:
    return metrics.REGISTRY.get_sample_value("mrtrweb_outcomes_held") or 0.0


async def test_an_outcome_is_held_past_the_hold_until_the_database_answers(monkeypatch, settings, caplog):
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "OUTCOME_HOLD_S": 0.3, "MAX_HELD_OUTCOMES": 1}
    db = Database()
    monkeypatch.setattr(holding, "_fresh_connection", db)
    before = _gauge()
    caplog.set_level(logging.WARNING, "mrtrweb.operations")
    first = asyncio.create_task(holding.database_back("op-1"))
    await asyncio.sleep(1.5)  # five holds long
    assert not first.done() and holding.held() == 1 and _gauge() == before + 1
    assert "has not answered for 0.3s; still waiting" in caplog.text
    assert caplog.text.count("still waiting") == 1  # escalated once, not every attempt
    not_kept = metrics.REGISTRY.get_sample_value("mrtrweb_outcomes_not_kept_total") or 0.0
    with pytest.raises(holding.HoldFull):  # the cap: one more is not kept
        await holding.database_back("op-2")
    assert metrics.REGISTRY.get_sample_value("mrtrweb_outcomes_not_kept_total") == not_kept + 1
    waiting = asyncio.create_task(holding.database_back("op-3", hold=False))  # marking failed: not capped
    await asyncio.sleep(0.3)
    assert not waiting.done() and holding.held() == 1
    db.down = False
    await asyncio.wait_for(asyncio.gather(first, waiting), 5)
    assert holding.held() == 0 and _gauge() == before
    assert "the database answers again after" in caplog.text


async def test_an_outcome_is_not_held_when_the_database_answers(monkeypatch):
    db = Database()
    db.down = False
    monkeypatch.setattr(holding, "_fresh_connection", db)
    await holding.database_back("op-4")
    assert db.calls == 1 and holding.held() == 0


def test_following_is_counted_per_operation():
    assert "op-5" not in holding.followed()
    with holding.following("op-5"):
        with holding.following("op-5"):
            assert "op-5" in holding.followed()
        assert "op-5" in holding.followed()
    assert "op-5" not in holding.followed()


def _lock_wait() -> OperationalError:
    """A lock wait that ran out, as the project's database reports it (SQLite: "database is locked"
    after its busy timeout; PostgreSQL: lock_not_available, SQLSTATE 55P03)."""
    from django.db import connection

    if connection.vendor == "sqlite":
        return OperationalError("database is locked")
    exc = OperationalError("canceling statement due to lock timeout")
    exc.__cause__ = type("LockNotAvailable", (Exception,), {"sqlstate": "55P03"})()
    return exc


async def test_an_error_the_database_answers_is_not_waited_for(monkeypatch):
    """Only an outage is waited for as long as it takes: a lock wait that ran out (SQLite's
    "database is locked" after its busy timeout) or a missing table is an answer, raised at once --
    a task retrying it forever would contend for SQLite's one write lock for the rest of the process."""
    for answer in (_lock_wait(), ProgrammingError('relation "mrtrweb_operation" does not exist'),
                   IntegrityError("violates foreign key constraint")):
        def fresh(op_id, answer=answer):
            raise answer

        monkeypatch.setattr(holding, "_fresh_connection", fresh)
        with pytest.raises(type(answer)):
            await asyncio.wait_for(holding.database_back("op-6"), 2)
        assert holding.held() == 0


async def test_marking_failed_gives_up_on_an_answer(monkeypatch, caplog):
    from mrtrweb.operations import runtime

    db = Database()
    db.down = False
    monkeypatch.setattr(holding, "_fresh_connection", db)
    tries = []

    async def load(op_id):
        tries.append(op_id)
        raise _lock_wait()

    monkeypatch.setattr(runtime, "load_operation", load)
    caplog.set_level(logging.WARNING, "mrtrweb.operations")
    await asyncio.wait_for(holding.mark_failed("op-7", "internal_error", "x"), 2)
    assert tries == ["op-7"] and "was not marked failed: the database answered OperationalError" in caplog.text


def _running_row(seeded, worker: str, age_s: float):
    import datetime
    import uuid

    from django.utils import timezone

    from mrtrweb.models import Operation

    server, rid = seeded["servers"]["acme"], f"mrtr-{uuid.uuid4()}"
    op = Operation.objects.create(tenant=server.tenant, user=seeded["users"]["alice"], server=server,
                                  method="tools/call", name="echo", params={"name": "echo", "arguments": {}},
                                  request_id=rid, latest_request_id=rid)
    Operation.objects.filter(pk=op.pk).update(status="running", worker=worker, updated_at=timezone.now()
                                              - datetime.timedelta(seconds=age_s))
    return str(op.pk)


def _status(op_id: str) -> tuple[str, str]:
    from mrtrweb.models import Operation

    return tuple(Operation.objects.filter(pk=op_id).values_list("status", "error_code").get())


async def test_the_own_check_judges_once_a_period_per_process_and_only_when_trusted(seeded, settings,
                                                                                      trusted_worker):
    """The untracked check ends an operation naming this worker with nothing following it only
    after a period (two event loops' heartbeats checking a moment apart are not two periods), only
    once its row has been quiet for the grace, and only while this worker is trusted."""
    from asgiref.sync import sync_to_async

    from mrtrweb.runtime import workers
    from mrtrweb.operations import untracked

    settings.MRTRWEB = {"HEARTBEAT_S": 0.2}
    stranded = await sync_to_async(_running_row)(seeded, workers.WORKER_ID, 60)
    moving = await sync_to_async(_running_row)(seeded, workers.WORKER_ID, 0)  # its row just changed
    untracked._last_check, _ = -1e9, untracked._missing_since.clear()
    assert await untracked.check_own() == 0  # first seen missing
    assert await untracked.check_own() == 0  # a moment later (another loop's heartbeat): not judged again
    await asyncio.sleep(0.25)
    assert await untracked.check_own() == 1
    assert await sync_to_async(_status)(stranded) == ("interrupted", "untracked")
    assert await sync_to_async(_status)(moving) == ("running", "")
    workers.reset()  # not trusted (the database does not answer its renewals): judges nothing
    later = await sync_to_async(_running_row)(seeded, workers.WORKER_ID, 60)
    for _ in range(3):
        untracked._last_check = -1e9
        assert await untracked.check_own() == 0
        await asyncio.sleep(0.25)
    assert await sync_to_async(_status)(later) == ("running", "")
