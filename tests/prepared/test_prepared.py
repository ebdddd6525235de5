"""mrtrweb.prepared: the product's hand-compiled statements prepared once per connection on
PostgreSQL (issue 30: PostgreSQL's planning was 0.1-1.2 ms of each round statement), Django's own
cursor elsewhere or with ``MRTRWEB["PREPARED_STATEMENTS"]`` off; either way Django's cursor wrapper
(execute wrappers, error translation). Runs on SQLite (run A) and PostgreSQL (run B)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import DataError, connection

from mrtrweb import conf, prepared
from mrtrweb.conf import from_environ

pytestmark = pytest.mark.django_db(transaction=True)

_PROBE = "SELECT CAST(%s AS integer) + 1 AS mrtrweb_prepared_probe"


def _prepared_runs() -> int:
    """How often this connection ran the probe as a prepared statement (0: never prepared)."""
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements "
                    "WHERE statement LIKE %s", ["%mrtrweb_prepared_probe%"])
        return int(cur.fetchone()[0])


def _run_probe(times: int) -> list[int]:
    out = []
    for k in range(times):
        with prepared.cursor(connection) as cur:
            cur.execute(_PROBE, [k])
            out.append(cur.fetchone()[0])
    return out


def test_on_postgresql_a_statement_is_prepared_once_then_run_by_its_plan(settings):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    connection.close()
    assert prepared.prepares(connection)
    assert _run_probe(7) == [1, 2, 3, 4, 5, 6, 7]  # parameters bound server-side, each its own value
    # the first run parsed and planned as any statement; prepared at the second, which ran the rest
    assert _prepared_runs() == 6
    assert connection.connection.prepare_threshold is None  # Django's: put back after each run


def test_with_the_setting_off_postgresql_gets_djangos_own_cursor(settings):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    import psycopg

    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": False}
    connection.close()
    assert not prepared.prepares(connection)
    assert _run_probe(7) == [1, 2, 3, 4, 5, 6, 7]
    assert _prepared_runs() == 0
    with prepared.cursor(connection) as cur:
        assert isinstance(cur.cursor, psycopg.ClientCursor)  # Django's default: parameters inlined


def test_another_database_gets_djangos_own_cursor(settings):
    if connection.vendor == "postgresql":
        pytest.skip("the other databases' path")
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    assert not prepared.prepares(connection)
    assert _run_probe(3) == [1, 2, 3]


@pytest.mark.parametrize("on", [True, False])
def test_the_cursor_is_djangos_wrapper_its_wrappers_see_the_statement_and_errors_are_djangos(settings, on):
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": on}
    if connection.vendor == "postgresql":
        connection.close()
    seen: list[str] = []

    def spy(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        assert _run_probe(2) == [1, 2]
    assert seen == [_PROBE, _PROBE]  # what tests/operations/test_round_cost.py counts
    if connection.vendor == "postgresql":
        with pytest.raises(DataError):  # division_by_zero, as django.db's error
            with prepared.cursor(connection) as cur:
                cur.execute("SELECT 1 / %s::int", [0])
        assert _run_probe(1) == [1]  # the connection still works


def test_the_setting_is_a_boolean_from_settings_or_the_environment(settings):
    settings.MRTRWEB = {"PREPARED_STATEMENTS": "no"}
    with pytest.raises(ImproperlyConfigured, match="PREPARED_STATEMENTS"):
        conf.get("PREPARED_STATEMENTS")
    settings.MRTRWEB = {}
    assert conf.get("PREPARED_STATEMENTS") is True
    assert from_environ({"MRTRWEB_PREPARED_STATEMENTS": "0"}) == {"PREPARED_STATEMENTS": False}


def test_after_a_rollback_the_statements_are_prepared_again_and_still_run(settings):
    """psycopg forgets (and deallocates) a connection's prepared statements at a rollback, a
    savepoint's included: the next run prepares again, nothing fails for a missing statement."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    from django.db import IntegrityError, transaction

    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    connection.close()
    assert _run_probe(3) == [1, 2, 3] and _prepared_runs() == 2
    for nested in (False, True):
        with pytest.raises(IntegrityError):
            with transaction.atomic():
                if nested:  # the outer block commits; the inner one ends in ROLLBACK TO SAVEPOINT
                    try:
                        with transaction.atomic():
                            assert _run_probe(1) == [1]
                            raise IntegrityError("to the savepoint")
                    except IntegrityError:
                        pass
                    assert _run_probe(2) == [1, 2]
                    raise IntegrityError("and the whole block")
                assert _run_probe(1) == [1]
                raise IntegrityError("rolled back")
        assert _run_probe(2) == [1, 2]


def _table(name: str):
    import contextlib

    @contextlib.contextmanager
    def made():
        with connection.cursor() as cur:
            cur.execute(f"CREATE TABLE {name} (v integer)")
            cur.execute(f"INSERT INTO {name} VALUES (1)")
        try:
            yield
        finally:
            connection.close()  # (its prepared statements with it)
            with connection.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {name}")
    return made()


