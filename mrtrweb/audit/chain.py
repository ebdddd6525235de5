"""The per-tenant audit hash chain's pieces below :mod:`mrtrweb.audit.events`: an event's canonical
hash, and the statements that lock a tenant's chain head and append to it on PostgreSQL and
SQLite (:func:`mrtrweb.audit.events._append` drives them: waiting, retries, the ``once`` check).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import secrets
import time
from typing import Any

from django.db import DatabaseError, OperationalError

from .. import prepared
from ..models import AuditChainHead, AuditEvent, AuditOnce

logger = logging.getLogger("mrtrweb.audit")

GENESIS = "0" * 64

#: the fields an event's hash covers, in the canonical JSON (with ``prev_hash`` and the sequence)
HASHED_FIELDS = ("tenant_id", "sequence", "prev_hash", "created_at", "operation_id", "event", "code", "reason",
                 "round_number", "original_request_id", "request_id", "retry_id", "server_id", "server_origin",
                 "method", "name", "user_digest", "tenant_digest", "state_digest", "schema_digests",
                 "display_digest", "config_digest", "actions", "policy_version")

#: fields added later (issue 13: the authorization identity): covered by the hash only when not
#: empty, so every event written before they existed keeps its hash and the chain still verifies
#: (issue 31/32: ``initiator`` and ``initiator_detail``, empty for a person's own call)
OPTIONAL_HASHED_FIELDS = ("auth_mode", "auth_digest", "auth_identity", "initiator", "initiator_detail")


def event_hash(values: dict[str, Any]) -> str:
    """SHA-256 (hex) of an event's canonical JSON: the :data:`HASHED_FIELDS`, ``created_at`` in
    ISO 8601, ids as strings, and each of :data:`OPTIONAL_HASHED_FIELDS` that is not empty. It
    includes ``prev_hash``, which chains it to the previous event."""
    return hashlib.sha256(_canonical(values).encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(values: dict[str, Any]) -> str:
    """The canonical JSON text :func:`event_hash` hashes (sorted keys, no spaces, not ASCII-escaped)."""
    content = {}
    for name in HASHED_FIELDS:
        value = values.get(name)
        if name == "created_at":
            value = value.isoformat()
        elif name in ("tenant_id", "operation_id"):
            value = str(value)
        content[name] = value
    for name in OPTIONAL_HASHED_FIELDS:
        if values.get(name):
            content[name] = values[name]
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def once_key(values: dict[str, Any], once: tuple[str, ...]) -> str:
    """The key of an append's ``once`` claim (:class:`mrtrweb.models.AuditOnce`): the fields' names
    and values, ``name=value`` joined by ``&`` in the order given (migration 0030 builds the same
    keys for the events written before the claims). The values of ``once`` are numbers and digests."""
    return "&".join(f"{name}={values[name]}" for name in once)


def link_texts(values: dict[str, Any]) -> list[str]:
    """The event's canonical JSON (:func:`_canonical`) cut at its ``prev_hash`` and ``sequence``:
    three texts the database joins around them to hash the event under the head's lock.

    Raises:
        DatabaseError: the JSON has no single place for either (never appended)."""
    prev_mark, seq_mark = secrets.token_hex(16), secrets.token_hex(16)
    text = _canonical(dict(values, prev_hash=prev_mark, sequence=seq_mark))
    prev_at, seq_at = f'"prev_hash":"{prev_mark}"', f'"sequence":"{seq_mark}"'
    if text.count(prev_at) != 1 or text.count(seq_at) != 1 or text.index(prev_at) > text.index(seq_at):
        raise DatabaseError("the audit event's canonical JSON has no single place for its link")
    head, rest = text.split(prev_at)
    middle, tail = rest.split(seq_at)
    return [head + '"prev_hash":"', '"' + middle + '"sequence":', tail]


#: :class:`PgAppend`'s two texts per database, ``once`` and ``then`` (built once each)
_APPEND_TEXTS: dict[tuple[Any, ...], tuple[str, str, list[Any], list[Any]]] = {}
_APPEND_TEXTS_MAX = 64


def _append_texts(conn, once: tuple[str, ...], then_sql: str | None) -> tuple[str, str, list[Any], list[Any]]:
    """(``sql``, ``timed_sql``, the event's fields inserted in order, the fields ``once`` compares)
    of :class:`PgAppend` for ``conn``, built once per database and shape."""
    key = (conn.alias, conn.vendor, once, then_sql)
    hit = _APPEND_TEXTS.get(key)
    if hit is not None:
        return hit
    fields = [f for f in AuditEvent._meta.concrete_fields if not f.primary_key and f.attname not in PgAppend.LINKED]
    qn = conn.ops.quote_name
    event, chain = qn(AuditEvent._meta.db_table), qn(AuditChainHead._meta.db_table)
    # once: nothing moves or is inserted when the operation has this event with these values
    same = [AuditEvent._meta.get_field(name) for name in ("operation_id", "event", *once)]
    guard = "" if not once else (f" AND NOT EXISTS (SELECT 1 FROM {event} e WHERE "
                                 + " AND ".join(f"e.{qn(f.column)} = %s" for f in same) + ")")
    # the claim (once), then the head: each statement's own lock_timeout set before either
    # waits (set_config(..., true): local to the statement's transaction; the head's scan
    # evaluates its conditions before its row lock is taken)
    claims = qn(AuditOnce._meta.db_table)
    claim = (f"cl AS (INSERT INTO {claims} (tenant_id, operation_id, event, {qn('key')}) "
             f"SELECT %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM {chain} WHERE tenant_id = %s){{t}} "
             "ON CONFLICT DO NOTHING RETURNING 1), ")
    lock = f"o AS (SELECT tenant_id, sequence, hash FROM {chain} WHERE tenant_id = %s{{after}} FOR UPDATE), "
    timed = "t AS (SELECT set_config('lock_timeout', %s, true)), "
    if once:
        sql = "WITH " + claim.format(t="") + lock.format(after=" AND EXISTS (SELECT 1 FROM cl)")
        timed_sql = ("WITH " + timed + claim.format(t=" AND EXISTS (SELECT 1 FROM t)")
                     + lock.format(after=" AND EXISTS (SELECT 1 FROM cl)"))
    else:
        sql = "WITH " + lock.format(after="")
        timed_sql = "WITH " + timed + lock.format(after=" AND EXISTS (SELECT 1 FROM t)")
    body = (
        f"hd AS (UPDATE {chain} h SET sequence = o.sequence + 1, hash = encode(sha256(convert_to("
        "%s || o.hash || %s || (o.sequence + 1)::text || %s, 'UTF8')), 'hex') FROM o "
        f"WHERE h.tenant_id = o.tenant_id{guard} RETURNING h.sequence, h.hash, o.hash AS prev_hash), "
        f"ev AS (INSERT INTO {event} ({', '.join(qn(f.column) for f in fields)}, sequence, prev_hash, hash) "
        f"SELECT {', '.join(['%s'] * len(fields))}, hd.sequence, hd.prev_hash, hd.hash FROM hd "
        f"RETURNING {qn(AuditEvent._meta.pk.column)}, sequence, prev_hash, hash)")
    if then_sql is None:
        body += " SELECT * FROM ev"
    else:  # the caller's write, made only with the event (after it in the statement's one transaction)
        body += (f", th AS ({then_sql} AND EXISTS (SELECT 1 FROM ev) RETURNING 1) "
                 "SELECT ev.*, (SELECT count(*) FROM th) FROM ev")
    built = (sql + body, timed_sql + body, fields, same)
    if len(_APPEND_TEXTS) < _APPEND_TEXTS_MAX:
        _APPEND_TEXTS[key] = built
    return built


class PgAppend:
    """PostgreSQL: one statement locks the head, moves it and inserts the event whose hash the
    database computes as ``sha256(prefix || prev_hash || middle || sequence || suffix)``, the
    three texts cut here from the event's canonical JSON (:func:`_canonical`) at random
    placeholders for ``prev_hash`` and ``sequence``; returns (pk, sequence, prev_hash, hash) and,
    with ``then`` (an ``UPDATE ... WHERE ...`` without ``RETURNING``, and its parameters), how many
    rows that write moved: it is a step of the same statement, made only when the event is
    inserted (the ``received`` event and the operation's row handed to the person, one statement).

    With ``once`` the statement first inserts the event's claim (:class:`mrtrweb.models.AuditOnce`,
    ``ON CONFLICT DO NOTHING``), and locks the head and appends only when that insert wrote it. A
    concurrent inserter of the same claim waits at the unique index for the first one's transaction
    and then writes nothing: the check is exact across workers in one statement (no lock of the head
    by a statement before it, whose later snapshot the check needed). The claim is inserted only
    where the tenant's head exists (a first append creates the head, then comes again), before the
    head's lock (so two appenders of one claim never wait for each other in the opposite order), and
    is rolled back with the statement if the event is not written. The event's own ``NOT EXISTS``
    check stays for events written without a claim (by a worker not yet upgraded)."""

    LINKED = ("sequence", "prev_hash", "hash")

    def __init__(self, conn, values: dict[str, Any], once: tuple[str, ...] = (),
                 then: tuple[str, list[Any]] | None = None) -> None:
        self.conn = conn
        self.once = once
        self.then = then
        texts = link_texts(values)
        self.sql, self.timed_sql, fields, same = _append_texts(conn, once, then[0] if then is not None else None)
        tenant_id = values["tenant_id"]
        self.params = ([tenant_id, values["operation_id"], values["event"], once_key(values, once), tenant_id]
                       if once else [])
        self.params += ([tenant_id, *texts] + ([f.get_db_prep_value(values[f.attname], conn) for f in same]
                                               if once else [])
                        + [f.get_db_prep_save(values[f.attname], conn) for f in fields])
        if then is not None:
            self.params += list(then[1])

    def one_trip(self) -> bool:
        """Whether ``lock_timeout`` and the statement go in one ``execute``: always, the timeout
        being the statement's first step (``timed_sql``), whether its parameters are bound client-
        or server-side (:mod:`mrtrweb.prepared`)."""
        return True

    def execute(self, deadline: float, *, with_timeout: bool) -> tuple[Any, int, str, str] | None:
        """Run the statement; ``with_timeout`` (outside a transaction): one
        statement, its own transaction, ``lock_timeout`` set to what is left until ``deadline`` by
        the statement itself before it waits for a claim or the head's lock (``set_config(...,
        true)``: local to its transaction). None when nothing was written: the tenant has no chain
        head yet, or (``once``) the event's claim or the event exists."""
        with prepared.cursor(self.conn) as cur:
            if not with_timeout:
                cur.execute(self.sql, self.params)
                return cur.fetchone()
            left = f"{max(1, int((deadline - time.monotonic()) * 1000))}ms"
            cur.execute(self.timed_sql, [left] + self.params)
            return cur.fetchone()


