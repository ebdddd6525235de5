"""An audit append made as steps of another statement (issue 30: one statement per phase).

A phase's writes and its audit event commit together when the event's append is a part of the
phase's own statement (PostgreSQL: data-modifying ``WITH`` steps, one statement, one transaction,
one commit): the end's row move, binding close and ``completed`` event; an answer's claim,
binding move, ``submitted`` event and row to running; a result's claim, record, ``received`` event
and row to awaiting. :class:`JoinedAppend` gives the append's steps to whoever builds the statement
(the binding store, :mod:`mrtrweb.bindings.database`, or :meth:`JoinedAppend.run_after` here), which
hands back the statement's columns (:meth:`JoinedAppend.took`); :meth:`JoinedAppend.event` then
checks the event as :func:`mrtrweb.audit.events.record` does.

What the append's steps do, made only when the step they follow wrote a row: ``t`` sets
``lock_timeout`` to what is left of ``MRTRWEB["AUDIT_WAIT_S"]`` (``set_config(..., true)``: this
statement's transaction only) before ``o`` locks the tenant's chain head; ``hd`` moves the head,
hashing the event in the database from its canonical JSON cut here (as
:class:`mrtrweb.audit.chain.PgAppend`); ``ev`` inserts the event; ``th`` (optional) is the
caller's write made only with the event. Every case in which the event is not appended there is
one the caller sees and finishes as before the steps were joined:

* the step they follow wrote nothing: nothing of theirs is written (:meth:`JoinedAppend.event` is None);
* the tenant has no chain head yet: the statement's other writes are made, the event is not
  (:meth:`event` None): the caller appends on its own (:func:`~mrtrweb.audit.events.record`
  creates the head);
* the head stayed locked for ``AUDIT_WAIT_S`` (or a deadlock was broken): the statement fails,
  nothing is written (:meth:`JoinedAppend.lock_wait` True): the statement's builder makes its own
  writes alone and leaves the append to the caller, as before;
* any other failure of the database: nothing is written, the error is the builder's.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, OperationalError, connections, router
from django.utils import timezone

from .. import conf, prepared
from ..models import AuditChainHead, AuditEvent, Operation
from .chain import is_lock_wait, link_texts
from .events import AuditUnavailable, _event, _queued, event_values, recorded

logger = logging.getLogger("mrtrweb.audit")

#: the event's columns the statement returns, then the rows ``th`` wrote
_LINKED = ("sequence", "prev_hash", "hash")


#: :meth:`JoinedAppend.steps`' texts per database, step followed and ``then`` (built once each)
_STEP_TEXTS: dict[tuple[str, str, str | None], tuple[dict[str, Any], list[Any]]] = {}
_STEP_TEXTS_MAX = 64


def _step_texts(conn, after: str, then_sql: str | None) -> tuple[dict[str, Any], list[Any]]:
    """({step name: SQL, "columns": the columns the statement selects}, the event's fields the
    ``ev`` step inserts, in its order) for :meth:`JoinedAppend.steps`."""
    key = (conn.alias, after, then_sql)
    hit = _STEP_TEXTS.get(key)
    if hit is not None:
        return hit
    qn = conn.ops.quote_name
    event, chain = qn(AuditEvent._meta.db_table), qn(AuditChainHead._meta.db_table)
    fields = [f for f in AuditEvent._meta.concrete_fields if not f.primary_key and f.attname not in _LINKED]
    pk = qn(AuditEvent._meta.pk.column)
    sql: dict[str, Any] = {
        "t": "SELECT set_config('lock_timeout', %s, true)",
        "o": f"SELECT tenant_id, sequence, hash FROM {chain} WHERE tenant_id = %s AND EXISTS (SELECT 1 FROM t) "
             f"AND EXISTS (SELECT 1 FROM {after}) FOR UPDATE",
        "hd": f"UPDATE {chain} h SET sequence = o.sequence + 1, hash = encode(sha256(convert_to("
              "%s || o.hash || %s || (o.sequence + 1)::text || %s, 'UTF8')), 'hex') FROM o "
              "WHERE h.tenant_id = o.tenant_id RETURNING h.sequence, h.hash, o.hash AS prev_hash",
        "ev": f"INSERT INTO {event} ({', '.join(qn(f.column) for f in fields)}, sequence, prev_hash, hash) "
              f"SELECT {', '.join(['%s'] * len(fields))}, hd.sequence, hd.prev_hash, hd.hash FROM hd "
              f"RETURNING {pk}, sequence, prev_hash, hash",
        "columns": (f"(SELECT {pk} FROM ev)", "(SELECT sequence FROM ev)", "(SELECT prev_hash FROM ev)",
                    "(SELECT hash FROM ev)"),
    }
    if then_sql is not None:
        sql["th"] = f"{then_sql} AND EXISTS (SELECT 1 FROM ev) RETURNING 1"
        sql["columns"] += ("(SELECT count(*) FROM th)",)
    built = (sql, fields)
    if len(_STEP_TEXTS) < _STEP_TEXTS_MAX:
        _STEP_TEXTS[key] = built
    return built


class JoinedAppend:
    """One event of ``operation`` (``event``; the keyword arguments as
    :func:`~mrtrweb.audit.events.record`'s, ``state_digest`` and ``schema_digests`` given) to be
    appended by steps of another statement; ``then``: (``UPDATE ... WHERE ...`` without
    ``RETURNING``, parameters) made only with the event, its rows in :attr:`then_rows`."""

    def __init__(self, operation: Operation, event: str, *, then: tuple[str, list[Any]] | None = None,
                 read_back: bool = False, **fields: Any) -> None:
        self.operation, self.name, self.then, self.read_back = operation, event, then, read_back
        self.fields = fields
        self.values = event_values(operation, event, **fields)
        self.found: tuple[Any, ...] | None = None  # the statement's columns once it ran
        self.started = time.perf_counter()
        self.deadline = 0.0

    @staticmethod
    def joins(conn) -> bool:
        """Whether the steps can be a part of a statement on ``conn``: PostgreSQL, outside a
        transaction (its parameters bound client- or server-side: :mod:`mrtrweb.prepared`)."""
        return conn.vendor == "postgresql" and not conn.in_atomic_block and conn.get_autocommit()

    @contextlib.contextmanager
    def running(self) -> Iterator[bool]:
        """Around the statement: one of this process's places in the tenant's queue for its chain
        (:func:`mrtrweb.audit.events._queued`), the wait's deadline set (``AUDIT_WAIT_S``). Yields
        False when no place came free in time: the statement is then made without the steps (the
        caller's own append fails as it did)."""
        wait_s = float(conf.get("AUDIT_WAIT_S"))
        self.deadline = time.monotonic() + wait_s
        try:
            place = _queued(self.values["tenant_id"], self.deadline, wait_s)
            place.__enter__()
        except AuditUnavailable:
            yield False
            return
        try:
            yield True
        finally:
            place.__exit__(None, None, None)

    def steps(self, conn, after: str) -> tuple[list[tuple[str, str, list[Any]]], list[str]]:
        """(the steps ``t``, ``o``, ``hd``, ``ev`` and, with ``then``, ``th``: (name, SQL,
        parameters), to follow the statement's step ``after``; the columns the statement selects
        for :meth:`took`). Inside :meth:`running` (its deadline)."""
        self.values["created_at"] = timezone.now()
        texts = link_texts(self.values)
        sql, fields = _step_texts(conn, after, self.then[0] if self.then is not None else None)
        left = f"{max(1, int((self.deadline - time.monotonic()) * 1000))}ms"
        steps = [("t", sql["t"], [left]), ("o", sql["o"], [self.values["tenant_id"]]), ("hd", sql["hd"], texts),
                 ("ev", sql["ev"], [f.get_db_prep_save(self.values[f.attname], conn) for f in fields])]
        if self.then is not None:
            steps.append(("th", sql["th"], list(self.then[1])))
        return steps, list(sql["columns"])

    def took(self, values: tuple[Any, ...] | list[Any]) -> None:
        """The statement ran: its values of :meth:`steps`' columns."""
        self.found = tuple(values)

    def lock_wait(self, exc: BaseException) -> bool:
        """Whether the statement failed because the head (or another row) stayed locked past
        the deadline, or a deadlock was broken: nothing was written."""
        alias = router.db_for_write(AuditEvent)
        return isinstance(exc, OperationalError) and is_lock_wait(connections[alias], exc)

    def gave_way(self, exc: BaseException, conn) -> bool:
        """Whether a failed statement carrying this append wrote nothing and left ``conn``
        working -- a lock wait (:meth:`lock_wait`) or a refusal the database answered -- so its
        parts may be made again on their own; ``False``: the connection broke (whether the
        statement committed is unknown: never made twice)."""
        alone = self.lock_wait(exc) or _answered(conn)
        logger.info("a joined %s append gave way (%s, sqlstate %s): %s", self.values.get("event", "audit"),
                    type(exc).__name__, getattr(exc.__cause__, "sqlstate", None) or "-",
                    "its parts made apart" if alone else "the connection broke, nothing made again")
        return alone

    @property
    def appended(self) -> bool:
        """Whether the statement ran and appended the event."""
        return self.found is not None and self.found[0] is not None

    @property
    def then_rows(self) -> int | None:
        """The rows ``then`` wrote (None: the event was not appended here)."""
        return int(self.found[4]) if self.appended and self.then is not None else None

    def event(self) -> AuditEvent | None:
        """The appended event, its hash checked against its canonical hash and, with
        ``read_back``, read back (then the metrics, as :func:`~mrtrweb.audit.events.record`);
        None when it was not appended here (the caller appends on its own).

        Raises:
            mrtrweb.audit.events.AuditUnavailable: the hash or the read-back differs, or the
                read-back failed (logged)."""
        if not self.appended:
            return None
        using = router.db_for_write(AuditEvent)

        def made() -> AuditEvent:
            row = _event(self.found[:4], self.values, using)
            row.then_rows = self.then_rows
            return row

        return recorded(self.operation, self.name, made, read_back=self.read_back, code=self.fields.get("code", ""),
                        reason=self.fields.get("reason", ""), round_number=self.fields.get("round_number", 0),
                        actions=self.fields.get("actions"), started=self.started)

    def run_after(self, first: tuple[str, list[Any]]) -> int | None:
        """``first`` (an ``UPDATE ... WHERE ...`` without ``RETURNING``, parameters), then this
        append only when it wrote, as ONE statement (on the event's database; a binding store with
        no statement to join, e.g. Redis). Returns the rows ``first`` wrote, or None when the
        statement failed with an error the database answered (the append's lock wait, its insert
        refused), or no place in this process's queue came free in time (nothing written: make
        both on their own, each then fails, or not, as it did).

        Raises:
            django.db.DatabaseError: the database failed otherwise (nothing written)."""
        conn = connections[router.db_for_write(AuditEvent)]
        with self.running() as placed:
            if not placed:
                return None
            steps, columns = self.steps(conn, "w")
            steps.insert(0, ("w", f"{first[0]} RETURNING 1", list(first[1])))
            sql = ("WITH " + ", ".join(f"{name} AS ({step})" for name, step, _ in steps)
                   + " SELECT (SELECT count(*) FROM w), " + ", ".join(columns))
            try:
                with prepared.cursor(conn) as cur:
                    cur.execute(sql, [p for _, _, params in steps for p in params])
                    found = cur.fetchone()
            except DatabaseError as exc:  # refused by the database (the connection works): nothing written
                if self.gave_way(exc, conn):
                    return None
                raise
        self.took(found[1:])
        return int(found[0])


def _answered(conn) -> bool:
    """Whether the statement that just failed on ``conn`` was refused by the database (outside a
    transaction, the connection still works: nothing was written) rather than lost with it."""
    if conn.in_atomic_block or conn.connection is None:
        return False
    try:
        return conn.is_usable()
    except Exception:  # noqa: BLE001 -- a check that fails says the connection is gone
        return False
