"""What judging a result reads (:func:`.rounds._judge_round`), in ONE statement (issue 30): the
owner's access and the server's row as they are now (:func:`mrtrweb.tenancy.access.denial_and_server`,
so the access conditions stay in one place), the tenant's audit trail for the result's
``requestState`` (replayed by this operation, reused by another), and the binding the result's
request id is bound to (the binding store's own SQL, when its rows are in the same database: the
gate then judges the result against it without a read of its own). Each SQL is built once per
database; no ORM query is compiled.
"""

from __future__ import annotations

from typing import Any

from .. import prepared
from ..models import Operation
from ..runtime.gates import get_gate


def state_seen(op: Operation, state_digest: str, round_number: int) -> tuple[bool, bool]:
    """Where the tenant's audit trail already holds ``state_digest`` (a ``received`` row), sync
    (one statement: two ``EXISTS``, its SQL built once per database).

    Returns ``(replayed, reused)``: *replayed* -- another round of **this** operation received it,
    so its retry already sent that state back (denied: ``request_state_replayed``); *reused* --
    another operation of the tenant (same or another user) received it (recorded as
    :data:`STATE_REUSED`, not denied)."""
    from django.db import connections, router

    from ..models import AuditEvent

    alias = router.db_for_read(AuditEvent)
    conn = connections[alias]
    sql = _STATE_SQL.get(alias) or _state_seen_sql(alias)
    with prepared.cursor(conn) as cur:
        cur.execute(sql, _state_params(conn, op, state_digest, round_number))
        replayed, reused = cur.fetchone()
    return bool(replayed), bool(reused)


def _state_seen_sql(alias: str) -> str:
    """:func:`state_seen`'s statement on ``alias``, built once."""
    from django.db import connections

    from ..models import AuditEvent

    meta = AuditEvent._meta
    qn = connections[alias].ops.quote_name

    def c(name: str) -> str:
        return qn(meta.get_field(name).column)

    rows = (f"SELECT 1 FROM {qn(meta.db_table)} WHERE {c('tenant')} = %s AND {c('event')} = 'received' "
            f"AND {c('state_digest')} = %s AND {c('operation_id')}")
    return _STATE_SQL.setdefault(alias, f"SELECT EXISTS ({rows} = %s AND {c('round_number')} <> %s), "
                                        f"EXISTS ({rows} <> %s)")


def _state_params(conn, op: Operation, state_digest: str, round_number: int) -> list[Any]:
    from ..models import AuditEvent

    meta = AuditEvent._meta
    tenant = meta.get_field("tenant").get_db_prep_value(op.tenant_id, conn)
    op_id = meta.get_field("operation_id").get_db_prep_value(op.id, conn)
    return [tenant, state_digest, op_id, round_number, tenant, state_digest, op_id]


_STATE_SQL: dict[str, str] = {}


def access_server_and_trail(op: Operation, raw: Any, request_id: str) -> tuple[str, Any, Any, Any]:
    """The owner's access and the server's row as it is now (:func:`mrtrweb.tenancy.access.denial_and_server`)
    and, in the same statement, what the gate and the round's checks read next: the tenant's trail
    for the result's ``requestState`` (:func:`state_seen` for the round this result would open,
    ``op.rounds + 1``) and the binding the result's request id is bound to (the store's
    ``bound_sql``: the database store). Returns (cause, server, trail: (state digest, round number,
    replayed, reused) or None when not read, the binding read: (index operation id, sealed record)
    or None when not read)."""
    from django.contrib.auth import get_user_model
    from django.db import connections, router

    from ..gate import id_key, is_request_id, text_digest
    from ..models import AuditEvent
    from ..tenancy import access

    alias = router.db_for_read(AuditEvent)
    if alias != router.db_for_read(get_user_model()):  # not one database: statements of their own
        return access.denial_and_server(op.user_id, op.tenant_id, op.server_id) + (None, None)
    conn = connections[alias]
    columns, params, count = [], [], 0
    state = raw.get("requestState") if isinstance(raw, dict) else None
    digest, number = (text_digest(state), op.rounds + 1) if isinstance(state, str) else (None, 0)
    if digest is not None:
        columns.append((_STATE_SQL.get(alias) or _state_seen_sql(alias)).removeprefix("SELECT "))
        params += _state_params(conn, op, digest, number)
        count += 2
    bound_sql = getattr(get_gate().store, "bound_sql", None)
    bound = bound_sql(alias, str(op.tenant_id), str(op.user_id), id_key(request_id)) \
        if bound_sql is not None and is_request_id(request_id) else None
    if bound is not None:
        columns.append(bound[0])
        params += bound[1]
        count += 2
    if not count:
        return access.denial_and_server(op.user_id, op.tenant_id, op.server_id) + (None, None)
    cause, server, more = access.denial_and_server(op.user_id, op.tenant_id, op.server_id,
                                                   beside=(", ".join(columns), count, params))
    if more is None:  # the access check's ORM path: nothing read beside
        return cause, server, None, None
    trail = (digest, number, bool(more[0]), bool(more[1])) if digest is not None else None
    return cause, server, trail, (tuple(more[-2:]) if bound is not None else None)
