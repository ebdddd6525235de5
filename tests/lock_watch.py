"""After each test: no connection of the test database is left holding a lock (or waiting on one).

ci43 (session 25's start): one pytest-xdist worker's SQLite test database stayed write-locked from
``tests/chat/test_chat_socket.py`` on; every later test of that worker waited 20 s for it three
times and failed ("database is locked"), 16 minutes in all, and what held the lock was not named.
ci41 (PostgreSQL) held a loop's close for 15 minutes on a task that would not end. Both look like a
thread left blocked inside a transaction. Here, after each test's teardown:

* **SQLite** -- a connection of our own tries ``BEGIN IMMEDIATE`` without waiting; while the file
  stays locked for :data:`GRACE_S` seconds,
* **PostgreSQL** -- ``pg_stat_activity`` of the test database: another backend ``idle in
  transaction`` or waiting on a lock for :data:`GRACE_S` seconds,

the stacks of every thread of this process (and the backends' rows) are appended to
``var/test-logs/stuck-tasks.txt`` (printed at the end of ``./dev test``) and the test errors at
teardown naming it: the test that left the lock is the one reported, not the many after it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
import traceback

import pytest

from tests.loop_teardown import STUCK_FILE

#: seconds a lock may outlive the test's teardown (a live server's request still ending) before
#: it is reported
GRACE_S = 8.0

_PG_HELD = ("SELECT pid, state, wait_event_type, wait_event, now() - xact_start, left(query, 300) "
            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND (state LIKE 'idle in transaction%%' OR wait_event_type = 'Lock')")


def thread_stacks() -> str:
    """Every thread of this process: its name and stack (innermost last)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        out.append(f"--- thread {names.get(ident, ident)}\n{''.join(traceback.format_stack(frame, limit=30))}")
    return "\n".join(out)


def _sqlite_locked(path: str) -> bool:
    try:
        probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as exc:
        return "locked" in str(exc) or "busy" in str(exc)
    finally:
        probe.close()


def _pg_held(settings: dict) -> list[tuple]:
    import psycopg

    options = {k: v for k, v in (("host", settings.get("HOST")), ("port", settings.get("PORT")),
                                 ("user", settings.get("USER")), ("password", settings.get("PASSWORD"))) if v}
    with psycopg.connect(dbname=settings["NAME"], autocommit=True, connect_timeout=5, **options) as conn:
        return conn.execute(_PG_HELD).fetchall()


def _held() -> str:
    """What holds the default test database now ('' when nothing does)."""
    if "django" not in sys.modules:
        return ""
    from django.conf import settings

    if not settings.configured:
        return ""
    from django.db import connections

    db = connections["default"].settings_dict
    name = str(db.get("NAME") or "")
    if name != str((db.get("TEST") or {}).get("NAME") or "") and "test" not in os.path.basename(name):
        return ""  # not (yet) a test database: its TEST name, or made with "test" in its name
    engine = db.get("ENGINE", "")
    if engine.endswith("sqlite3"):
        return "the SQLite file is write-locked" if name != ":memory:" and os.path.exists(name) and \
            _sqlite_locked(name) else ""
    if engine.endswith("postgresql"):
        try:
            rows = _pg_held(db)
        except Exception:  # noqa: BLE001 -- the watch never fails a test by itself being unable to look
            return ""
        return "\n".join(f"backend {r[0]}: {r[1]}, waiting {r[2]}/{r[3]}, in transaction {r[4]}: {r[5]}"
                         for r in rows)
    return ""


_DB_FIXTURES = frozenset({"db", "transactional_db", "django_db_setup", "live_server"})


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        if _DB_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(item.iter_markers("django_db")):
            _watch(item)


def _watch(item) -> None:
    held = _held()
    ends = time.monotonic() + GRACE_S
    while held and time.monotonic() < ends:
        time.sleep(0.2)
        held = _held()
    if not held:
        return
    STUCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with STUCK_FILE.open("a") as out:
        out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {item.nodeid}: the test database is held "
                  f"{GRACE_S:g} s after its teardown\n{held}\n{thread_stacks()}\n")
    pytest.fail(f"the test database is still held {GRACE_S:g} s after this test's teardown ({held.splitlines()[0]}); "
                f"every thread's stack is in {STUCK_FILE}", pytrace=False)
