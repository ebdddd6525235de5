"""The operation row's writes on the round path (issue 30: no ORM query compiled per round): its
insert (:func:`insert_operation`) and its conditional moves (:func:`move`), each statement's SQL
built once per database and shape, the values prepared by the fields themselves as the ORM
prepares them. Pages, admin and everything off the round path keep the ORM.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection
from typing import Any

from django.db import connections, router
from django.db.models.signals import post_save, pre_save

from .. import prepared
from ..models import Operation

_INSERTS: dict[tuple[str, str], str] = {}
_MOVES: dict[tuple[Any, ...], str] = {}


def insert_operation(**values: Any) -> Operation:
    """``Operation.objects.create(**values)`` as one INSERT whose SQL is built once per database:
    the defaults and ``auto_now_add`` filled in by the fields (``pre_save``), ``pre_save`` /
    ``post_save`` sent as ``create`` sends them. Sync.

    Raises:
        django.db.DatabaseError: the database failed (nothing written).
    """
    op, alias, sql, params = prepare_insert(**values)
    with prepared.cursor(connections[alias]) as cur:
        cur.execute(sql, params)
    return inserted(op, alias)


def prepare_insert(*, when: tuple[str, list[Any]] | None = None, **values: Any) -> tuple[Operation, str, str, list[Any]]:
    """:func:`insert_operation` up to its statement: (the row, its database alias, the ``INSERT``
    -- ``RETURNING`` its primary key --, its parameters; ``pre_save`` sent). Run the statement,
    or make it a step of another (:meth:`mrtrweb.bindings.primed.Priming.along`), then
    :func:`inserted`. ``when``: a condition (SQL, parameters) the row is inserted under at all
    (``INSERT ... SELECT ... WHERE``: the start's access and limits, :mod:`.starting`)."""
    op = Operation(**values)
    alias = router.db_for_write(Operation)
    conn = connections[alias]
    meta = Operation._meta
    fields = meta.concrete_fields  # (its primary key is a UUID made here: nothing for the database to fill in)
    key = (alias, when[0] if when else "")
    sql = _INSERTS.get(key)
    if sql is None:
        qn = conn.ops.quote_name
        source = (f"SELECT {', '.join(['%s'] * len(fields))} WHERE {when[0]}" if when
                  else f"VALUES ({', '.join(['%s'] * len(fields))})")
        sql = _INSERTS.setdefault(key, f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) "
                                       f"{source} RETURNING {qn(meta.pk.column)}")
    pre_save.send(sender=Operation, instance=op, raw=False, using=alias, update_fields=None)
    params = [f.get_db_prep_save(f.pre_save(op, True), conn) for f in fields] + (list(when[1]) if when else [])
    return op, alias, sql, params


def inserted(op: Operation, alias: str) -> Operation:
    """The row of :func:`prepare_insert` once its statement ran: saved, ``post_save`` sent."""
    op._state.adding, op._state.db = False, alias
    post_save.send(sender=Operation, instance=op, created=True, update_fields=None, raw=False, using=alias)
    return op


def move(op_id: Any, values: dict[str, Any], *, status_in: Collection[str] = (),
         status_not_in: Collection[str] = (), allowed: tuple[Any, Any, Any] | None = None) -> int:
    """``Operation.objects.filter(pk=op_id, status__in=status_in).exclude(status__in=status_not_in)
    .update(**values)`` as one UPDATE whose SQL is built once per database and shape (the fields
    written, which condition, how many statuses). Returns the rows written. Sync.

    ``allowed``: (user id, tenant id, server id): the row moves only while that user may act on
    that server (:func:`mrtrweb.tenancy.access.allowed_condition` in the same ``WHERE``: the access
    check right before a request leaves and the row move that precedes it, one statement). 0 rows
    then may mean that access ended: ask :func:`~mrtrweb.tenancy.access.denial`. Where the condition
    cannot be built, access is checked first (two statements).

    Raises:
        django.db.DatabaseError: the database failed (nothing written).
    """
    built = move_sql(op_id, values, status_in=status_in, status_not_in=status_not_in, allowed=allowed)
    if built is None:  # the access conditions cannot go into the WHERE: checked first
        from ..tenancy import access

        if access.denial(*allowed):  # type: ignore[misc]
            return 0
        built = move_sql(op_id, values, status_in=status_in, status_not_in=status_not_in)
    sql, params = built  # type: ignore[misc]
    with prepared.cursor(connections[router.db_for_write(Operation)]) as cur:
        cur.execute(sql, params)
        return cur.rowcount


