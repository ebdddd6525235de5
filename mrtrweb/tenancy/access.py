"""Who may act on an operation: the one access check, and what happens when access ends.

An operation (or a server) may be seen, answered, stopped or pushed only while all of these hold:
the user exists and is active, the user is a member of the operation's tenant (the tenant exists),
and the server exists in that tenant, is enabled, and is the tenant's or the user's own (a personal
server, ``McpServer.owner``, issue 29: visible to its owner alone, not even to a tenant admin;
another person's personal server is "not there" for everyone else, cause ``server_removed``). :func:`denial` / :func:`adenial` say which one
failed; views (review, Send, Decline, Stop, the operation page and panel), the WebSocket consumer
(connect, every push) and :mod:`mrtrweb.operations` (before each request is sent, before a round
is shown, before an answer is built) all ask it, so access that ended is refused even when the
signals below were bypassed (``QuerySet.update``, raw SQL).

When access ends through the ORM (a membership deleted or moved, a user deactivated or deleted,
a server disabled, moved or deleted, a personal server given to another owner, a tenant deleted), the handlers of
:func:`mrtrweb.operations.revocation.connect_signals` end the
person's pending operations (``running`` or ``awaiting_input``) concerned at once: ``denied``,
with the audit reason ``access_revoked: <cause>`` (nothing is sent to the server; a call in
flight is abandoned), and close the person's open WebSockets (code :data:`CLOSE_CODE`).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery
from django.http import Http404
from django.utils.translation import gettext_lazy as _

from .. import prepared
from ..models import McpServer, Membership, Operation, Tenant

logger = logging.getLogger("mrtrweb.access")

#: the ``reason`` prefix of the ``denied`` audit event of an operation whose access ended
ACCESS_REVOKED: Final = "access_revoked"
#: the WebSocket close code sent to a person's sockets when their access ended
CLOSE_CODE: Final = 4403
#: causes (the second part of the audit reason; also logged)
USER_REMOVED, USER_INACTIVE = "user_removed", "user_inactive"
MEMBERSHIP_REMOVED, TENANT_REMOVED = "membership_removed", "tenant_removed"
SERVER_REMOVED, SERVER_DISABLED = "server_removed", "server_disabled"

MESSAGE = _("Your access to this server or organisation ended; nothing more was sent for this operation.")
PENDING = (Operation.Status.RUNNING, Operation.Status.AWAITING_INPUT)


class AccessEnded(Http404):
    """The user's own operation, whose access ended (``cause``): shown as 404, acted on never."""

    def __init__(self, op: Operation, cause: str) -> None:
        super().__init__("No such operation")
        self.op, self.cause = op, cause


def mine(user_id: Any, prefix: str = "") -> Q:
    """The filter of servers ``user_id`` may see among their tenants' (``prefix``: the path to the
    server, e.g. ``"server__"`` from an operation): the tenant's (no owner) and their own personal
    ones, never another person's (issue 29). Every listing and lookup of servers for a person
    goes through it (with the tenant membership and ``enabled``)."""
    return Q(**{f"{prefix}owner__isnull": True}) | Q(**{f"{prefix}owner_id": user_id})


def _query(user_id: Any, tenant_id: Any, server_id: Any):
    """One row for the user (or none): ``is_active`` (when the model has it), ``_member`` (bool),
    ``_server`` (the server's ``enabled`` in that tenant, None when it is not there)."""
    User = get_user_model()
    fields = {f.name for f in User._meta.get_fields()}
    annotations = {"_member": Exists(Membership.objects.filter(tenant_id=tenant_id, user_id=OuterRef("pk")))}
    if server_id is not None:  # (no ordering: the model's would join the tenant to sort one row)
        # a personal server counts only for its owner (the user row of this query: no parameter more)
        annotations["_server"] = Subquery(McpServer.objects.filter(pk=server_id, tenant_id=tenant_id)
                                          .filter(Q(owner__isnull=True) | Q(owner_id=OuterRef("pk")))
                                          .order_by().values("enabled")[:1])
    names = ["is_active"] if "is_active" in fields else []
    return User._default_manager.filter(pk=user_id).annotate(**annotations).values(*names, *annotations)


