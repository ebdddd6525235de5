"""An operation's row with its server's and tenant's, as ``Operation.objects.select_related("server",
"tenant").get(pk=..., user_id=...)`` gives it, from SQL built once per database (issue 30): the web
edge reads it for every push (the WebSocket consumer), every answer POST and every re-rendered panel,
and compiling that ORM query cost more CPU than running it. Same rows, same instances (their related
objects cached as ``select_related`` caches them), same columns and database converters; nothing
about who may see the operation is decided here (:func:`mrtrweb.tenancy.access.denial` still is).

On PostgreSQL the row (:func:`operation_row_beside`), or a server's with its tenant
(:func:`server_row_beside`), comes in one statement with a check the caller passes -- the access
check's own compiled SQL, joined ``LATERAL`` with the row's ids in place of its stand-ins -- so a
push, an answer POST or a server page reads both at once (session 22); the verdict stays the
caller's (:func:`mrtrweb.tenancy.access.operation_and_access`, :func:`~mrtrweb.tenancy.access.server_for`).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from .. import prepared
from ..models import McpServer, Operation, Tenant

_SQL: dict[tuple[str, bool], Any] = {}
#: :func:`operation_row`'s ``user_id`` when any user's operation will do (a re-read by id alone)
ANY_USER: Any = object()


def field_converters(model: Any, conn: Any) -> list[tuple[Any, Any, list]]:
    """``(field, column, converters)`` of each concrete field of ``model`` on ``conn``: what
    :func:`instance_from` needs to build an instance from a raw row (the ORM's own converters)."""
    meta = model._meta
    out = []
    for field in meta.concrete_fields:
        col = field.get_col(meta.db_table)
        out.append((field, col, conn.ops.get_db_converters(col) + col.get_db_converters(conn)))
    return out


def _built(alias: str, conn: Any, by_user: bool) -> Any:
    key = (alias, by_user)
    if key not in _SQL:
        qn = conn.ops.quote_name
        op_meta, server_meta, tenant_meta = Operation._meta, McpServer._meta, Tenant._meta
        parts = [field_converters(Operation, conn), field_converters(McpServer, conn), field_converters(Tenant, conn)]
        columns = [f"{alias_}.{qn(f.column)}" for alias_, fields in zip(("op", "s", "t"), parts)
                   for f, _, _ in fields]
        where = f"op.{qn(op_meta.pk.column)} = %s"
        if by_user:
            where += f" AND op.{qn(op_meta.get_field('user').column)} = %s"
        sql = (f"SELECT {', '.join(columns)} FROM {qn(op_meta.db_table)} op "
               f"INNER JOIN {qn(server_meta.db_table)} s ON s.{qn(server_meta.pk.column)} = "
               f"op.{qn(op_meta.get_field('server').column)} "
               f"INNER JOIN {qn(tenant_meta.db_table)} t ON t.{qn(tenant_meta.pk.column)} = "
               f"op.{qn(op_meta.get_field('tenant').column)} WHERE {where}")
        _SQL[key] = (sql, parts)
    return _SQL[key]


def instance_from(model: Any, alias: str, conn: Any, fields: list, values: Any) -> Any:
    """An instance of ``model`` from ``values`` (a raw row's columns in the order of ``fields``,
    :func:`field_converters`), converted and built as the ORM builds it (``Model.from_db``)."""
    converted = []
    for (field, col, converters), value in zip(fields, values):
        for convert in converters:
            value = convert(value, col, conn)
        converted.append(value)
    return model.from_db(alias, [f.attname for f, _, _ in fields], converted)


def operation_row(op_id: Any, user_id: Any) -> Operation | None:
    """Operation ``op_id`` of user ``user_id`` (of anyone: :data:`ANY_USER`) with its server and
    tenant loaded, or None when there is none (also for an ``op_id`` that is no UUID, and for a
    ``user_id`` of None: nobody's). Sync; one statement.

    Raises:
        django.db.DatabaseError: the database failed."""
    from django.db import connections, router

    alias = router.db_for_read(Operation)
    if router.db_for_read(McpServer) != alias or router.db_for_read(Tenant) != alias:
        query = Operation.objects.select_related("server", "tenant")  # the rows live apart: the ORM's path
        try:
            return query.get(pk=op_id) if user_id is ANY_USER else query.get(pk=op_id, user_id=user_id)
        except (Operation.DoesNotExist, ValueError, TypeError, ValidationError):
            return None
    if user_id is None:  # (the ORM's filter on NULL matches no row either)
        return None
    conn = connections[alias]
    pk = Operation._meta.pk
    try:
        params = [pk.get_db_prep_value(pk.to_python(op_id), conn)]
        if user_id is not ANY_USER:
            user_pk = Operation._meta.get_field("user").target_field
            params.append(user_pk.get_db_prep_value(user_pk.to_python(user_id), conn))
    except (ValidationError, ValueError, TypeError):  # as the ORM's get(): no such operation
        return None
    sql, (op_fields, server_fields, tenant_fields) = _built(alias, conn, user_id is not ANY_USER)
    with prepared.cursor(conn) as cur:
        cur.execute(sql, params)
        found = cur.fetchone()
    if found is None:
        return None
    n, m = len(op_fields), len(op_fields) + len(server_fields)
    op = instance_from(Operation, alias, conn, op_fields, found[:n])
    # cached as select_related caches them (op.server / op.tenant read no row)
    Operation._meta.get_field("server").set_cached_value(op, instance_from(McpServer, alias, conn, server_fields,
                                                                       found[n:m]))
    Operation._meta.get_field("tenant").set_cached_value(op, instance_from(Tenant, alias, conn, tenant_fields,
                                                                       found[m:]))
    return op


_BESIDE: dict[tuple[str, str], Any] = {}
#: where the user's id goes in a statement of :func:`_lateral` (a parameter)
_USER: Any = object()


def _lateral(check: tuple[str, list[str], list[Any]], bind: Any, columns: dict[str, str]) -> Any:
    """``check``'s SQL with the ids it takes (``bind(slots, user, tenant, server)`` marks where)
    replaced: ``columns`` maps ``"user"``, ``"tenant"``, ``"server"`` to a column of the outer row;
    the user's id without a column stays a parameter (:data:`_USER`). Returns (SQL, parameters) or
    None when the SQL cannot be cut at its placeholders."""
    sql, _, slots = check
    pieces = sql.split("%s")
    if "%%" in sql or len(pieces) != len(slots) + 1:
        return None
    marks = {"user": object(), "tenant": object(), "server": object()}
    inner, params = [pieces[0]], []
    for value, piece in zip(bind(slots, marks["user"], marks["tenant"], marks["server"]), pieces[1:]):
        name = next((n for n, mark in marks.items() if value is mark), None)
        if name in columns:
            inner.append(columns[name])  # the row's own id, not a parameter
        else:
            inner.append("%s")
            params.append(_USER if name == "user" else value)
        inner.append(piece)
    return "".join(inner), params


def _built_beside(alias: str, conn: Any, check: tuple[str, list[str], list[Any]], bind: Any) -> Any:
    """(SQL, the check's column names, parameters with :data:`_SLOT` where the operation's id and
    user go) of :func:`operation_row_beside`, or None: :func:`operation_row`'s SQL with ``check``
    joined ``LATERAL``, the ids it takes the row's own columns. Built once per database and check."""
    key = (alias, "operation")
    if key in _BESIDE and _BESIDE[key][0] == check:
        return _BESIDE[key][1]
    built = None
    qn, meta = conn.ops.quote_name, Operation._meta
    cut = _lateral(check, bind, {name: f"op.{qn(meta.get_field(name).column)}" for name in ("user", "tenant", "server")}) \
        if conn.vendor == "postgresql" else None
    if cut is not None:
        base, _ = _built(alias, conn, True)
        head, where = base.split(" WHERE ", 1)
        select, rest = head.split(" FROM ", 1)
        built = (f"{select}, a.* FROM {rest} LEFT JOIN LATERAL ({cut[0]}) a ON TRUE WHERE {where}",
                 list(check[1]), cut[1] + [_SLOT, _SLOT])
    _BESIDE[key] = (check, built)
    return built


def server_row_beside(server_id: Any, user_id: Any, check: tuple[str, list[str], list[Any]] | None,
                      bind: Any) -> tuple[McpServer | None, dict[str, Any]] | None:
    """``(server server_id with its tenant loaded, or None; the row of check)`` in one statement,
    ``check``/``bind`` as for :func:`operation_row_beside` (the server's own tenant and id, the
    user ``user_id``). ``(None, {})`` when there is no such server (also for an id that is none).
    None when this path does not serve (as :func:`operation_row_beside`). Sync.

    Raises:
        django.db.DatabaseError: the database failed."""
    from django.contrib.auth import get_user_model
    from django.db import connections, router

    User = get_user_model()
    alias = router.db_for_read(McpServer)
    if check is None or user_id is None or router.db_for_read(Tenant) != alias or router.db_for_read(User) != alias:
        return None
    conn = connections[alias]
    if conn.vendor != "postgresql":
        return None
    key = (alias, "server")
    if key not in _BESIDE or _BESIDE[key][0] != check:
        qn, smeta, tmeta = conn.ops.quote_name, McpServer._meta, Tenant._meta
        cut = _lateral(check, bind, {"tenant": f"s.{qn(smeta.get_field('tenant').column)}",
                                     "server": f"s.{qn(smeta.pk.column)}"})
        built = None
        if cut is not None:
            parts = [field_converters(McpServer, conn), field_converters(Tenant, conn)]
            columns = [f"{a}.{qn(f.column)}" for a, fields in zip(("s", "t"), parts) for f, _, _ in fields]
            built = (f"SELECT {', '.join(columns)}, a.* FROM {qn(smeta.db_table)} s INNER JOIN {qn(tmeta.db_table)} t "
                     f"ON t.{qn(tmeta.pk.column)} = s.{qn(smeta.get_field('tenant').column)} "
                     f"LEFT JOIN LATERAL ({cut[0]}) a ON TRUE WHERE s.{qn(smeta.pk.column)} = %s",
                     list(check[1]), cut[1] + [_SLOT], parts)
        _BESIDE[key] = (check, built)
    built = _BESIDE[key][1]
    if built is None:
        return None
    sql, names, slots, (server_fields, tenant_fields) = built
    try:
        sid = McpServer._meta.pk.get_db_prep_value(McpServer._meta.pk.to_python(server_id), conn)
        uid = User._meta.pk.get_db_prep_value(User._meta.pk.to_python(user_id), conn)
    except (ValidationError, ValueError, TypeError, OverflowError):  # as the ORM's get(): no such server
        return None, {}
    with prepared.cursor(conn) as cur:
        cur.execute(sql, [sid if x is _SLOT else uid if x is _USER else x for x in slots])
        found = cur.fetchone()
    if found is None:
        return None, {}
    n, k = len(server_fields), len(found) - len(names)
    server = instance_from(McpServer, alias, conn, server_fields, found[:n])
    McpServer._meta.get_field("tenant").set_cached_value(server, instance_from(Tenant, alias, conn, tenant_fields,
                                                                            found[n:k]))
    return server, dict(zip(names, found[k:]))


def operation_row_beside(op_id: Any, user_id: Any, check: tuple[str, list[str], list[Any]] | None,
                         bind: Any) -> tuple[Operation | None, dict[str, Any]] | None:
    """``(operation_row(op_id, user_id), the row of check)`` in one statement: ``check`` a query
    about the operation's owner, tenant and server (SQL, its column names, its parameters --
    :func:`mrtrweb.tenancy.access.check_sql`), ``bind(slots, user, tenant, server)`` putting
    values where those ids go (:func:`mrtrweb.tenancy.access.bind_ids`). The check's row is the
    database's values by name (all None when it gave no row); ``(None, {})`` when there is no such
    operation of that user. None when this path does not serve -- not PostgreSQL (no
    ``LATERAL``), no check, the rows on different databases, any user (:data:`ANY_USER`): the
    caller reads them apart. Sync.

    Raises:
        django.db.DatabaseError: the database failed."""
    from django.contrib.auth import get_user_model
    from django.db import connections, router

    alias = router.db_for_read(Operation)
    if check is None or user_id is None or user_id is ANY_USER or router.db_for_read(McpServer) != alias \
            or router.db_for_read(Tenant) != alias or router.db_for_read(get_user_model()) != alias:
        return None
    conn = connections[alias]
    built = _built_beside(alias, conn, check, bind)
    if built is None:
        return None
    pk, user_pk = Operation._meta.pk, Operation._meta.get_field("user").target_field
    try:
        ids = iter([pk.get_db_prep_value(pk.to_python(op_id), conn),
                    user_pk.get_db_prep_value(user_pk.to_python(user_id), conn)])
    except (ValidationError, ValueError, TypeError):  # as the ORM's get(): no such operation
        return None, {}
    sql, names, slots = built
    _, (op_fields, server_fields, tenant_fields) = _built(alias, conn, True)
    with prepared.cursor(conn) as cur:
        cur.execute(sql, [next(ids) if x is _SLOT else x for x in slots])
        found = cur.fetchone()
    if found is None:
        return None, {}
    n, m, k = len(op_fields), len(op_fields) + len(server_fields), len(found) - len(names)
    op = instance_from(Operation, alias, conn, op_fields, found[:n])
    Operation._meta.get_field("server").set_cached_value(op, instance_from(McpServer, alias, conn, server_fields,
                                                                       found[n:m]))
    Operation._meta.get_field("tenant").set_cached_value(op, instance_from(Tenant, alias, conn, tenant_fields,
                                                                       found[m:k]))
    return op, dict(zip(names, found[k:]))


#: stand-ins for a user id while compiling a :class:`PerUser` query twice (values no id has)
_STAND_INS = (-2_147_400_011, -2_147_400_012)
_SLOT: Any = object()


class PerUser:
    """A ``values()`` query of one person's rows (``build(user_id)`` makes it), its SQL compiled by
    the ORM once per database and then run with each user's id: the navigation's waiting count of
    every page and the waiting rounds of a push (:mod:`mrtrweb.consent.pending`) are the ORM's own
    SQL, rows and converters, without compiling it each time.

    Compiled twice with two stand-in ids: only when the SQL is the same and the parameters differ
    exactly where the ids go is the SQL kept (a parameter that depends on anything else -- a time
    taken in Python -- would be frozen in it: such a query keeps the ORM's path, as does a user
    model whose ids are no integers)."""

    def __init__(self, build: Any, model: Any) -> None:
        self.build, self.model = build, model  # the model the query reads (its database: the router's)
        self._compiled: dict[str, Any] = {}

    def _compile(self, alias: str) -> Any:
        if alias not in self._compiled:
            built = None
            try:
                one, two = (self.build(v) for v in _STAND_INS)
                c1, c2 = one.query.get_compiler(using=alias), two.query.get_compiler(using=alias)
                (sql1, p1), (sql2, p2) = c1.as_sql(), c2.as_sql()
                a, b = _STAND_INS
                if sql1 == sql2 and len(p1) == len(p2) and a in p1 and all(
                        (x == a) == (y == b) and (x == a or (x == y and type(x) is type(y))) for x, y in zip(p1, p2)):
                    query = one.query
                    names = list(query.selected) if query.selected else [
                        *query.extra_select, *query.values_select, *query.annotation_select]
                    fields = [s[0] for s in c1.select[0:c1.col_count]]
                    built = (sql1, [_SLOT if x == a else x for x in p1], c1, c1.get_converters(fields), names)
            except Exception:  # noqa: BLE001 -- e.g. ids that are no integers: the ORM's path serves
                built = None
            self._compiled[alias] = built
        return self._compiled[alias]

    def rows(self, user_id: Any) -> list[dict[str, Any]]:
        """The query's rows for ``user_id`` (dicts, as ``values()`` gives them). Sync."""
        from django.contrib.auth import get_user_model
        from django.db import connections, router

        alias = router.db_for_read(self.model)
        built = self._compile(alias)
        if built is None or user_id is None:
            return list(self.build(user_id))
        sql, slots, compiler, converters, names = built
        conn = connections[alias]
        pk = get_user_model()._meta.pk
        try:
            value = pk.get_db_prep_value(pk.to_python(user_id), conn)
        except (ValidationError, ValueError, TypeError):
            return list(self.build(user_id))  # as the ORM judges such a value
        with prepared.cursor(conn) as cur:
            cur.execute(sql, [value if x is _SLOT else x for x in slots])
            found = cur.fetchall()
        if converters:
            found = compiler.apply_converters(found, converters)
        return [dict(zip(names, row)) for row in found]
