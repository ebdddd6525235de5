"""The in-process store's sweep (:class:`mrtrweb.gate.InMemoryBindingStore`): expired claims are
dropped from the front of the claims table, which holds them in the order they were taken, and a
claim left behind a longer-lived one is never counted alive."""

from __future__ import annotations

import pytest

from mrtrweb.gate import InMemoryBindingStore
from mrtrweb.gate import store as store_module


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(store_module.time, "monotonic", c.monotonic)
    return c


def test_expired_claims_are_swept_and_live_ones_kept(clock):
    store = InMemoryBindingStore()
    for i in range(300):
        assert store.claim("t", f"old-{i}", 10)
    clock.now += 5
    for i in range(100):
        assert store.claim("t", f"new-{i}", 10)
    clock.now += 6  # the first 300 expired, the 100 not
    len(store)  # sweeps
    assert sorted(store._claims) == sorted(("t", f"new-{i}") for i in range(100))
    assert not store.claim("t", "new-7", 10)  # still consumed
    assert store.claim("t", "old-7", 10)  # expired: may be taken again


def test_a_claim_behind_a_longer_lived_one_waits_but_is_never_alive(clock):
    store = InMemoryBindingStore()
    assert store.claim("t", "long", 100)
    assert store.claim("t", "short", 1)
    clock.now += 5
    len(store)
    assert ("t", "short") in store._claims  # behind "long": the sweep stopped there
    assert store.claim("t", "short", 1)  # but expired: taken again at once
    assert not store.claim("t", "short", 1)
    clock.now += 100
    len(store)
    assert store._claims == {}


def test_a_write_sweeps_every_256_writes(clock):
    store = InMemoryBindingStore()
    for i in range(255):
        store.claim("t", f"c-{i}", 1)
    clock.now += 2
    store.claim("t", "c-255", 1)  # the 256th write: a sweep, before it is written
    assert list(store._claims) == [("t", "c-255")]
