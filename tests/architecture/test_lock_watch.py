"""tests/lock_watch.py: a test that leaves its database locked (a thread inside a transaction) errors
at its own teardown with every thread's stack written down -- not the many tests after it that would
wait for the lock (ci43); a lock released within the grace is no report; run_suite shows the report
short."""

from __future__ import annotations

import sqlite3
import threading
from types import SimpleNamespace

import pytest

from tests import lock_watch
from tests.run_suite import stuck_summary

pytestmark = [pytest.mark.django_db(transaction=True)]


def _holder(path: str, held: threading.Event, release: threading.Event) -> None:
    conn = sqlite3.connect(path, timeout=5, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    held.set()
    release.wait(30)
    conn.execute("ROLLBACK")
    conn.close()


@pytest.fixture
def watched(monkeypatch, tmp_path):
    """The watch writing to a file of the test's own (returned); SQLite only (run B's PostgreSQL
    half reads pg_stat_activity)."""
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the SQLite half of the watch")
    monkeypatch.setattr(lock_watch, "STUCK_FILE", tmp_path / "stuck-tasks.txt")
    return tmp_path / "stuck-tasks.txt"


def _hold(name: str = "holder-in-a-transaction") -> tuple[threading.Thread, threading.Event]:
    """A thread holding the test database's write lock until the event returned is set."""
    from django.db import connection

    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_holder, args=(connection.settings_dict["NAME"], held, release), name=name)
    holder.start()
    assert held.wait(10)
    return holder, release


def test_a_database_left_locked_fails_the_test_that_left_it_and_names_the_thread(monkeypatch, watched):
    monkeypatch.setattr(lock_watch, "GRACE_S", 0.5)
    item = SimpleNamespace(nodeid="tests/x.py::test_left_a_lock", fixturenames=["transactional_db"])
    assert lock_watch._held() == ""
    lock_watch._watch(item)  # nothing held: no report
    assert not watched.exists()
    holder, release = _hold()
    try:
        with pytest.raises(pytest.fail.Exception, match="still held"):
            lock_watch._watch(item)
    finally:
        release.set()
        holder.join(10)
    report = watched.read_text()
    assert "tests/x.py::test_left_a_lock" in report and "write-locked" in report
    assert "--- thread holder-in-a-transaction" in report and "in _holder" in report
    short = stuck_summary(report)
    assert "holder-in-a-transaction" in short and "release.wait(30)" in short
    assert lock_watch._held() == ""  # released: the next test's watch is quiet


def test_a_lock_released_within_the_grace_is_not_reported(monkeypatch, watched):
    monkeypatch.setattr(lock_watch, "GRACE_S", 5)
    holder, release = _hold("brief-holder")
    threading.Timer(0.5, release.set).start()
    lock_watch._watch(SimpleNamespace(nodeid="t", fixturenames=["db"]))
    holder.join(10)
    assert not watched.exists()
