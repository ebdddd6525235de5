"""A test that runs only on PostgreSQL must be in the suite's PostgreSQL run: ``./dev test`` runs
the in-process suite on SQLite (run A), where such a test skips, and again on PostgreSQL only for
the files of :data:`tests.run_suite.PG_REDIS_FILES` (run B). A file that skips unless the database
is PostgreSQL and is not listed there is never run by the suite: its tests cannot fail (session 20's
review: the joined audit append's own tests were in that case)."""

from __future__ import annotations

from pathlib import Path

from tests.run_suite import PG_REDIS_FILES

ROOT = Path(__file__).resolve().parents[2]
#: how a test says "PostgreSQL only" in this suite
MARKS = ('vendor != "postgresql"', "vendor != 'postgresql'")


def test_every_postgresql_only_test_file_is_in_the_postgresql_run():
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        if "pytest.skip" in text and any(mark in text for mark in MARKS):
            found.append(str(path.relative_to(ROOT)))
    assert found, "the check finds nothing: its marks are out of date"
    assert sorted(set(found) - set(PG_REDIS_FILES)) == []
