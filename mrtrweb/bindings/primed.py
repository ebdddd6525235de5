"""Reads of the database binding store made beside a phase's own statement (issue 30): the phase
reads the store's rows in its statement (:meth:`Priming.live_record_sql`, :meth:`Priming.bound_sql`)
and hands them to the store for the gate's next load in the same thread hop (:meth:`Priming.primed`,
:meth:`Priming.primed_bound`: once, then gone), so the gate needs no read of its own. What is
handed over is opened and checked as any load (sealed per tenant and operation); single use stays
the claim's. Thread-local: a primed value never serves another thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from django.db import router

#: this thread's values read beside a phase's own reads
_primed = threading.local()


def take_primed(tenant: str, operation_id: str) -> tuple[str | None] | None:
    """(the sealed record or None) primed for this load, taken (once); None when none is."""
    entry = getattr(_primed, "entry", None)
    if entry is None or entry[:2] != (tenant, operation_id):
        return None
    _primed.entry = None
    return (entry[2],)


def take_primed_bound(tenant: str, user: str, id_key: str) -> tuple[Any, Any] | None:
    """(index operation id, sealed record) primed for this ``load_bound``, taken (once); None when none is."""
    entry = getattr(_primed, "bound", None)
    if entry is None or entry[:3] != (tenant, user, id_key):
        return None
    _primed.bound = None
    return entry[3]


def take_along(alias: str) -> tuple[tuple[str, list[Any]], list[bool], Any] | None:
    """(the write handed to :meth:`Priming.along` for this thread's next ``bind`` or close on
    ``alias``, the list to set True in once its statement ran, the append joined to it or None),
    taken (once); None when none is."""
    entry = getattr(_primed, "along", None)
    if entry is None or entry[0] != alias:
        return None
    _primed.along = None
    return entry[1], entry[2], entry[3]


def take_joined(alias: str) -> Any:
    """The append handed to :meth:`Priming.joining` for this thread's next ``claim_and_save`` or
    ``consume`` on ``alias``, taken (once); None when none is."""
    entry = getattr(_primed, "joined", None)
    if entry is None or entry[0] != alias:
        return None
    _primed.joined = None
    return entry[1]


class Priming:
    """The priming half of :class:`~mrtrweb.bindings.database.DatabaseBindingStore`."""

    def live_record_sql(self, alias: str) -> str | None:
        """A scalar subquery (two parameters: tenant, operation id) of the live sealed record, for
        a phase's own statement on database ``alias`` to read beside its rows (then :meth:`primed`);
        None when the store's rows live on another database."""
        from .statements import live_record_sql

        LiveBinding = self._models()[0]
        return live_record_sql(LiveBinding) if router.db_for_write(LiveBinding) == alias else None

    def bound_sql(self, alias: str, tenant: str, user: str, id_key: str) -> tuple[str, list[Any]] | None:
        """(two columns' SQL, their parameters): the operation id and the sealed record that
        :meth:`load_bound` would read, for a phase's own statement on ``alias`` to read beside its
        rows (then :meth:`primed_bound`); None when the store's rows live on another database."""
        from .statements import bound_columns_sql

        LiveBinding = self._models()[0]
        if router.db_for_write(LiveBinding) != alias:
            return None
        key_digest = self._index_key(tenant, user, id_key)
        return bound_columns_sql(), [tenant, key_digest, tenant, key_digest]

    @contextlib.contextmanager
    def primed_bound(self, tenant: str, user: str, id_key: str, found: tuple[Any, Any]) -> Iterator[None]:
        """Inside the block, this thread's next :meth:`load_bound` of these is ``found`` (the two
        values :meth:`bound_sql` read moments before in the same thread hop), once."""
        _primed.bound = (tenant, user, id_key, found)
        try:
            yield
        finally:
            _primed.bound = None

    def takes_along(self, alias: str) -> bool:
        """Whether this thread's next ``bind`` on ``alias`` would make a write of :meth:`along` in
        its own statement (PostgreSQL, outside a transaction)."""
        LiveBinding = self._models()[0]
        conn = self._chaining(LiveBinding)
        return conn is not None and conn.alias == alias

    @contextlib.contextmanager
    def joining(self, alias: str) -> Iterator[Any]:
        """Inside the block, ``join(joined)`` (the callable it yields) makes this thread's next
        ``claim_and_save`` (what ``Gate.receive`` writes) or ``consume`` (``Gate.respond``) on
        ``alias`` carry ``joined`` (:class:`mrtrweb.audit.joined.JoinedAppend`: the phase's audit
        event and the write that goes with it) in its own statement, made only once its claim won
        and its binding moved (:mod:`.steps`); the gate's ``before_write`` is where it is known.
        Whether it was made there is ``joined``'s to say (``appended``): when not, the caller
        appends as before. Nothing is left primed after the block."""
        def join(joined: Any) -> None:
            _primed.joined = (alias, joined)

        try:
            yield join
        finally:
            _primed.joined = None

    @contextlib.contextmanager
    def along(self, alias: str, sql: str, params: list[Any], joined: Any = None) -> Iterator[list[bool]]:
        """Inside the block, this thread's next ``bind`` (what ``Gate.register`` writes) makes
        ``sql`` (an ``INSERT ... RETURNING``, e.g. the operation's row) first, in the same
        statement: the index entry and the record only once it wrote (all or nothing: a failure
        writes none). Yields a list whose first item is True once the statement ran (a register
        that failed before or in its bind did not run it: the caller makes the write), the second
        then whether the write wrote its row (an ``INSERT ... SELECT ... WHERE`` whose condition
        was false writes none, and then nothing is bound: ``bind`` returns False). A close
        (``discard`` with the index entry) makes it first too, its deletes only with it; ``joined``
        (an append, :mod:`.steps`) then follows it in the same statement, made only when it wrote."""
        made = [False, False]
        _primed.along = (alias, (sql, list(params)), made, joined)
        try:
            yield made
        finally:
            _primed.along = None

    @contextlib.contextmanager
    def primed(self, tenant: str, operation_id: str, sealed: str | None) -> Iterator[None]:
        """Inside the block, this thread's next :meth:`load` of ``(tenant, operation_id)`` is
        ``sealed`` (read by :meth:`live_record_sql` in the same thread hop, moments before) instead
        of a statement of its own; opened and checked as any load. Single use stays the claim's."""
        _primed.entry = (tenant, operation_id, sealed)
        try:
            yield
        finally:
            _primed.entry = None
