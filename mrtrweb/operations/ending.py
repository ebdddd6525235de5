"""The end of a round in one statement (issue 30): the row to its terminal status while the owner
may act, the binding closed and the terminal event appended -- made together, or as before
(:mod:`mrtrweb.audit.joined` says which cases fall back, and what each leaves).
"""

from __future__ import annotations

from typing import Any

from django.db import connections, router

from ..audit.joined import JoinedAppend
from ..models import AuditEvent, Operation


def joined_end(op: Operation, event: str, digests: dict[str, Any] | None) -> JoinedAppend | None:
    """The terminal event ``event`` of ``op`` (its code, round, latest request id and the round's
    ``digests``) as an append to join to the end's statement; None where it cannot be joined (not
    PostgreSQL, in a transaction) or the round's digests would have to be looked up first
    (:func:`mrtrweb.audit.events.record` does that: the caller appends on its own)."""
    if digests is None and op.rounds:
        return None
    if not JoinedAppend.joins(connections[router.db_for_write(AuditEvent)]):
        return None
    return JoinedAppend(op, event, code=op.error_code, reason="", round_number=op.rounds,
                        request_id=op.latest_request_id, **(digests or {}))


def mark_ended_joined(op: Operation, status: str, joined: JoinedAppend | None) -> int | None:
    """:func:`~.runtime.mark_ended` with ``while_allowed`` and ``joined`` appended only with it, in
    ONE statement (a binding store with no statement of its own to join, e.g. Redis: the binding
    is closed after). Returns the rows moved, or None when that is not possible here or the
    append's lock wait failed the statement (nothing written: the caller moves the row and
    appends on their own). Sync.

    Raises:
        django.db.DatabaseError: the database failed (nothing written).
    """
    from .runtime import mark_ended_sql

    if joined is None:
        return None
    built = mark_ended_sql(op, status)
    return None if built is None else joined.run_after(built)
