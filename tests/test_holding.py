"""What a worker holds while the database is away (mrtrweb.operations.holding, issue 26): an
outcome waits past OUTCOME_HOLD_S (logged once as an error) until the database answers, the
gauge counts it meanwhile, MAX_HELD_OUTCOMES bounds how many, and which operations a task follows
is tracked. The real outage, with worker processes and PostgreSQL cut: tests/test_outage_hold.py."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.db import OperationalError

from mrtrweb import metrics
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