def test_a_statement_a_migration_changed_under_it_runs_again_unprepared_once_and_is_prepared_afresh(settings, caplog):
    """Another connection changes the type of a column a prepared statement returns (a deploy's
    migration while workers run): PostgreSQL refuses the stored plan ("cached plan must not change
    result type", 0A000) -- on every later run, since psycopg keeps the name. The cursor forgets
    the connection's prepared statements and, outside a transaction, runs the statement again."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    import psycopg

    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    connection.close()
    name = "mrtrweb_prepared_probe_t"
    sql = f"SELECT v FROM {name} WHERE v >= %s"
    with _table(name):
        for _ in range(3):
            with prepared.cursor(connection) as cur:
                cur.execute(sql, [0])
                assert cur.fetchall() == [(1,)]
        other = connection.settings_dict
        with psycopg.connect(host=other["HOST"] or None, port=other["PORT"] or None, dbname=other["NAME"],
                             user=other["USER"] or None, password=other["PASSWORD"] or None, autocommit=True) as c2:
            c2.execute(f"ALTER TABLE {name} ALTER COLUMN v TYPE bigint")
        for _ in range(3):
            with prepared.cursor(connection) as cur:
                cur.execute(sql, [0])
                assert cur.fetchall() == [(1,)]
    assert "prepared statements of a database connection forgotten" in caplog.text


def test_a_statement_the_session_forgot_runs_again(settings):
    """The session's prepared statements deallocated behind psycopg's back (a pooler's ``DISCARD
    ALL``): the next run does not fail for the missing name."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    connection.close()
    assert _run_probe(3) == [1, 2, 3] and _prepared_runs() == 2
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")  # libpq itself: psycopg does not see it
    assert _run_probe(3) == [1, 2, 3]
    assert _prepared_runs() == 2  # prepared afresh: run 1 again unprepared after the failure, runs 2 and 3 prepared


def test_the_projects_own_queries_are_not_prepared(settings):
    """Between the product's statements the connection's ``prepare_threshold`` is Django's
    (``None``): a project with server-side binding gets no prepared statement of its own."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    connection.close()
    assert _run_probe(3) == [1, 2, 3]
    raw = connection.connection
    from django.db.backends.postgresql.base import ServerBindingCursor

    for k in range(6):
        cur = ServerBindingCursor(raw)
        cur.execute("SELECT CAST(%s AS integer) AS project_query", [k])
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%project_query%"])
        assert cur.fetchone()[0] == 0


def test_a_projects_own_cursor_factory_is_kept(settings):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    options = connection.settings_dict.setdefault("OPTIONS", {})
    from django.db.backends.postgresql.base import Cursor

    options["cursor_factory"] = Cursor
    try:
        assert not prepared.prepares(connection)
    finally:
        del options["cursor_factory"]
    assert prepared.prepares(connection)


def test_a_long_statements_placeholders_are_converted_once_and_its_values_bound_each_run(settings):
    """psycopg re-parses the placeholders of a statement over 4,096 bytes or 50 parameters on every
    run (its own cache skips them); the round's joined statements are that long, so the cursor keeps
    their conversion (issue 30, session 24: ~1.5 ms of a headless round). Each run still binds its
    own values, named and positional placeholders alike, and ``%%`` stays a literal ``%``."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": True}
    connection.close()
    with prepared.cursor(connection) as cur:
        query_cls = type(cur.cursor)._query_cls
    conversions = getattr(query_cls, "conversions", None)
    # this psycopg is the one the conversion was written against (an upgrade that moved its
    # internals would silently lose the gain: this says so)
    assert conversions is not None, f"psycopg's query class changed: {query_cls!r}"
    width = 60  # > psycopg's 50 parameters
    long_sql = ("SELECT " + ", ".join(f"CAST(%s AS integer) + {k} AS c{k}" for k in range(width))
                + ", 'a%%b' AS lit /* " + "x" * 4200 + " */")
    assert len(long_sql) > 4096
    before = conversions.cache_info()
    rows = []
    for run in range(4):
        with prepared.cursor(connection) as cur:
            cur.execute(long_sql, [run * 100 + k for k in range(width)])
            rows.append(cur.fetchone())
    for run, row in enumerate(rows):
        assert list(row[:width]) == [run * 100 + 2 * k for k in range(width)]
        assert row[width] == "a%b"
    after = conversions.cache_info()
    assert after.misses - before.misses == 1 and after.hits - before.hits == 3
    named = "SELECT CAST(%(a)s AS integer) * 10 + CAST(%(b)s AS integer), CAST(%(a)s AS integer) /* " + "y" * 4200 + " */"
    for a, b in ((1, 2), (3, 4)):
        with prepared.cursor(connection) as cur:
            cur.execute(named, {"a": a, "b": b})
            assert cur.fetchone() == (a * 10 + b, a)


def test_a_psycopg_whose_conversion_changed_shape_keeps_its_own(monkeypatch):
    """The kept conversion is used only where it gives what psycopg's own gives (checked once, on
    sample statements): a psycopg whose internals return something else -- here one more item --
    is served by its own query class, so no statement fails or differs after an upgrade."""
    pytest.importorskip("psycopg")
    from psycopg import _queries

    assert prepared._converting_query_class() is not None  # this psycopg: the kept conversion
    real = _queries._query2pg_nocache
    monkeypatch.setattr(_queries, "_query2pg_nocache", lambda query, encoding: (*real(query, encoding), None))
    assert prepared._converting_query_class() is None
    # one that converts otherwise than psycopg's own path (its cached copy is the real one)
    monkeypatch.setattr(_queries, "_query2pg_nocache",
                        lambda query, encoding: (real(query, encoding)[0].replace(b"$", b"?"), *real(query, encoding)[1:]))
    assert prepared._converting_query_class() is None