@contextlib.contextmanager
def sqlite_busy_timeout(conn, deadline: float, nested: bool):
    """On SQLite (outside a caller's transaction), wait for the write lock at most until
    ``deadline``, then restore the connection's own busy timeout (``OPTIONS["timeout"]``, s)."""
    if conn.vendor != "sqlite" or nested:
        yield
        return
    left_ms = max(1, int((deadline - time.monotonic()) * 1000))
    own_ms = int(float(conn.settings_dict.get("OPTIONS", {}).get("timeout", 5)) * 1000)
    with prepared.cursor(conn) as cur:
        cur.execute(f"PRAGMA busy_timeout = {left_ms}")
    try:
        yield
    finally:
        try:
            with prepared.cursor(conn) as cur:
                cur.execute(f"PRAGMA busy_timeout = {own_ms}")
        except DatabaseError:  # the connection broke: the append's own error is what counts
            logger.warning("could not restore the SQLite busy timeout after an audit append")


def locked_head(conn, tenant_id: Any, deadline: float) -> tuple[int, str]:
    """(sequence, hash) of the tenant's chain head, locked for the current transaction (created at
    the genesis when the tenant has none yet). On PostgreSQL ``lock_timeout`` is set and the row
    locked by one statement (``set_config(..., true)``, local to the transaction, in its first step:
    evaluated before the row's lock is waited for)."""
    heads = AuditChainHead.objects.using(conn.alias)
    if conn.vendor == "postgresql":
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        qn = conn.ops.quote_name
        lock = (f"WITH t AS (SELECT set_config('lock_timeout', %s, true)) SELECT {qn('sequence')}, {qn('hash')} "
                f"FROM {qn(AuditChainHead._meta.db_table)} WHERE {qn('tenant_id')} = %s AND EXISTS (SELECT 1 FROM t) "
                "FOR UPDATE")
        with prepared.cursor(conn) as cur:
            cur.execute(lock, [f"{left_ms}ms", tenant_id])
            found = cur.fetchone()
        if found is not None:
            return int(found[0]), found[1]
    # SQLite: this write comes first (it takes the database's write lock); elsewhere it creates a
    # missing head (a concurrent creator makes it wait, then do nothing)
    heads.bulk_create([AuditChainHead(tenant_id=tenant_id, sequence=0, hash=GENESIS)], ignore_conflicts=True)
    head = heads.select_for_update().get(tenant_id=tenant_id)
    return head.sequence, head.hash


