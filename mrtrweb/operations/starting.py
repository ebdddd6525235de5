"""Starting an operation: the per-user and per-tenant limits, the row, the gate's
registration (``Gate.register``), then the call in the background (:mod:`.calls`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from django.db import connections, router

from django.utils import timezone
from django.utils.translation import gettext_noop

from .. import conf, prepared
from ..text import results
from ..gate import StoreUnavailable
from ..runtime.gates import get_gate
from ..models import McpServer, Operation
from ..text.names import stored_name
from . import initiators
from .authorization import current_auth
from .calls import _drive
from .messages import LIMIT_REACHED, message_for, OperationRefused, STORE_UNAVAILABLE, WORKER_DRAINING
from .rows import inserted, prepare_insert
from .hops import round_hop
from .runtime import _spawn, new_request_id

logger = logging.getLogger("mrtrweb.operations")


async def start_operation(*, user: Any, server: McpServer, method: str, name: str, params: dict[str, Any],
                          destructive: bool = False, output_schema: Any = None,
                          initiator: str = Operation.Initiator.PERSON,
                          initiator_detail: dict[str, str] | None = None,
                          before: Callable[[], McpServer | None] | None = None) -> Operation | None:
    """Register and start an operation; returns at once (the request goes out in the background).
    ``destructive``: the tool's listing says it may destroy (:func:`mrtrweb.catalog.is_destructive`);
    stored, so that every card of the operation warns. ``output_schema``: the tool's listed
    ``outputSchema``, kept (:func:`kept_output_schema`) to check its structured result against.
    ``initiator`` / ``initiator_detail``: who makes the call (``Operation.Initiator``: the person,
    an app on their page, a model whose proposal they approved) and what names it
    (:func:`.initiators.checked_detail`); every initiator takes this same path.

    ``before``: sync work made first in the start's own thread hop (the headless client's member
    check and the server's row, :mod:`mrtrweb.headless.quickstart`): it returns the server to start
    on -- or None, and then nothing is started and this returns None; what it raises, this raises.

    Raises:
        OperationRefused: this worker is draining (``worker_draining``, 503), a per-user limit is
            reached, or the binding store is unavailable.
        django.db.DatabaseError: the database is unreachable (nothing was sent).
    """
    from ..runtime import leases, workers

    if leases.is_draining():
        logger.info("operation refused: worker %s is draining", workers.WORKER_ID)
        raise OperationRefused(WORKER_DRAINING, message_for(WORKER_DRAINING))
    await workers.ensure_lease()  # before the operation names this worker
    initiator, detail = initiators.checked(initiator, initiator_detail)
    args = (user, server, method, name, params, destructive, kept_output_schema(output_schema), initiator, detail)
    op = await (round_hop(_start_sync)(*args) if before is None else round_hop(_start_after)(before, *args))
    if op is None:
        return None
    op.access_checked = True  # by the start's own statement: the drive checks again only after a wait
    _spawn(_drive(op.id, op.request_id, params, checked=op))
    return op


def _start_after(before: Callable[[], McpServer | None], user: Any, server: McpServer, *args: Any) -> Operation | None:
    """``before()``, then, on the server it returns, :func:`_start_sync` -- in one thread hop; None
    when it returns None (nothing started)."""
    server = before()
    return None if server is None else _start_sync(user, server, *args)


def _start_sync(user: Any, server: McpServer, method: str, name: str, params: dict[str, Any],
                destructive: bool = False, output_schema: Any = None, initiator: str = Operation.Initiator.PERSON,
                initiator_detail: dict[str, str] | None = None, *, guard: bool = True) -> Operation:
    """:func:`start_operation`'s database and binding work, in one thread hop: the owner's access
    and the limits, the authorization identity, the row, the gate's registration. With the
    database binding store on PostgreSQL that is ONE statement: the row's ``INSERT`` carries the
    access check and the limits in its ``WHERE`` and is the first step of the binding's statement
    (nothing is bound unless it wrote); only when it wrote nothing is the reason read (one more
    statement). With another store on PostgreSQL (Redis), that ``INSERT`` alone, then the binding.
    Else the access and the four limit counts in one statement, then the row, then the binding.

    Raises:
        OperationRefused: the user may not act on the server now (``denied``, nothing created),
            a limit is reached, or the binding store is unavailable (the row then says ``failed``).
    """
    from ..gate import BindingConflict
    from ..runtime import workers
    from ..tenancy import access

    gate = get_gate()
    takes_along = getattr(gate.store, "takes_along", None)
    alias = router.db_for_write(Operation)
    joins = takes_along is not None and takes_along(alias)
    # the access and the limits in the row's INSERT: with the database store, the first step of the
    # binding's statement; with another store (Redis) on PostgreSQL, the INSERT alone (one statement)
    guarded = _start_condition(alias, user, server) \
        if guard and (joins or connections[alias].vendor == "postgresql") else None
    if guarded is None and access_and_limits_sync(user, server):
        # the owner's access and the four limit counts in one statement (the first request goes out right after)
        raise OperationRefused("denied", str(access.MESSAGE))
    request_id = new_request_id()
    auth = current_auth(server, user.pk, server.tenant_id)
    op, alias, sql, insert_params = prepare_insert(  # one INSERT, its SQL built once (.rows)
        when=guarded, tenant_id=server.tenant_id, user=user, server=server, method=method, name=stored_name(name),
        params=results.params_for_storage(params),
        request_id=request_id, latest_request_id=request_id, worker=workers.WORKER_ID, destructive=destructive,
        output_schema=output_schema, initiator=initiator, initiator_detail=initiator_detail or {}, **auth,
    )
    # the database store makes the row's INSERT the first step of the binding's own statement (PostgreSQL)
    along = gate.store.along(alias, sql, insert_params) if guarded is not None and joins else None
    if along is None:
        with prepared.cursor(connections[alias]) as cur:
            cur.execute(sql, insert_params)
            wrote = guarded is None or cur.fetchone() is not None  # (RETURNING its key: a row when it wrote)
        if not wrote:  # the start's WHERE refused (guarded): nothing written -- why, as below
            if access_and_limits_sync(user, server):  # (a limit raises there)
                raise OperationRefused("denied", str(access.MESSAGE))
            return _start_sync(user, server, method, name, params, destructive, output_schema, initiator,
                               initiator_detail, guard=False)
        inserted(op, alias)
    op.server = server
    try:
        with along if along is not None else contextlib.nullcontext([True, True]) as made:
            try:
                gate.register(
                    request_id=request_id, server_id=str(server.pk), origin=server.origin, user=str(user.pk),
                    tenant=str(server.tenant_id), method=method, params=params, operation_id=str(op.id),
                    policy=conf.server_policy(server),
                )
            except BindingConflict:
                if along is not None and made[0] and not made[1]:  # the start's WHERE refused: nothing written
                    if access_and_limits_sync(user, server):  # why (a limit raises there)
                        raise OperationRefused("denied", str(access.MESSAGE)) from None
                    # allowed by the time of this read (a member added, a round answered): once more, checked first
                    return _start_sync(user, server, method, name, params, destructive, output_schema, initiator,
                                       initiator_detail, guard=False)
                raise
            finally:
                if not made[0]:  # the register failed before or in its bind: the row is inserted on its own
                    with prepared.cursor(connections[alias]) as cur:
                        cur.execute(sql, insert_params)
                        made[:] = [True, cur.rowcount > 0]
                if along is not None and made[1]:
                    inserted(op, alias)
    except StoreUnavailable:
        op.status = Operation.Status.FAILED
        op.error_code = STORE_UNAVAILABLE
        op.error_message = message_for(STORE_UNAVAILABLE)
        op.worker = ""
        op.save()
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    return op


def _start_condition(alias: str, user: Any, server: McpServer) -> tuple[str, list[Any]] | None:
    """The start's access check and limits as a condition for the row's ``INSERT`` (SQL,
    parameters): true exactly when :func:`access_and_limits_sync` would let the start go on.
    None when the access conditions cannot be written as one (the ORM's path) or the user model
    lives on another database."""
    from ..tenancy import access

    if router.db_for_read(type(user)) != alias:
        return None
    condition = access.allowed_condition(alias)
    if condition is None:
        return None
    conn = connections[alias]
    limits = _LIMITS_SQL.get(alias)
    if limits is None:
        qn, meta = conn.ops.quote_name, Operation._meta
        user_col, tenant_col = qn(meta.get_field("user").column), qn(meta.get_field("tenant").column)
        status, created = qn(meta.get_field("status").column), qn(meta.get_field("created_at").column)
        count = "COALESCE(SUM(CASE WHEN {} = %s AND {} THEN 1 ELSE 0 END), 0)"
        waiting, recent = f"{status} = %s", f"{created} >= %s"
        counts = ", ".join(f"{count.format(col, cond)} AS c{i}" for i, (col, cond) in enumerate(
            [(user_col, waiting), (user_col, recent), (tenant_col, waiting), (tenant_col, recent)]))
        limits = _LIMITS_SQL.setdefault(alias, (
            f"NOT EXISTS (SELECT 1 FROM (SELECT {counts} FROM {qn(meta.db_table)} WHERE ({user_col} = %s OR "
            f"{tenant_col} = %s) AND ({waiting} OR {recent})) l WHERE l.c0 >= %s OR l.c1 >= %s OR l.c2 >= %s "
            "OR l.c3 >= %s)"))
    since = timezone.now() - timezone.timedelta(minutes=1)
    field = Operation._meta.get_field
    waiting_v, recent_v = field("status").get_db_prep_value(Operation.Status.AWAITING_INPUT, conn), \
        field("created_at").get_db_prep_value(since, conn)
    user_id = field("user").get_db_prep_value(user.pk, conn)
    tenant_id = field("tenant").get_db_prep_value(server.tenant_id, conn)
    params = access.bind_ids(condition[1], user.pk, server.tenant_id, server.pk) + [
        user_id, waiting_v, user_id, recent_v, tenant_id, waiting_v, tenant_id, recent_v, user_id, tenant_id,
        waiting_v, recent_v] + [int(conf.get(key)) for _, key, _ in _LIMITS]
    return f"{condition[0]} AND {limits}", params


_LIMITS_SQL: dict[str, str] = {}


#: the largest tool outputSchema an operation keeps (compact JSON, bytes); a larger one is not kept
#: and the structured result then reads "no output schema"
MAX_OUTPUT_SCHEMA_BYTES = 64 * 1024


def kept_output_schema(schema: Any) -> dict[str, Any] | None:
    """``schema`` when it is a JSON object of at most :data:`MAX_OUTPUT_SCHEMA_BYTES` without NUL
    characters (PostgreSQL keeps none), else None."""
    import json

    if not isinstance(schema, dict):
        return None
    try:
        text = json.dumps(schema, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return schema if len(text.encode("utf-8", "surrogatepass")) <= MAX_OUTPUT_SCHEMA_BYTES and "\\u0000" not in text \
        else None


#: the limits checked before an operation starts: (count, setting, message)
_LIMITS = (
    ("user_pending", "MAX_PENDING_ROUNDS",
     gettext_noop("You have too many rounds waiting for an answer; answer or let them expire first.")),
    ("user_starts", "MAX_STARTS_PER_MINUTE",
     gettext_noop("You started too many operations in the last minute; wait a moment.")),
    ("tenant_pending", "MAX_TENANT_PENDING_ROUNDS",
     gettext_noop("Your organisation has too many rounds waiting for an answer right now; try again later.")),
    ("tenant_starts", "MAX_TENANT_STARTS_PER_MINUTE",
     gettext_noop("Your organisation started too many operations in the last minute; wait a moment.")),
)


def check_limits_sync(user: Any, tenant_id: Any) -> None:
    """Refuse a new operation when the user or the tenant has too many rounds waiting for an
    answer, or started too many operations in the last minute (``MRTRWEB`` limits): the four
    counts in one query (the user's in every tenant, the tenant's of every user).

    Raises:
        OperationRefused: ``limit_reached``, with the message of the first limit reached.
    """
    from django.db.models import Count, Q

    since = timezone.now() - timezone.timedelta(minutes=1)
    waiting = Q(status=Operation.Status.AWAITING_INPUT)
    recent = Q(created_at__gte=since)
    mine, ours = Q(user=user), Q(tenant_id=tenant_id)  # the user's rows in every tenant count for them
    counts = limits_queryset(user.pk, tenant_id, since).aggregate(
        user_pending=Count("pk", filter=mine & waiting), user_starts=Count("pk", filter=mine & recent),
        tenant_pending=Count("pk", filter=ours & waiting), tenant_starts=Count("pk", filter=ours & recent))
    _refuse_over_limits(user, tenant_id, counts)


def _refuse_over_limits(user: Any, tenant_id: Any, counts: dict[str, Any]) -> None:
    for name, key, message in _LIMITS:
        if (counts[name] or 0) >= int(conf.get(key)):
            logger.info("limit %s reached for user %s / tenant %s", key, getattr(user, "pk", "?"), tenant_id)
            raise OperationRefused(LIMIT_REACHED, message)


_COUNTS = ("user_pending", "user_starts", "tenant_pending", "tenant_starts")
_STARTING_SQL: dict[str, Any] = {}


def _starting_sql(alias: str) -> tuple[str, list[str], list[Any]] | None:
    """The start's one statement on ``alias``: the access check (:func:`mrtrweb.tenancy.access.check_sql`)
    beside the four counts of :func:`limits_queryset` (as :func:`check_limits_sync` counts them),
    built once; None when the access check has no SQL of its own (the ORM's path)."""
    from ..tenancy import access

    checked = access.check_sql(alias)
    if alias in _STARTING_SQL and _STARTING_SQL[alias][0] is checked:
        return _STARTING_SQL[alias][1]
    built = None
    if checked is not None:
        from django.db import connections

        sql, names, slots = checked
        qn, meta = connections[alias].ops.quote_name, Operation._meta
        user, tenant = qn(meta.get_field("user").column), qn(meta.get_field("tenant").column)
        status, created = qn(meta.get_field("status").column), qn(meta.get_field("created_at").column)
        count = "SUM(CASE WHEN {} = %s AND {} THEN 1 ELSE 0 END)"
        waiting, recent = f"{status} = %s", f"{created} >= %s"
        limits = ("SELECT " + ", ".join([count.format(user, waiting), count.format(user, recent),
                                         count.format(tenant, waiting), count.format(tenant, recent)])
                  + f" FROM {qn(meta.db_table)} WHERE ({user} = %s OR {tenant} = %s) AND ({waiting} OR {recent})")
        built = (f"SELECT a.*, l.* FROM (SELECT 1 AS one) o LEFT JOIN ({sql}) a ON TRUE CROSS JOIN ({limits}) l",
                 names, slots)
    _STARTING_SQL[alias] = (checked, built)
    return built


def access_and_limits_sync(user: Any, server: McpServer) -> str:
    """Why ``user`` may not act on ``server`` now (:func:`mrtrweb.tenancy.access.denial`'s cause),
    or ``""``; when they may, the limits are judged too (:func:`check_limits_sync`). One statement
    whose SQL is built once per database (the access check's own SQL beside the counts).

    Raises:
        OperationRefused: ``limit_reached`` (the user may act, but a limit is reached).
    """
    from django.db import connections, router

    from ..tenancy import access

    alias = router.db_for_read(Operation)
    built = _starting_sql(alias)
    if built is None or router.db_for_read(type(user)) != alias:
        cause = access.denial(user.pk, server.tenant_id, server.pk)
        if not cause:
            check_limits_sync(user, server.tenant_id)
        return cause
    sql, names, slots = built
    conn = connections[alias]
    since = timezone.now() - timezone.timedelta(minutes=1)
    field = Operation._meta.get_field
    waiting, recent = field("status").get_db_prep_value(Operation.Status.AWAITING_INPUT, conn), \
        field("created_at").get_db_prep_value(since, conn)
    user_id = field("user").get_db_prep_value(user.pk, conn)
    tenant_id = field("tenant").get_db_prep_value(server.tenant_id, conn)
    params = access.bind_ids(slots, user.pk, server.tenant_id, server.pk) + [
        user_id, waiting, user_id, recent, tenant_id, waiting, tenant_id, recent, user_id, tenant_id, waiting, recent]
    with prepared.cursor(conn) as cur:
        cur.execute(sql, params)
        found = cur.fetchone()
    row = dict(zip(names, found[:len(names)]))
    cause = access.cause_of(row, server.tenant_id, server.pk)
    if not cause:
        _refuse_over_limits(user, server.tenant_id, dict(zip(_COUNTS, found[len(names):])))
    return cause


def limits_queryset(user_id: Any, tenant_id: Any, since: Any):
    """The rows the limit check counts (the benchmark EXPLAINs it): the user's and the tenant's
    operations waiting for an answer or started since ``since``."""
    from django.db.models import Q

    return Operation.objects.filter(Q(user_id=user_id) | Q(tenant_id=tenant_id)).filter(
        Q(status=Operation.Status.AWAITING_INPUT) | Q(created_at__gte=since))