def _cause(row: dict[str, Any] | None, tenant_id: Any, server_id: Any) -> str:
    if row is None:
        return USER_REMOVED
    if row.get("is_active", True) is not True:
        return USER_INACTIVE
    if not row["_member"]:
        return MEMBERSHIP_REMOVED if Tenant.objects.filter(pk=tenant_id).exists() else TENANT_REMOVED
    if server_id is not None and row["_server"] is None:
        return SERVER_REMOVED
    if server_id is not None and row["_server"] is not True:
        return SERVER_DISABLED
    return ""


def denial(user_id: Any, tenant_id: Any, server_id: Any = None) -> str:
    """Why ``user_id`` may not act in ``tenant_id`` (on ``server_id``, when given), or ``""`` when
    they may: one of the cause constants (sync; one query, two when the membership is missing).

    The query is :func:`_query`'s, compiled by the ORM once per database and shape and then run
    with this call's values (:func:`_compiled`): building it cost more than running it, and it is
    asked at every phase of every round."""
    from django.db import connections, router

    alias = router.db_for_read(get_user_model())
    compiled = _compiled(alias, server_id is not None)
    if compiled is None:  # ids the stand-ins do not fit (e.g. a portal's UUID user model)
        return _cause(_query(user_id, tenant_id, server_id).first(), tenant_id, server_id)
    sql, names, slots = compiled
    values = {_SENTINELS[0]: user_id, _SENTINELS[1]: tenant_id, _SENTINELS[2]: server_id}
    params = [values.get(slot, slot) if isinstance(slot, int) else slot for slot in slots]
    with prepared.cursor(connections[alias]) as cur:
        cur.execute(sql, params)
        found = cur.fetchone()
    row = None if found is None else {name: (value if value is None else bool(value))
                                      for name, value in zip(names, found)}  # a backend's 0/1 too
    return _cause(row, tenant_id, server_id)


#: stand-ins for (user, tenant, server) ids while compiling :func:`_query` (values no id has)
_SENTINELS = (-2_147_400_001, -2_147_400_002, -2_147_400_003)  # within a 32-bit id's range
_COMPILED: dict[tuple[str, bool], tuple[str, list[str], list[Any]] | None] = {}


def _compiled(alias: str, with_server: bool) -> tuple[str, list[str], list[Any]] | None:
    """(SQL, the row's column names, its parameters with :data:`_SENTINELS` where the ids go) of
    :func:`_query` on database ``alias``, compiled once; None when the stand-ins cannot be
    compiled in (then every call takes the ORM's path)."""
    key = (alias, with_server)
    if key not in _COMPILED:
        user, tenant, server = _SENTINELS
        try:
            qs = _query(user, tenant, server if with_server else None).order_by()[:1]
            sql, params = qs.query.get_compiler(using=alias).as_sql()
            names = list(qs.query.values_select) + list(qs.query.annotation_select)
            # each stand-in must be a parameter, as often as it is used, and nothing else may be one
            # but the constant of EXISTS: a user model whose manager filters on something else (a
            # time, a context) would have that frozen in the SQL, so it keeps the ORM's path
            ids = (user, tenant, server) if with_server else (user, tenant)
            ok = all(list(params).count(v) == 1 + (v == tenant and with_server) for v in ids) and \
                all(p in ids or (type(p) is not bool and p == 1) for p in params) and \
                sum(1 for p in params if p not in ids) == 1
        except Exception:  # noqa: BLE001 -- e.g. a UUID primary key: the ORM's path serves
            ok = False
        _COMPILED[key] = (sql, names, list(params)) if ok else None
    return _COMPILED[key]