#: PostgreSQL SQLSTATEs of a lock wait that ended: lock_not_available, serialization_failure,
#: deadlock_detected (the last two only under a stricter isolation level than READ COMMITTED)
_PG_LOCK_STATES = {"55P03", "40001", "40P01"}


def is_lock_wait(conn, exc: OperationalError) -> bool:
    """Whether ``exc`` says that others held the lock (rather than that the database is down)."""
    if conn.vendor == "sqlite":
        return "locked" in str(exc) or "busy" in str(exc)
    return getattr(exc.__cause__, "sqlstate", None) in _PG_LOCK_STATES


def read_event(conn, pk: Any) -> dict[str, Any] | None:
    """One event's fields (by attribute name) read again from the database on ``conn``, through
    the fields' own converters like the ORM's, but with SQL built once per connection alias (the
    ORM's query compilation costs several times the query); None when there is no such row."""
    sql, columns = _READ_SQL.get(conn.alias) or _READ_SQL.setdefault(conn.alias, _read_sql(conn))
    with prepared.cursor(conn) as cur:
        cur.execute(sql, [pk])
        found = cur.fetchone()
    if found is None:
        return None
    out = {}
    for (name, col, converters), value in zip(columns, found):
        for convert in converters:
            value = convert(value, col, conn)
        out[name] = value
    return out


