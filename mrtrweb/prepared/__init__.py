"""Prepared statements: how the product's hand-compiled SQL reaches the database (issue 30).

Owns :func:`cursor`, the one way the round path's precompiled statements -- the access checks,
the operation's row, the binding store's steps, the audit chain -- are run. On PostgreSQL with
psycopg 3 and ``MRTRWEB["PREPARED_STATEMENTS"]`` on (the default), the cursor sends each statement
with its parameters apart (server-side binding) and prepares it the first time a connection runs
it (one more round trip, that once; psycopg's per-connection cache, ``prepared_max`` statements, 100 by default, the least used
deallocated): PostgreSQL parses and plans it once per connection and then runs its generic plan.
Planning was 0.1-1.2 ms of each of the round's statements, about 3 ms a round (docs/benchmarks
NOTES, session 21). Any other database, psycopg 2, a connection whose time zone differs from its
adapters' (Django then registers a loader per cursor), or the setting off: Django's own cursor,
the statement sent with its parameters inlined, as before.

Either way the cursor is Django's :class:`~django.db.backends.utils.CursorWrapper`: its execute
wrappers (the statement counts of ``tests/operations/test_round_cost.py``), its debug log and
its error translation (``django.db.DatabaseError`` and subclasses) apply unchanged.

A statement run here must say what its parameters are where PostgreSQL cannot infer it (a
parameter compared with nothing typed, e.g. ``%s IS NULL``: ``%s::text IS NULL``); every such
statement of the product runs in the PostgreSQL suite with the setting on.

May import: django.db, psycopg, :mod:`mrtrweb.conf`. Imported by the product's SQL (tenancy,
operations, bindings, audit, headless).
"""

from __future__ import annotations

from typing import Any

from .. import conf

__all__ = ["ASKED_ONLY", "cursor", "prepares"]

#: the ``prepare_threshold`` this module gives a psycopg connection that has none (Django's default,
#: ``None``, which keeps psycopg from preparing anything, even when asked): only what is asked
#: (``prepare=True``, as :func:`cursor` does) is prepared -- no other query of the connection ever
#: runs this often, so the project's own queries stay unprepared, as Django left them
ASKED_ONLY = 2**62

_CURSOR_CLASS: list[Any] = []


def _cursor_class() -> Any:
    """``psycopg.Cursor`` whose ``execute`` prepares unless told not to (built on first use:
    psycopg is imported only where PostgreSQL is used)."""
    if not _CURSOR_CLASS:
        import psycopg

        class PreparingCursor(psycopg.Cursor):
            """Server-side binding; ``execute`` prepares the statement (``prepare=True``) unless the
            caller says otherwise."""

            def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                        binary: bool | None = None) -> Any:
                return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)

        _CURSOR_CLASS.append(PreparingCursor)
    return _CURSOR_CLASS[0]


def prepares(conn: Any) -> bool:
    """Whether :func:`cursor` prepares on Django connection ``conn`` (PostgreSQL through psycopg 3 and
    ``MRTRWEB["PREPARED_STATEMENTS"]``)."""
    if conn.vendor != "postgresql" or not conf.get("PREPARED_STATEMENTS"):
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def cursor(conn: Any) -> Any:
    """A cursor of Django connection ``conn`` for the product's precompiled statements: use it as
    ``with cursor(conn) as cur: cur.execute(sql, params)``. Prepared where :func:`prepares`, else
    ``conn.cursor()``.

    Raises:
        django.db.DatabaseError: the connection cannot be made (as ``conn.cursor()``)."""
    if not prepares(conn):
        return conn.cursor()
    # what conn.cursor() does before it makes its cursor (Django's BaseDatabaseWrapper._cursor)
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    with conn.wrap_database_errors:
        raw = conn.connection
        from psycopg.pq import Format

        loader = raw.adapters.get_loader(1184, Format.TEXT)  # timestamptz
        if conn.timezone != getattr(loader, "timezone", conn.timezone):
            return conn.cursor()  # Django registers its loader on its own cursor: keep its path
        if raw.prepare_threshold is None:  # Django's default turns psycopg's preparing off altogether
            raw.prepare_threshold = ASKED_ONLY
        made = _cursor_class()(raw)
    conn.validate_thread_sharing()
    return conn.make_debug_cursor(made) if conn.queries_logged else conn.make_cursor(made)