def denial_and_server(user_id: Any, tenant_id: Any, server_id: Any, *,
                      beside: tuple[str, int, list[Any]] | None = None) -> tuple[str, McpServer | None]:
    """:func:`denial` for the server, and the server's row as it is now (None when it is not in
    the tenant), in one statement: :func:`_query`'s access check, unchanged, joined with the row
    (a phase that needs both -- the owner's access and the server's configuration or
    authorization settings -- reads them together). Sync.

    ``beside``: (SQL of more columns, how many, their parameters) read in the same statement (a
    phase's own reads: the round's trail, :mod:`mrtrweb.operations.rounds`); their values are
    then a third item of the result (None when the ORM's path served: nothing was read beside).

    The SQL is built once per database from :func:`_compiled` (what :func:`denial` runs), so the
    access conditions live in one place (:func:`_query`)."""
    from django.db import connections, router

    alias = router.db_for_read(get_user_model())
    compiled = _compiled_with_server(alias)
    if compiled is None:  # the ORM's path (see denial)
        server = McpServer.objects.filter(pk=server_id, tenant_id=tenant_id).first()
        cause = denial(user_id, tenant_id, server_id)
        return (cause, server) if beside is None else (cause, server, None)  # type: ignore[return-value]
    sql, names, slots, fields = compiled
    values = {_SENTINELS[0]: user_id, _SENTINELS[1]: tenant_id, _SENTINELS[2]: server_id}
    params = [values.get(slot, slot) if isinstance(slot, int) else slot for slot in slots]
    more: list[Any] = []
    if beside is not None:  # the columns go after the server's (their parameters before the FROM's)
        head, tail = sql.split(" FROM (SELECT 1 AS one) o ", 1)
        sql = f"{head}, {beside[0]} FROM (SELECT 1 AS one) o {tail}"
        params = list(beside[2]) + params
    conn = connections[alias]
    with prepared.cursor(conn) as cur:
        cur.execute(sql, params)
        found = cur.fetchone()
    if beside is not None:
        found, more = found[:len(found) - beside[1]], list(found[len(found) - beside[1]:])
    access, row = found[:len(names)], found[len(names):]
    member = dict(zip(names, access))
    user_row = None if member.get("_member") is None else {  # no user row: the join gave NULLs
        name: (value if value is None else bool(value)) for name, value in member.items()}
    server = None
    if row[0] is not None:
        converted = []
        for (field, col, converters), value in zip(fields, row):
            for convert in converters:
                value = convert(value, col, conn)
            converted.append(value)
        server = McpServer.from_db(alias, [f.attname for f, _, _ in fields], converted)
    if beside is not None:
        return _cause(user_row, tenant_id, server_id), server, more  # type: ignore[return-value]
    return _cause(user_row, tenant_id, server_id), server


_WITH_SERVER: dict[str, Any] = {}


def _compiled_with_server(alias: str):
    """(SQL, access column names, parameters with stand-ins, the server's fields with their
    converters) of :func:`denial_and_server` on ``alias``; None when :func:`_compiled` is."""
    base = _compiled(alias, True)
    if alias not in _WITH_SERVER or _WITH_SERVER[alias][0] is not base:  # built from the access SQL in force
        from django.db import connections

        if base is None:
            _WITH_SERVER[alias] = (base, None)
        else:
            sql, names, slots = base
            conn = connections[alias]
            qn, meta = conn.ops.quote_name, McpServer._meta
            fields = []
            for field in meta.concrete_fields:
                col = field.get_col(meta.db_table)
                fields.append((field, col, conn.ops.get_db_converters(col) + col.get_db_converters(conn)))
            columns = ", ".join(f"s.{qn(f.column)}" for f, _, _ in fields)
            full = (f"SELECT a.*, {columns} FROM (SELECT 1 AS one) o LEFT JOIN ({sql}) a ON TRUE "
                    f"LEFT JOIN {qn(meta.db_table)} s ON s.{qn(meta.pk.column)} = %s "
                    f"AND s.{qn(meta.get_field('tenant').column)} = %s")
            _WITH_SERVER[alias] = (base, (full, names, list(slots) + [_SENTINELS[2], _SENTINELS[1]], fields))
    return _WITH_SERVER[alias][1]


