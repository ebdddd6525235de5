"""The SQL of the database binding store (:mod:`.database`), each statement built once per database
and shape: reads of a live row (``select_live``, ``select_bound``: an index entry joined to its
record), ``DELETE ... RETURNING`` (``delete_live``), the one-statement upsert (``upsert``), the
database clock (``lifetime``), and what a failed statement leaves of the connection
(``drop_broken_connection``, ``broke_connection``). Every row's ``expires_at`` is written and
compared by the database's clock (see :mod:`.database`).
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import IntegrityError, connections, router, transaction
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

from .. import prepared

#: database vendors whose ``INSERT ... ON CONFLICT ... DO UPDATE ... WHERE ... RETURNING`` (and
#: ``DELETE ... RETURNING``) the store uses (SQLite >= 3.35); others take the portable path
UPSERT_VENDORS = frozenset({"postgresql", "sqlite"})


#: the output field of :func:`lifetime`'s expressions (one, unbound: made once, not per call)
_DATETIME = DateTimeField()


def lifetime(ttl_s: float) -> ExpressionWrapper:
    """``expires_at`` ``ttl_s`` seconds (at least 1) from now by the **database's** clock: an
    expression for :func:`upsert` values, ``create`` and ``update``."""
    expression = ExpressionWrapper(Now() + datetime.timedelta(seconds=(s := max(1.0, float(ttl_s)))),
                                   output_field=_DATETIME)
    expression.lifetime_s = s  # what :func:`_sql` keys its compiled text by
    return expression


#: ``Now()`` and :func:`lifetime` compiled per database and lifetime (no column: not per model)
_COMPILED: dict[tuple[Any, ...], tuple[str, tuple[Any, ...]]] = {}
_COMPILED_MAX = 256


def _sql(model, conn, expression) -> tuple[str, list[Any]]:
    """``expression`` (``Now()``, :func:`lifetime`: compiled once) compiled for ``conn`` in raw SQL."""
    s = getattr(expression, "lifetime_s", None)
    key = (conn.alias, conn.vendor, "now" if type(expression) is Now else s) if type(expression) is Now or s else None
    if key is not None and (hit := _COMPILED.get(key)) is not None:
        return hit[0], list(hit[1])
    query = model.objects.all().query
    sql, params = query.get_compiler(connection=conn).compile(expression.resolve_expression(query))
    if key is not None and len(_COMPILED) < _COMPILED_MAX:
        _COMPILED[key] = (sql, tuple(params))
    return sql, list(params)


def drop_broken_connection(model, *, broken: bool | None = None) -> None:
    """Close the model's database connection when a failure left it unusable (outside a
    transaction only), so the next statement reconnects instead of failing on a dead socket; when
    the database broke it (``broken``: :func:`broke_connection`'s answer, asked here when None),
    its pool's idle connections are tested at once (:func:`mrtrweb.prepared.check_pool`)."""
    conn = connections[router.db_for_write(model)]
    if conn.in_atomic_block:
        return
    if broken is None:
        broken = broke_connection(model)
    try:
        if broken:
            conn.close()
        else:  # asked: the connection works (an error the database answered), or there is none
            if conn.connection is not None:
                conn.errors_occurred = False  # so Django does not ask it again
            conn.close_if_unusable_or_obsolete()
    except Exception:  # noqa: BLE001 -- closing a dead connection may itself fail; it is dropped anyway
        pass
    if broken:
        prepared.check_pool(conn)


def broke_connection(model) -> bool:
    """Whether the model's connection, after a failed statement, is one the database broke (it
    no longer answers ``is_usable``), outside any transaction: the statement may then be made once
    more on a new connection (:func:`drop_broken_connection` first). False inside a transaction
    (its earlier statements went with the connection) and after an error the database answered
    (a constraint, a syntax error: the connection works, a retry would fail the same way)."""
    conn = connections[router.db_for_write(model)]
    if conn.in_atomic_block or conn.connection is None:
        return False
    try:
        return not conn.is_usable()
    except Exception:  # noqa: BLE001 -- a check that fails says the same
        return True


_SELECTS: dict[tuple[Any, str, tuple[str, ...], str], str] = {}


def select_live(model, column: str, where: dict[str, Any]) -> Any:
    """``column`` of the live row of ``model`` (``expires_at`` later than the database's now) matching
    ``where`` (field name -> value), or None: one SELECT built once per model, column, fields and
    database, values through their fields' ``get_db_prep_value``, read on the model's write database. Sync.

    Raises:
        django.db.DatabaseError: the database failed (the store maps it to StoreUnavailable).
    """
    alias = router.db_for_write(model)
    conn = connections[alias]
    names = tuple(where)
    sql = select_live_sql(model, column, names)
    meta = model._meta
    params = [meta.get_field(n).get_db_prep_value(where[n], conn) for n in names]
    with prepared.cursor(conn) as cur:
        cur.execute(sql, params)
        found = cur.fetchone()
    return None if found is None else meta.get_field(column).to_python(found[0])


def live_record_sql(model) -> str:
    """``(SELECT record FROM <model> WHERE tenant = %s AND operation_id = %s AND <live>)``: the
    live record of an operation as a scalar subquery of another statement (its two parameters in
    that order), built once per database."""
    alias = router.db_for_write(model)
    key = (model, "record", ("tenant", "operation_id"), alias)
    sql = _SELECTS.get(key)
    if sql is None:
        select_live_sql(model, "record", ("tenant", "operation_id"))
        sql = _SELECTS[key]
    return "(" + sql + ")"


def select_live_sql(model, column: str, names: tuple[str, ...]) -> str:
    """The SQL of :func:`select_live` (built once per model, column, fields and database)."""
    alias = router.db_for_write(model)
    conn = connections[alias]
    key = (model, column, names, alias)
    sql = _SELECTS.get(key)
    if sql is None:
        qn, meta = conn.ops.quote_name, model._meta
        now_sql, _ = _sql(model, conn, Now())  # the database's clock (no parameters)
        conditions = [f"{qn(meta.get_field(n).column)} = %s" for n in names] + [
            f"{qn(meta.get_field('expires_at').column)} > {now_sql}"]
        sql = _SELECTS.setdefault(key, f"SELECT {qn(meta.get_field(column).column)} FROM {qn(meta.db_table)} "
                                       f"WHERE {' AND '.join(conditions)} LIMIT 1")
    return sql


_BOUND: dict[str, str] = {}


def bound_columns_sql() -> str:
    """Two scalar subqueries (each with the parameters tenant, key digest): the operation id and
    the sealed record of :func:`select_bound`, as columns of another statement."""
    from ..models import LiveBinding

    op_col, record_col, rest = _bound_parts(router.db_for_write(LiveBinding))
    return f"(SELECT ix.{op_col} {rest} LIMIT 1), (SELECT lb.{record_col} {rest} LIMIT 1)"


_BOUND_PARTS: dict[str, tuple[str, str, str]] = {}


def _bound_parts(alias: str) -> tuple[str, str, str]:
    """(the index's operation id column, the record column, ``FROM ... WHERE ...`` joining the
    live index entry ``ix`` (tenant, key digest: two parameters) to its live record ``lb``)."""
    from ..models import BindingIndexEntry, LiveBinding

    parts = _BOUND_PARTS.get(alias)
    if parts is None:
        conn = connections[alias]
        qn = conn.ops.quote_name
        ix, lb = BindingIndexEntry._meta, LiveBinding._meta
        now_sql, _ = _sql(LiveBinding, conn, Now())

        def c(meta, name: str) -> str:
            return qn(meta.get_field(name).column)

        parts = _BOUND_PARTS.setdefault(alias, (c(ix, 'operation_id'), c(lb, 'record'), (
            f"FROM {qn(ix.db_table)} ix "
            f"JOIN {qn(lb.db_table)} lb ON lb.{c(lb, 'tenant')} = ix.{c(ix, 'tenant')} "
            f"AND lb.{c(lb, 'operation_id')} = ix.{c(ix, 'operation_id')} "
            f"WHERE ix.{c(ix, 'tenant')} = %s AND ix.{c(ix, 'key_digest')} = %s "
            f"AND ix.{c(ix, 'expires_at')} > {now_sql} AND lb.{c(lb, 'expires_at')} > {now_sql}")))
    return parts


def _bound_sql(alias: str) -> str:
    sql = _BOUND.get(alias)
    if sql is None:
        op_col, record_col, rest = _bound_parts(alias)
        sql = _BOUND.setdefault(alias, f"SELECT ix.{op_col}, lb.{record_col} {rest} LIMIT 1")
    return sql


def select_bound(tenant: str, key_digest: str) -> tuple[str, str] | None:
    """(operation id, sealed record) of the live index entry ``(tenant, key_digest)`` and its live
    record, or None: one SELECT (a join), built once per database. Sync.

    Raises:
        django.db.DatabaseError: the database failed (the store maps it to StoreUnavailable).
    """
    from ..models import LiveBinding

    alias = router.db_for_write(LiveBinding)
    conn = connections[alias]
    sql = _bound_sql(alias)
    with prepared.cursor(conn) as cur:
        cur.execute(sql, [tenant, key_digest])
        found = cur.fetchone()
    return None if found is None else (found[0], found[1])


NO_RETURNING = object()
_DELETES: dict[tuple[Any, str, tuple[str, ...], str], str] = {}


def delete_live(model, column: str, where: dict[str, Any], also: tuple[Any, dict[str, Any]] | None = None) -> Any:
    """Delete the rows of ``model`` matching ``where`` and return ``column`` of the one that was
    live (``expires_at`` later than the database's now), or None: one ``DELETE ... RETURNING``
    (PostgreSQL, SQLite), SQL built once per model, column, fields and database;
    :data:`NO_RETURNING` on another database (nothing done). ``also``: (another model, its
    ``where``) whose rows are deleted in the same statement (PostgreSQL only: a ``WITH`` step). Sync.

    Raises:
        django.db.DatabaseError: the database failed (the store maps it to StoreUnavailable).
    """
    alias = router.db_for_write(model)
    conn = connections[alias]
    if conn.vendor not in UPSERT_VENDORS:
        return NO_RETURNING
    names = tuple(where)
    other_names = tuple(also[1]) if also is not None else ()
    key = (model, column, names, alias, also[0] if also is not None else None, other_names)
    sql = _DELETES.get(key)
    meta = model._meta
    if sql is None:
        qn = conn.ops.quote_name
        now_sql, _ = _sql(model, conn, Now())
        conditions = " AND ".join(f"{qn(meta.get_field(n).column)} = %s" for n in names)
        other = also[0]._meta if also is not None else None
        first = "" if other is None else (f"WITH also AS (DELETE FROM {qn(other.db_table)} WHERE " + " AND ".join(
            f"{qn(other.get_field(n).column)} = %s" for n in other_names) + " RETURNING 1) ")
        sql = _DELETES.setdefault(key, f"{first}DELETE FROM {qn(meta.db_table)} WHERE {conditions} RETURNING "
                                       f"{qn(meta.get_field(column).column)}, "
                                       f"{qn(meta.get_field('expires_at').column)} > {now_sql}")
    params = [also[0]._meta.get_field(n).get_db_prep_value(also[1][n], conn) for n in other_names] if also else []
    params += [meta.get_field(n).get_db_prep_value(where[n], conn) for n in names]
    with prepared.cursor(conn) as cur:
        cur.execute(sql, params)
        found = [row for row in cur.fetchall() if row[1]]
    return None if not found else meta.get_field(column).to_python(found[0][0])


def upsert(model, unique: dict[str, Any], values: dict[str, Any], *, only_over_expired: bool) -> bool:
    """Insert the row of ``model`` named by ``unique`` (its unique constraint's fields) with
    ``values``; when such a row exists, overwrite it with ``values`` -- always, or with
    ``only_over_expired`` only when its ``expires_at`` has passed by the database's clock (a live
    row then stays as it is). A value may be an expression without columns (:func:`lifetime`).
    Returns whether this call wrote the row: with ``only_over_expired``, True for exactly one of
    any number of concurrent callers while the row lives. Sync; one statement on PostgreSQL and
    SQLite (``INSERT ... ON CONFLICT DO UPDATE [WHERE] RETURNING``), no transaction.

    Raises:
        django.db.DatabaseError: the database failed (the store maps it to StoreUnavailable).
    """
    alias = router.db_for_write(model)
    conn = connections[alias]
    if conn.vendor not in UPSERT_VENDORS:
        return _upsert_portable(model, alias, unique, values, only_over_expired)
    sql, params = upsert_sql(model, conn, unique, values, only_over_expired=only_over_expired)
    with prepared.cursor(conn) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


#: :func:`upsert_sql`'s text per database, model and shape (which columns, which of them an
#: expression and its text, ``only_over_expired``, ``when``): built once, its parameters each call
_UPSERTS: dict[tuple[Any, ...], str] = {}
_UPSERTS_MAX = 256


def upsert_sql(model, conn, unique: dict[str, Any], values: dict[str, Any], *, only_over_expired: bool,
               when: str = "") -> tuple[str, list[Any]]:
    """The SQL and parameters of :func:`upsert`'s statement (``... RETURNING`` the primary key).
    ``when``: a condition (no parameters) the row is written under at all (``INSERT ... SELECT
    ... WHERE``; PostgreSQL: a step of :func:`chained`). The text is built once per shape
    (:data:`_UPSERTS`, keyed by everything it is made of: an expression by its compiled text; one
    other than ``Now()`` and :func:`lifetime` is compiled each call and the text not kept)."""
    meta = model._meta
    columns = {**unique, **values}
    fields = [meta.get_field(name) for name in columns]
    placeholders, params = [], []
    shape: list[Any] = []
    for f, v in zip(fields, columns.values()):
        if hasattr(v, "resolve_expression"):
            part, part_params = _sql(model, conn, v)
            placeholders.append(part)
            params.extend(part_params)
            kept = type(v) is Now or getattr(v, "lifetime_s", None)
            shape.append(part if kept else None)  # its text (compiled once by _sql): the statement's part
        else:
            placeholders.append("%s")
            params.append(f.get_db_prep_save(v, conn))
            shape.append(0)
    if only_over_expired:
        now_sql, now_params = _sql(model, conn, Now())
        params.extend(now_params)
    key = None if None in shape else (conn.alias, conn.vendor, model, tuple(unique), tuple(values), tuple(shape),
                                      only_over_expired, when)
    sql = _UPSERTS.get(key) if key is not None else None
    if sql is not None:
        return sql, params
    q = conn.ops.quote_name
    table = q(meta.db_table)
    source = f"SELECT {', '.join(placeholders)} WHERE {when}" if when else f"VALUES ({', '.join(placeholders)})"
    sql = (f"INSERT INTO {table} ({', '.join(q(f.column) for f in fields)}) {source} "
           f"ON CONFLICT ({', '.join(q(meta.get_field(n).column) for n in unique)}) DO UPDATE SET "
           + ", ".join(f"{q(meta.get_field(n).column)} = excluded.{q(meta.get_field(n).column)}" for n in values))
    if only_over_expired:
        sql += f" WHERE {table}.{q(meta.get_field('expires_at').column)} <= {now_sql}"
    sql += f" RETURNING {q(meta.pk.column)}"
    if key is not None and len(_UPSERTS) < _UPSERTS_MAX:
        _UPSERTS[key] = sql
    return sql, params


def delete_sql(model, conn, where: dict[str, Any], *, when: str = "") -> tuple[str, list[Any]]:
    """``DELETE`` of the rows of ``model`` matching ``where`` (under ``when``, see :func:`upsert_sql`)."""
    meta, q = model._meta, conn.ops.quote_name
    conditions = [f"{q(meta.get_field(n).column)} = %s" for n in where] + ([when] if when else [])
    return (f"DELETE FROM {q(meta.db_table)} WHERE {' AND '.join(conditions)} RETURNING {q(meta.pk.column)}",
            [meta.get_field(n).get_db_prep_value(v, conn) for n, v in where.items()])


_PLAIN_DELETES: dict[tuple[Any, tuple[str, ...], str], str] = {}


def delete_rows(model, where: dict[str, Any]) -> int:
    """Delete the rows of ``model`` matching ``where``: one DELETE whose SQL is built once per
    model, fields and database (no transaction, no signals: these tables have none). Returns the
    rows deleted. Sync.

    Raises:
        django.db.DatabaseError: the database failed.
    """
    alias = router.db_for_write(model)
    conn = connections[alias]
    meta, names = model._meta, tuple(where)
    key = (model, names, alias)
    sql = _PLAIN_DELETES.get(key)
    if sql is None:
        qn = conn.ops.quote_name
        sql = _PLAIN_DELETES.setdefault(key, f"DELETE FROM {qn(meta.db_table)} WHERE "
                                        + " AND ".join(f"{qn(meta.get_field(n).column)} = %s" for n in names))
    with prepared.cursor(conn) as cur:
        cur.execute(sql, [meta.get_field(n).get_db_prep_value(where[n], conn) for n in names])
        return cur.rowcount


def _upsert_portable(model, alias: str, unique: dict[str, Any], values: dict[str, Any],
                     only_over_expired: bool) -> bool:
    """:func:`upsert` for other databases, in one transaction: delete the row in the way (an
    expired one only, with ``only_over_expired``), then insert; the unique constraint decides
    between concurrent callers (the loser's ``IntegrityError`` is False, never an error)."""
    rows = model.objects.using(alias)
    try:
        with transaction.atomic(using=alias):
            in_the_way = rows.filter(**unique)
            (in_the_way.filter(expires_at__lte=Now()) if only_over_expired else in_the_way).delete()
            rows.create(**unique, **values)
        return True
    except IntegrityError:
        return False
