"""The database binding store's writes of one phase as ONE statement (PostgreSQL: data-modifying
``WITH`` steps, atomic as any statement, no ``BEGIN``/``COMMIT`` round trips): :func:`chained`
(register, receive, respond) and :func:`delete_live_after` (the close after the caller's row move).

Either may carry a *joined* append (:class:`mrtrweb.audit.joined.JoinedAppend`, duck-typed here:
``running()``, ``steps(conn, after)``, ``took(values)``, ``gave_way(exc, conn)``): the phase's audit
event and the caller's write that goes with it, made only when the store's own step ``after`` wrote
(issue 30: one statement per phase). When the statement fails with an error the database answered
(the append's lock wait, its insert refused: nothing written) or the appender found no place in
its queue, the store's writes are made alone, as before the append was joined, and the append is
left to the caller (``took`` never called): each part then fails, or not, as it did on its own.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connections, router
from django.db.models.functions import Now

from .. import prepared

from .statements import _sql

#: SQLSTATE division_by_zero: how :func:`chained` makes its statement fail on purpose
_UNDONE = "22012"


def _joining(conn, run, joined: Any):
    """``run(joined)`` inside the append's queue place, or ``run(None)`` (the store's writes
    alone) when it found none, or the statement failed with an error the database answered (its
    lock wait, a failure of the append's insert: nothing was written, the connection works): the
    store's writes are then made as before the append was joined, and whichever part fails again
    says which it was (the store's: raised here; the append's: the caller's own append). A
    connection that broke is raised at once (whether the statement committed is unknown: never
    made twice)."""
    if joined is None:
        return run(None)
    with joined.running() as placed:
        if placed:
            try:
                return run(joined)
            except DatabaseError as exc:
                if not joined.gave_way(exc, conn):
                    raise
    return run(None)


def chained(conn, steps: list[tuple[str, str, list[Any]]], report: list[str],
            undo_unless: tuple[str, str] | None = None, joined: Any = None, after: str = "") -> list[bool] | None:
    """Several writes as ONE statement. ``steps``: (name, SQL with ``RETURNING``, parameters); a
    step's SQL may name earlier steps in its condition (``EXISTS (SELECT 1 FROM name)``). Returns,
    for each name of ``report``, whether its step wrote a row; None when the statement was undone:
    ``undo_unless`` = (a, b) makes it fail -- nothing written -- when step a wrote and step b did not.
    ``joined``: an append made in the statement only when step ``after`` wrote (see the module).

    Raises:
        django.db.DatabaseError: the database failed (nothing written).
    """
    from django.db import DataError

    def run(joined: Any) -> list[bool] | None:
        every, columns = list(steps), []
        if joined is not None:
            more, columns = joined.steps(conn, after)
            every += more
        sql = "WITH " + ", ".join(f"{name} AS ({step})" for name, step, _ in every) + " SELECT " + ", ".join(
            [f"EXISTS (SELECT 1 FROM {name})" for name in report] + columns)
        if undo_unless:
            a, b = undo_unless
            sql += (f", CASE WHEN EXISTS (SELECT 1 FROM {a}) AND NOT EXISTS (SELECT 1 FROM {b}) "
                    f"THEN 1 / (SELECT count(*)::int FROM {b}) END")
        params = [p for _, _, step_params in every for p in step_params]
        try:
            with prepared.cursor(conn) as cur:
                cur.execute(sql, params)
                found = cur.fetchone()
        except DataError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == _UNDONE:
                return None
            raise
        if joined is not None:
            joined.took(found[len(report):len(report) + len(columns)])
        return [bool(v) for v in found[:len(report)]]

    return _joining(conn, run, joined)


def delete_live_after(model, column: str, where: dict[str, Any], also: tuple[Any, dict[str, Any]],
                      first: tuple[str, list[Any]], joined: Any = None) -> tuple[bool, Any]:
    """Delete the rows of ``model`` matching ``where`` and of ``also`` (another model, its
    ``where``), made only when ``first`` (a write of the caller's, ``UPDATE ... WHERE ...``
    without ``RETURNING``, and its parameters) writes a row, in the same statement (PostgreSQL).
    Returns (whether ``first`` wrote, ``column`` of the deleted row of ``model`` that was live or
    None). ``joined``: an append made in the statement only when ``first`` wrote. Sync.

    Raises:
        django.db.DatabaseError: the database failed (nothing written).
    """
    alias = router.db_for_write(model)
    conn = connections[alias]
    qn, meta, other = conn.ops.quote_name, model._meta, also[0]._meta
    now_sql, _ = _sql(model, conn, Now())
    mine = " AND ".join(f"{qn(meta.get_field(n).column)} = %s" for n in where)
    theirs = " AND ".join(f"{qn(other.get_field(n).column)} = %s" for n in also[1])
    params = list(first[1]) + [other.get_field(n).get_db_prep_value(v, conn) for n, v in also[1].items()]
    params += [meta.get_field(n).get_db_prep_value(v, conn) for n, v in where.items()]

    def run(joined: Any) -> tuple[bool, Any]:
        more, columns, more_params = "", [], []
        if joined is not None:
            steps, columns = joined.steps(conn, "w")
            more = "".join(f", {name} AS ({step})" for name, step, _ in steps)
            more_params = [p for _, _, step_params in steps for p in step_params]
        sql = (f"WITH w AS ({first[0]} RETURNING 1), "
               f"also AS (DELETE FROM {qn(other.db_table)} WHERE {theirs} AND EXISTS (SELECT 1 FROM w) RETURNING 1), "
               f"d AS (DELETE FROM {qn(meta.db_table)} WHERE {mine} AND EXISTS (SELECT 1 FROM w) RETURNING "
               f"{qn(meta.get_field(column).column)} AS v, {qn(meta.get_field('expires_at').column)} > {now_sql} AS live)"
               f"{more} SELECT (SELECT count(*) FROM w), d.v, d.live{''.join(', ' + c for c in columns)} "
               "FROM (SELECT 1 AS one) x LEFT JOIN d ON TRUE")
        with prepared.cursor(conn) as cur:
            cur.execute(sql, params + more_params)
            rows = cur.fetchall()
        if joined is not None and rows:
            joined.took(rows[0][3:3 + len(columns)])
        wrote = bool(rows and rows[0][0])
        found = [row for row in rows if row[2]]
        return wrote, None if not found else meta.get_field(column).to_python(found[0][1])

    return _joining(conn, run, joined)