def allowed_condition(alias: str) -> tuple[str, list[Any]] | None:
    """A SQL condition that is true exactly when :func:`denial` (with a server) would say ``""``,
    for the ``WHERE`` of a statement that acts only while the owner may (a row moved at the end of
    a phase: one statement instead of a check and a write), with its parameters: :data:`_SENTINELS`
    where the user, tenant and server ids go (:func:`bind_ids`). Built from :func:`_compiled` (the
    access conditions stay in :func:`_query`); None when that is None, or when :func:`_cause`
    does not read "every column of the row true" as allowed and each one false as denied (a
    change of :func:`_query` that this condition cannot express: the caller checks separately)."""
    compiled = _compiled(alias, True)
    if compiled is None:
        return None
    sql, names, slots = compiled
    if alias not in _CONDITIONS or _CONDITIONS[alias][0] is not compiled:
        from django.db import connections

        everything = {name: True for name in names}
        ok = _cause(everything, _SENTINELS[1], _SENTINELS[2]) == "" and all(
            _cause({**everything, name: False}, _SENTINELS[1], _SENTINELS[2]) for name in names)
        qn = connections[alias].ops.quote_name
        condition = (f"EXISTS (SELECT 1 FROM ({sql}) acc WHERE "
                     + " AND ".join(f"acc.{qn(name)} IS TRUE" for name in names) + ")")
        _CONDITIONS[alias] = (compiled, (condition, list(slots)) if ok else None)
    return _CONDITIONS[alias][1]


_CONDITIONS: dict[str, Any] = {}


def check_sql(alias: str, with_server: bool = True) -> tuple[str, list[str], list[Any]] | None:
    """(SELECT, its column names, its parameters with the stand-ins :func:`bind_ids` fills) of the
    access check (with a server, or of the tenant alone) on ``alias``, for a statement that runs
    it beside something else (a subquery: its one row, or none when the user is gone); read the
    row with :func:`cause_of`. None when the ORM's path serves (see :func:`denial`)."""
    compiled = _compiled(alias, with_server)
    return None if compiled is None else (compiled[0], list(compiled[1]), list(compiled[2]))


def cause_of(row: dict[str, Any] | None, tenant_id: Any, server_id: Any) -> str:
    """What :func:`denial` says of a row of :func:`check_sql` (None: no row), ``""`` when allowed.
    Values as the database gave them (0/1 for booleans on some backends)."""
    if row is not None and all(value is None for value in row.values()):
        row = None  # no user row: a join gave NULLs
    if row is not None:
        row = {name: (value if value is None else bool(value)) for name, value in row.items()}
    return _cause(row, tenant_id, server_id)


def bind_ids(slots: list[Any], user_id: Any, tenant_id: Any, server_id: Any) -> list[Any]:
    """The parameters of :func:`allowed_condition` (or :func:`_compiled`) with these ids."""
    values = {_SENTINELS[0]: user_id, _SENTINELS[1]: tenant_id, _SENTINELS[2]: server_id}
    return [values.get(slot, slot) if isinstance(slot, int) else slot for slot in slots]


async def adenial(user_id: Any, tenant_id: Any, server_id: Any = None) -> str:
    """:func:`denial` from async code."""
    return await sync_to_async(denial)(user_id, tenant_id, server_id)


async def operation_denial(op: Operation) -> str:
    """Why ``op``'s owner may no longer act on it, or ``""``."""
    return await adenial(op.user_id, op.tenant_id, op.server_id)


async def server_for(user: Any, server_id: Any) -> McpServer:
    """The enabled server ``server_id`` of a tenant ``user`` is a member of and may act in (tenant
    loaded): every page and action on a server starts here.

    Raises:
        Http404: no such server for this user, or their access ended (e.g. an inactive user).
    """
    server = await sync_to_async(server_for_sync)(user.pk, server_id)
    if server is None:
        raise Http404("No such server")
    return server


def server_for_sync(user_id: Any, server_id: Any) -> McpServer | None:
    """Sync, one thread hop: :func:`server_for`'s server, None when refused. On PostgreSQL one
    statement (:func:`mrtrweb.tenancy.reads.server_row_beside`: the row and :func:`denial`'s
    check joined); elsewhere the ORM's read, then the check."""
    from django.db import router

    from .reads import server_row_beside

    both = server_row_beside(server_id, user_id, check_sql(router.db_for_read(get_user_model())), bind_ids)
    if both is not None:
        server, row = both
        return server if server is not None and cause_of(row, server.tenant_id, server.pk) == "" else None
    try:
        server = McpServer.objects.select_related("tenant").filter(mine(user_id)).get(
            pk=server_id, enabled=True, tenant__memberships__user_id=user_id)
    except (McpServer.DoesNotExist, ValueError, TypeError, OverflowError):
        return None
    return None if denial(user_id, server.tenant_id, server.pk) else server


