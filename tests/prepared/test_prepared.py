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
    assert _prepared_runs() == 7  # one prepared statement of this connection ran all seven


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
    assert _run_probe(3) == [1, 2, 3] and _prepared_runs() == 3
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
