"""What checking an answer reads (:func:`.answers._check_answer`), in ONE statement (issue 30): the
operation's row and its server's row as they are now, the owner's access (the access check's own
SQL, :func:`mrtrweb.tenancy.access.check_sql`, so its conditions stay in one place), and what the
round's audit trail says -- whether its consent receipt (``shown``) exists, and of its latest
``received`` event the configuration, ``requestState`` and schema digests and whether it came
from a legacy server or a ``-32042`` error. The SQL is built once per database; no ORM query is
compiled for an answer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import prepared
from ..models import AuditEvent, McpServer, Operation, Tenant
from ..tenancy.reads import field_converters, instance_from


@dataclasses.dataclass
class AnswerReads:
    """:func:`read_for_answer`'s result: ``op`` (its server, tenant and user loaded, as
    ``select_related`` would), the access ``cause`` (``""``: allowed), and of
    the open round: ``shown`` (a receipt exists), ``received`` (an event exists), its digests
    (``config_digest``, ``state_digest``, ``schema_digests``), ``legacy`` / ``url_round``."""

    op: Operation
    cause: str
    shown: bool
    received: bool
    config_digest: str | None
    state_digest: str
    schema_digests: dict[str, Any]
    legacy: bool
    url_round: bool
    #: the operation's live binding record as the store keeps it (sealed), read beside the rest
    #: when the binding store's rows are in this database (``record_read``), for the answer's
    #: retry to be built from (:meth:`mrtrweb.bindings.database.DatabaseBindingStore.primed`)
    record_read: bool = False
    record: str | None = None


_SQL: dict[str, Any] = {}


def _built(alias: str, conn, legacy_code: str, url_code: str, record_sql: str | None = None):
    from ..tenancy import access

    checked = access.check_sql(alias)
    if checked is None:
        return None
    key = (checked[0], legacy_code, url_code, record_sql)
    if alias in _SQL and _SQL[alias][0] == key:
        return _SQL[alias][1]
    sql, names, slots = checked
    qn = conn.ops.quote_name
    op_meta, server_meta, event_meta = Operation._meta, McpServer._meta, AuditEvent._meta
    from django.contrib.auth import get_user_model

    User = get_user_model()
    op_fields, server_fields = field_converters(Operation, conn), field_converters(McpServer, conn)
    tenant_fields, user_fields = field_converters(Tenant, conn), field_converters(User, conn)
    schema_field = event_meta.get_field("schema_digests")
    schema_col = schema_field.get_col(event_meta.db_table)
    schema_conv = conn.ops.get_db_converters(schema_col) + schema_col.get_db_converters(conn)

    def ev(name: str) -> str:
        return "e." + qn(event_meta.get_field(name).column)

    this_round = (f"{ev('operation_id')} = op.{qn(op_meta.pk.column)} AND "
                  f"{ev('round_number')} = op.{qn(op_meta.get_field('rounds').column)}")
    received = f"{this_round} AND {ev('event')} = 'received'"
    latest = f"FROM {qn(event_meta.db_table)} e WHERE {received} ORDER BY {ev('sequence')} DESC LIMIT 1"
    columns = [f"a.{qn(name)}" for name in names]
    columns += [f"op.{qn(f.column)}" for f, _, _ in op_fields] + [f"s.{qn(f.column)}" for f, _, _ in server_fields]
    columns += [f"t.{qn(f.column)}" for f, _, _ in tenant_fields] + [f"u.{qn(f.column)}" for f, _, _ in user_fields]
    columns += [f"EXISTS (SELECT 1 FROM {qn(event_meta.db_table)} e WHERE {this_round} AND {ev('event')} = 'shown')",
                f"EXISTS (SELECT 1 FROM {qn(event_meta.db_table)} e WHERE {received})",
                f"(SELECT {ev('config_digest')} {latest})", f"(SELECT {ev('state_digest')} {latest})",
                f"(SELECT {ev('schema_digests')} {latest})",
                f"EXISTS (SELECT 1 FROM {qn(event_meta.db_table)} e WHERE {received} AND {ev('code')} = %s)",
                f"EXISTS (SELECT 1 FROM {qn(event_meta.db_table)} e WHERE {received} AND {ev('code')} = %s)"]
    if record_sql:
        columns.append(record_sql)
    full = (f"SELECT {', '.join(columns)} FROM (SELECT 1 AS one) o LEFT JOIN ({sql}) a ON TRUE "
            f"LEFT JOIN {qn(op_meta.db_table)} op ON op.{qn(op_meta.pk.column)} = %s "
            f"LEFT JOIN {qn(server_meta.db_table)} s ON s.{qn(server_meta.pk.column)} = "
            f"op.{qn(op_meta.get_field('server').column)} "
            f"LEFT JOIN {qn(Tenant._meta.db_table)} t ON t.{qn(Tenant._meta.pk.column)} = "
            f"op.{qn(op_meta.get_field('tenant').column)} "
            f"LEFT JOIN {qn(User._meta.db_table)} u ON u.{qn(User._meta.pk.column)} = "
            f"op.{qn(op_meta.get_field('user').column)}")
    built = (full, names, slots, op_fields, (server_fields, tenant_fields, user_fields),
             (schema_field, schema_col, schema_conv))
    _SQL[alias] = (key, built)
    return built


def read_for_answer(known: Operation, legacy_code: str, url_code: str) -> AnswerReads | None:
    """The reads of an answer to ``known`` (the operation as the caller holds it: its user,
    tenant and server ids name whose access is checked; they never change for an operation), in
    one statement (sync). None when the access check has no SQL of its own (the caller takes the
    ORM's path).

    Raises:
        Operation.DoesNotExist: the operation is gone.
        django.db.DatabaseError: the database failed.
    """
    from django.db import connections, router

    from ..tenancy import access

    from ..runtime.gates import get_gate

    alias = router.db_for_read(Operation)
    conn = connections[alias]
    record_sql = getattr(get_gate().store, "live_record_sql", None)
    record_sql = record_sql(alias) if record_sql is not None else None
    built = _built(alias, conn, legacy_code, url_code, record_sql)
    if built is None or router.db_for_read(McpServer) != alias:
        return None
    from django.contrib.auth import get_user_model

    full, names, slots, op_fields, related, (schema_field, schema_col, schema_conv) = built
    params = [legacy_code, url_code] + ([str(known.tenant_id), str(known.pk)] if record_sql else [])
    params += access.bind_ids(slots, known.user_id, known.tenant_id, known.server_id)
    params.append(Operation._meta.pk.get_db_prep_value(known.pk, conn))
    with prepared.cursor(conn) as cur:
        cur.execute(full, params)
        found = cur.fetchone()
    n, at = len(names), len(names) + len(op_fields)
    if found[n] is None:
        raise Operation.DoesNotExist(f"operation {known.pk} is gone")
    op = instance_from(Operation, alias, conn, op_fields, found[n:at])
    for relation, model, fields in zip(("server", "tenant", "user"), (McpServer, Tenant, get_user_model()), related):
        values = found[at:at + len(fields)]
        at += len(fields)
        if values[0] is not None:  # (a row the foreign key names; every one does while the operation exists)
            setattr(op, relation, instance_from(model, alias, conn, fields, values))
    rest = found[at:]
    cause = access.cause_of(dict(zip(names, found[:n])), known.tenant_id, known.server_id)
    shown, received, config_digest, state_digest, schema_digests, legacy, url_round = rest[:7]
    for convert in schema_conv:
        schema_digests = convert(schema_digests, schema_col, conn)
    return AnswerReads(op, cause, bool(shown), bool(received), config_digest, state_digest or "",
                       schema_digests or {}, bool(legacy), bool(url_round), bool(record_sql),
                       rest[7] if record_sql else None)