async def visible_operation(user_id: Any, op_id: Any) -> Operation | None:
    """The operation to push to ``user_id``'s sockets, or None (not theirs, or access ended)."""
    return await sync_to_async(visible_operation_sync)(user_id, op_id)


def visible_operation_sync(user_id: Any, op_id: Any) -> Operation | None:
    """:func:`visible_operation` in sync code (the operation with its server and tenant, and the
    access check: :func:`operation_and_access`)."""
    op, cause = operation_and_access(op_id, user_id)
    return None if op is None or cause else op


def operation_and_access(op_id: Any, user_id: Any) -> tuple[Operation | None, str]:
    """``(the user's operation op_id with its server and tenant, or None; what`` :func:`denial`
    ``says of its owner, tenant and server, "" when allowed -- and when there is none)``. Sync. On
    PostgreSQL one statement, the check joined to the row
    (:func:`mrtrweb.tenancy.reads.operation_row_beside`); elsewhere the row, then the check.

    Raises:
        django.db.DatabaseError: the database failed."""
    from django.db import router

    from .reads import operation_row, operation_row_beside

    both = operation_row_beside(op_id, user_id, check_sql(router.db_for_read(get_user_model())), bind_ids)
    if both is None:
        op = operation_row(op_id, user_id)
        return op, ("" if op is None else denial(op.user_id, op.tenant_id, op.server_id))
    op, row = both
    return op, ("" if op is None else cause_of(row, op.tenant_id, op.server_id))


async def visible_server(user_id: Any, server_id: Any) -> bool:
    """Whether ``user_id`` may see server ``server_id`` now (as :func:`server_for` would let them):
    the check before a server's listing push reaches their sockets."""
    try:
        server = await McpServer.objects.only("pk", "tenant_id").filter(mine(user_id)).aget(
            pk=server_id, enabled=True, tenant__memberships__user_id=user_id)
    except (McpServer.DoesNotExist, ValueError, TypeError, OverflowError):
        return False
    return not await adenial(user_id, server.tenant_id, server.pk)


async def user_may_connect(user: Any) -> bool:
    """A WebSocket connect: the user (re-read now) exists and is active."""
    User = get_user_model()
    names = ["is_active"] if "is_active" in {f.name for f in User._meta.get_fields()} else ["pk"]
    row = await User._default_manager.filter(pk=user.pk).values(*names).afirst()
    return row is not None and row.get("is_active", True) is True


def actionable_operations(user_id: Any) -> QuerySet[Operation]:
    """``user_id``'s operations they may still act on, as one filter: what :func:`denial` checks
    per operation (the user active, a member of the operation's tenant, its server in that tenant
    and enabled, the tenant's or theirs), for listing many at once (the pending rounds of the navigation,
    :mod:`mrtrweb.consent.pending`). Builds the queryset only; nothing is run."""
    User = get_user_model()
    qs = Operation.objects.filter(
        Exists(Membership.objects.filter(tenant_id=OuterRef("tenant_id"), user_id=user_id)),
        mine(user_id, prefix="server__"),
        user_id=user_id, server__enabled=True, server__tenant_id=F("tenant_id"))
    if "is_active" in {f.name for f in User._meta.get_fields()}:
        qs = qs.filter(user__is_active=True)
    return qs


def open_rounds() -> Q:
    """The filter of operations whose round awaits their person's answer and is not past its
    lifetime by the database's clock, as the sweep judges it (a round past it is settled as
    expired by :mod:`mrtrweb.operations.expiry`)."""
    from django.db.models.functions import Now

    return Q(status=Operation.Status.AWAITING_INPUT) & (
        Q(round_expires_at__isnull=True) | Q(round_expires_at__gt=Now()))