_READ_SQL: dict[str, tuple[str, list[tuple[str, Any, list]]]] = {}


def _read_sql(conn) -> tuple[str, list[tuple[str, Any, list]]]:
    qn = conn.ops.quote_name
    meta = AuditEvent._meta
    columns = []
    for field in meta.concrete_fields:
        col = field.get_col(meta.db_table)
        columns.append((field.attname, col, conn.ops.get_db_converters(col) + col.get_db_converters(conn)))
    sql = (f"SELECT {', '.join(qn(f.column) for f in meta.concrete_fields)} FROM {qn(meta.db_table)} "
           f"WHERE {qn(meta.pk.column)} = %s")
    return sql, columns


def drop_purged_claims(tenant_id: Any, last_sequence: int) -> int:
    """Before a purge removes ``tenant_id``'s events up to ``last_sequence`` (in its transaction):
    delete the once-claims (:class:`mrtrweb.models.AuditOnce`) of the events it removes, so that no
    claim is left without its event -- an append of it would fail closed for good (a round whose
    receipt was purged while it is still open could never be answered) -- and the claims do not
    outlive the retention. A claim stays while an event it names is kept. Returns how many went."""
    from django.db.models import Exists, OuterRef

    def events(**where: Any) -> Exists:
        return Exists(AuditEvent.objects.filter(tenant_id=tenant_id, operation_id=OuterRef("operation_id"),
                                                event=OuterRef("event"), **where))

    claims = AuditOnce.objects.filter(tenant_id=tenant_id).filter(events(sequence__lte=last_sequence))
    gone, _ = claims.exclude(events(sequence__gt=last_sequence)).delete()  # none of theirs kept: all go
    doomed = []
    for pk, operation_id, event, key in claims.filter(events(sequence__gt=last_sequence)).values_list(
            "pk", "operation_id", "event", "key").iterator():  # some kept: the key's own event?
        try:
            fields = dict(part.split("=", 1) for part in key.split("&"))
            kept = AuditEvent.objects.filter(tenant_id=tenant_id, operation_id=operation_id, event=event,
                                             sequence__gt=last_sequence, **fields).exists()
        except Exception:  # noqa: BLE001 -- a key this cannot read: the claim stays (fails closed)
            logger.warning("audit purge: claim %s kept, its key names no event's fields", pk)
            continue
        if not kept:
            doomed.append(pk)
    if doomed:
        gone += AuditOnce.objects.filter(pk__in=doomed).delete()[0]
    return gone