#: ``Now() + <interval>`` compiled per database: (SQL, its parameters, where the interval is among them);
#: None where the interval is not one parameter as it was given (it is then compiled each time)
_NOW_PLUS: dict[tuple[str, str], tuple[str, tuple[Any, ...], int] | None] = {}
_PROBE_INTERVAL = datetime.timedelta(seconds=86_399, microseconds=123_457)


def _compiled(conn, expression: Any) -> tuple[str, list[Any]]:
    """(SQL, parameters) of a column-free ``expression`` on ``conn``. ``Now() + interval`` made by
    :func:`.expiry.expires_at` (its ``now_plus``: the interval) is compiled once per database and
    the interval bound as its parameter; any other is compiled by Django each time."""
    interval = getattr(expression, "now_plus", None)
    if isinstance(interval, datetime.timedelta):
        key = (conn.alias, conn.vendor)
        if key not in _NOW_PLUS:
            from django.db.models import DateTimeField, ExpressionWrapper
            from django.db.models.functions import Now

            sql, params = _compile(conn, ExpressionWrapper(Now() + _PROBE_INTERVAL, output_field=DateTimeField()))
            at = [i for i, p in enumerate(params) if type(p) is datetime.timedelta and p == _PROBE_INTERVAL]
            _NOW_PLUS[key] = (sql, tuple(params), at[0]) if len(at) == 1 else None
        template = _NOW_PLUS[key]
        if template is not None:
            params = list(template[1])
            params[template[2]] = interval
            return template[0], params
    return _compile(conn, expression)


def _compile(conn, expression: Any) -> tuple[str, list[Any]]:
    query = Operation.objects.all().query
    sql, params = query.get_compiler(connection=conn).compile(expression.resolve_expression(query))
    return sql, list(params)


def move_sql(op_id: Any, values: dict[str, Any], *, status_in: Collection[str] = (),
             status_not_in: Collection[str] = (), allowed: tuple[Any, Any, Any] | None = None
             ) -> tuple[str, list[Any]] | None:
    """(SQL, parameters) of :func:`move`'s UPDATE, not run (a step of another statement, e.g.
    the ``received`` append's: :func:`mrtrweb.audit.events.record`'s ``then``); None when
    ``allowed`` is given but the access conditions cannot go into the ``WHERE``."""
    alias = router.db_for_write(Operation)
    conn = connections[alias]
    meta = Operation._meta
    condition: tuple[str, list[Any]] | None = ("", [])
    if allowed is not None:
        from ..tenancy import access

        condition = access.allowed_condition(alias)
        if condition is None:
            return None
    names = tuple(values)
    kind, statuses = ("in", tuple(status_in)) if status_in else ("not in", tuple(status_not_in))
    # a value may be an expression without columns (the database's clock, expiry.expires_at):
    # compiled alone, its SQL in place of the placeholder
    parts: dict[str, tuple[str, list[Any]]] = {}
    for name in names:
        if hasattr(values[name], "resolve_expression"):
            parts[name] = _compiled(conn, values[name])
    key = (alias, names, kind, len(statuses), tuple((n, parts[n][0]) for n in names if n in parts), condition[0])
    sql = _MOVES.get(key)
    if sql is None:
        qn = conn.ops.quote_name
        status_sql = (f" AND {qn(meta.get_field('status').column)} {kind.upper()} ({', '.join(['%s'] * len(statuses))})"
                      if statuses else "")
        sql = _MOVES.setdefault(key, f"UPDATE {qn(meta.db_table)} SET "
                                     + ", ".join(f"{qn(meta.get_field(n).column)} = {parts[n][0] if n in parts else '%s'}"
                                                 for n in names)
                                     + f" WHERE {qn(meta.pk.column)} = %s" + status_sql
                                     + (f" AND {condition[0]}" if condition[0] else ""))
    params: list[Any] = []
    for name in names:
        params += parts[name][1] if name in parts else [meta.get_field(name).get_db_prep_save(values[name], conn)]
    params += [meta.pk.get_db_prep_value(op_id, conn), *statuses]
    if condition[0]:
        from ..tenancy import access

        params += access.bind_ids(condition[1], *allowed)  # type: ignore[misc]
    return sql, params
