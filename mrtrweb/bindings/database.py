"""The database binding store: live bindings that survive a restart of Redis or of every worker.

:class:`DatabaseBindingStore` keeps the gate's three tables in the project's database
(:class:`~mrtrweb.models.LiveBinding`, :class:`~mrtrweb.models.BindingIndexEntry`,
:class:`~mrtrweb.models.BindingClaim`):

* a record is sealed (:func:`mrtrweb.authz.crypto.seal`: Fernet, authenticated) together with a
  digest of its tenant and operation, so a row moved to another tenant, copied onto another
  operation, or altered, reads as absent (logged);
  it holds the operation's arguments and a round's ``requestState``, never readable at rest;
* ``index_add`` and ``claim`` are one statement each (PostgreSQL, SQLite: ``INSERT ... ON
  CONFLICT DO UPDATE ... WHERE <the row in the way has expired> RETURNING``): the unique
  constraint makes exactly one caller win across threads, processes and workers, and an expired
  row in the way is taken over in the same statement; ``save`` is one upsert (:func:`upsert`);
* a row past its ``expires_at`` counts as absent everywhere; :func:`sweep` deletes such rows
  (every worker runs it with its expiry sweep, :mod:`mrtrweb.operations.expiry`).

Every database failure raises :class:`~mrtrweb.gate.StoreUnavailable` (one warning line naming
the operation and the exception class, never a value): the gate then fails closed and nothing is
sent. A connection the failure left unusable is closed, so the next call reconnects (a worker
outlives a PostgreSQL restart); a read, an overwrite or a delete that failed on a connection the
database broke while it was kept (the first statement after a blip) is made once more on a new
one first, outside a transaction only; a claim or an index entry never is (issue 26).

Every row's ``expires_at`` is written and compared by the **database's** clock (Django's
``Now()``: ``STATEMENT_TIMESTAMP()`` on PostgreSQL), never a worker's: hosts drift, and a worker
whose clock ran a minute ahead would otherwise sweep, or take over, rows that are live for
everyone else (issue 26). The gate's own expiry (``expires_at`` in the record, its clock) decides
a round's life; the row's is only the storage lifetime (the round's TTL + slack).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, connections, router, transaction
from django.db.models.functions import Now

from ..gate import StoreUnavailable
from .primed import Priming, take_along, take_joined, take_primed, take_primed_bound
from .statements import (NO_RETURNING, _upsert_portable, broke_connection, delete_live,  # noqa: F401
                         delete_rows, delete_sql, drop_broken_connection, lifetime, select_bound, select_live, upsert, upsert_sql)
from .steps import chained, delete_live_after

logger = logging.getLogger("mrtrweb.bindings")


# Deletes are one DELETE statement each (statements.delete_rows; these tables have no relations
# and no signals): ``QuerySet.delete()`` wraps even a fast delete in a transaction (BEGIN + COMMIT:
# two more round trips per call). tests/bindings/test_db_store.py counts the statements.


def _h(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class DatabaseBindingStore(Priming):
    """:class:`mrtrweb.gate.BindingStore` over the project's database (sync; the gate is sync).

    ``tenant`` and ``operation_id`` are the gate's strings (at most 64 characters each: a tenant
    primary key, an operation UUID); a user and a request-id key are stored only as SHA-256
    digests, a claim token likewise.

    Raises (every method): :class:`~mrtrweb.gate.StoreUnavailable` when the database fails.
    """

    #: what may run twice: reads, and writes whose second run leaves what the first left (an
    #: overwrite, a delete) -- never a claim or an index entry (the first may have committed before
    #: its answer was lost: a retry would report it lost)
    _RETRIED = frozenset({"read", "write", "delete"})

    def _call(self, what: str, model, fn, *args):
        try:
            return fn(*args)
        except StoreUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 -- any database failure fails closed
            broken = broke_connection(model)
            if what in self._RETRIED and broken:
                # the first statement after a blip, on a connection the database broke while it was
                # kept (between hops, in the pool's hands): once more on a new one
                drop_broken_connection(model, broken=True)
                try:
                    return fn(*args)
                except Exception as again:  # noqa: BLE001
                    exc = again
                    broken = None  # asked again
            logger.warning("binding store %s failed: %s", what, exc.__class__.__name__)
            drop_broken_connection(model, broken=broken)
            raise StoreUnavailable(f"binding store unavailable ({what})") from exc

    @staticmethod
    def _models():
        from ..models import BindingClaim, BindingIndexEntry, LiveBinding

        return LiveBinding, BindingIndexEntry, BindingClaim

    # ------------------------------------------------------------------ records
    def load(self, tenant: str, operation_id: str) -> dict[str, Any] | None:
        """The record, or None when absent, expired, altered, unreadable with the configured keys
        or sealed for another tenant (the last three logged)."""
        LiveBinding = self._models()[0]
        entry = take_primed(tenant, operation_id)
        if entry is not None:
            sealed = entry[0]
        else:
            sealed = self._call("read", LiveBinding, lambda: select_live(
                LiveBinding, "record", {"tenant": tenant, "operation_id": operation_id}))
        if sealed is None:
            return None
        return _open(sealed, tenant, operation_id)

    def save(self, tenant: str, operation_id: str, record: dict[str, Any], ttl_s: float) -> None:
        """Store (replace) the record for ``ttl_s`` seconds (at least 1): one upsert."""
        from ..authz import crypto

        LiveBinding = self._models()[0]
        sealed = crypto.seal({"t": _h("tenant", tenant), "o": _h("operation", tenant, operation_id), "r": record})
        self._call("write", LiveBinding, lambda: upsert(
            LiveBinding, {"tenant": tenant, "operation_id": operation_id},
            {"record": sealed, "expires_at": lifetime(ttl_s)}, only_over_expired=False))

    #: :meth:`discard` takes ``index`` (:meth:`mrtrweb.gate.Gate.close` asks)
    discards_index = True

    def discard(self, tenant: str, operation_id: str, index: tuple[str, str] | None = None) -> dict[str, Any] | None:
        """Delete the record and return what it held, as :meth:`load` would have (None when
        absent, expired, altered or sealed for another tenant: deleted all the same): one
        ``DELETE ... RETURNING`` on PostgreSQL and SQLite (:meth:`mrtrweb.gate.Gate.close` then
        needs no load first); a load and a delete elsewhere. ``index``: (user, request-id key) of
        an index entry removed with it -- on PostgreSQL in the same statement."""
        LiveBinding = self._models()[0]
        if index is not None and self._chaining(LiveBinding) is None:
            self.index_delete(tenant, index[0], index[1])
            index = None
        also = None if index is None else (self._models()[1], {"tenant": tenant,
                                                               "key_digest": self._index_key(tenant, *index)})
        conn = self._chaining(LiveBinding)
        first = take_along(conn.alias) if conn is not None and also is not None else None
        if first is not None:  # the caller's write first (primed.py): the binding goes only with it
            wrote, sealed = self._call("index", LiveBinding, lambda: delete_live_after(  # never made twice
                LiveBinding, "record", {"tenant": tenant, "operation_id": operation_id}, also, first[0], first[2]))
            first[1][:] = [True, wrote]
            return None if sealed is None else _open(sealed, tenant, operation_id)
        sealed = self._call("delete", LiveBinding, lambda: delete_live(
            LiveBinding, "record", {"tenant": tenant, "operation_id": operation_id}, also=also))
        if sealed is NO_RETURNING:
            record = self.load(tenant, operation_id)
            self.delete(tenant, operation_id)
            return record
        return None if sealed is None else _open(sealed, tenant, operation_id)

    def delete(self, tenant: str, operation_id: str) -> None:
        LiveBinding = self._models()[0]
        self._call("delete", LiveBinding, lambda: delete_rows(LiveBinding, {"tenant": tenant,
                                                                          "operation_id": operation_id}))

    # ------------------------------------------------------------------ request-id index
    @staticmethod
    def _index_key(tenant: str, user: str, id_key: str) -> str:
        return _h("index", tenant, user, id_key)

    def index_get(self, tenant: str, user: str, id_key: str) -> str | None:
        Index = self._models()[1]
        return self._call("read", Index, lambda: select_live(
            Index, "operation_id", {"tenant": tenant, "key_digest": self._index_key(tenant, user, id_key)}))

    def load_bound(self, tenant: str, user: str, id_key: str) -> dict[str, Any] | None:
        """The record of the operation the request id is bound to (:meth:`index_get`, then
        :meth:`load`), in one SELECT joining the live index entry to its live record (SQL built
        once per database). None when either is absent or expired, or the record does not open
        (see :meth:`load`)."""
        LiveBinding = self._models()[0]
        primed = take_primed_bound(tenant, user, id_key)
        if primed is not None:
            found = None if primed[0] is None or primed[1] is None else primed
        else:
            key_digest = self._index_key(tenant, user, id_key)
            found = self._call("read", LiveBinding, lambda: select_bound(tenant, key_digest))
        if found is None:
            return None
        operation_id, sealed = found
        return _open(sealed, tenant, operation_id)

    def index_add(self, tenant: str, user: str, id_key: str, operation_id: str, ttl_s: float) -> bool:
        """Bind the request id unless a live entry binds it already (an expired one is replaced);
        True if this call bound it."""
        Index = self._models()[1]
        return self._call("index", Index, lambda: upsert(
            Index, {"tenant": tenant, "key_digest": self._index_key(tenant, user, id_key)},
            {"operation_id": operation_id, "expires_at": lifetime(ttl_s)}, only_over_expired=True))

    def index_delete(self, tenant: str, user: str, id_key: str) -> None:
        Index = self._models()[1]
        self._call("delete", Index, lambda: delete_rows(
            Index, {"tenant": tenant, "key_digest": self._index_key(tenant, user, id_key)}))

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """The statements inside are one transaction (the gate consumes a round in one: its
        claim and the record's writes commit together or not at all).

        Raises:
            StoreUnavailable: the database failed, including at ``ROLLBACK`` or ``COMMIT``
                (anything else raised inside passes through unchanged).
        """
        LiveBinding = self._models()[0]
        try:
            with transaction.atomic(using=router.db_for_write(LiveBinding)):
                yield
        except StoreUnavailable:
            drop_broken_connection(LiveBinding)
            raise
        except DatabaseError as exc:
            logger.warning("binding store transaction failed: %s", exc.__class__.__name__)
            drop_broken_connection(LiveBinding)
            raise StoreUnavailable("binding store unavailable (transaction)") from exc

    # ------------------------------------------------------------------ a phase's writes in one statement
    # The gate asks for these when the store has them (mrtrweb.gate.store): on PostgreSQL each is
    # ONE statement (bindings.statements.chained); elsewhere the calls above, as the gate made them.

    def _sealed(self, tenant: str, operation_id: str, record: dict[str, Any]) -> str:
        from ..authz import crypto

        return crypto.seal({"t": _h("tenant", tenant), "o": _h("operation", tenant, operation_id), "r": record})

    def _record_step(self, conn, tenant: str, operation_id: str, record: dict[str, Any], ttl_s: float, when: str):
        LiveBinding = self._models()[0]
        return upsert_sql(LiveBinding, conn, {"tenant": tenant, "operation_id": operation_id},
                          {"record": self._sealed(tenant, operation_id, record), "expires_at": lifetime(ttl_s)},
                          only_over_expired=False, when=when)

    def _index_step(self, conn, tenant: str, user: str, id_key: str, operation_id: str, ttl_s: float, when: str = ""):
        Index = self._models()[1]
        return upsert_sql(Index, conn, {"tenant": tenant, "key_digest": self._index_key(tenant, user, id_key)},
                          {"operation_id": operation_id, "expires_at": lifetime(ttl_s)}, only_over_expired=True,
                          when=when)

    def _claim_step(self, conn, tenant: str, token: str, ttl_s: float):
        Claim = self._models()[2]
        return upsert_sql(Claim, conn, {"tenant": tenant, "token_digest": self._claim_key(tenant, token)},
                          {"expires_at": lifetime(ttl_s)}, only_over_expired=True)

    @staticmethod
    def _chaining(model):
        conn = connections[router.db_for_write(model)]
        return conn if conn.vendor == "postgresql" and not conn.in_atomic_block else None

    def bind(self, tenant: str, user: str, id_key: str, operation_id: str, record: dict[str, Any],
             ttl_s: float) -> bool:
        """:meth:`index_add`, then, when it bound the id, :meth:`save`: what ``Gate.register``
        writes. Returns whether the id was bound (False: nothing written)."""
        LiveBinding = self._models()[0]
        conn = self._chaining(LiveBinding)
        if conn is None:
            if not self.index_add(tenant, user, id_key, operation_id, ttl_s):
                return False
            self.save(tenant, operation_id, record, ttl_s)
            return True
        first = take_along(conn.alias)  # a write of the caller's made first, in this statement (primed.py)
        steps = [("i", *self._index_step(conn, tenant, user, id_key, operation_id, ttl_s,
                                         "EXISTS (SELECT 1 FROM w)" if first else "")),
                 ("s", *self._record_step(conn, tenant, operation_id, record, ttl_s, "EXISTS (SELECT 1 FROM i)"))]
        if first:
            steps.insert(0, ("w", *first[0]))
        found = self._call("index", LiveBinding, lambda: chained(conn, steps, ["i", "w"] if first else ["i"]))
        if first:  # the statement ran: whether the caller's write wrote its row (see Priming.along)
            first[1][:] = [True, found[1]]
        return found[0]

    def claim_and_save(self, tenant: str, token: str, operation_id: str, record: dict[str, Any],
                       ttl_s: float) -> bool:
        """:meth:`claim`, then, when won, :meth:`save`: what ``Gate.receive`` writes when it
        accepts a round. Returns whether the claim was won (False: nothing written)."""
        LiveBinding = self._models()[0]
        conn = self._chaining(LiveBinding)
        if conn is None:
            if not self.claim(tenant, token, ttl_s):
                return False
            self.save(tenant, operation_id, record, ttl_s)
            return True
        steps = [("c", *self._claim_step(conn, tenant, token, ttl_s)),
                 ("s", *self._record_step(conn, tenant, operation_id, record, ttl_s, "EXISTS (SELECT 1 FROM c)"))]
        joined = take_joined(conn.alias)  # the received event and the row's move, only with the save (steps.py)
        return self._call("claim", LiveBinding, lambda: chained(conn, steps, ["c"], joined=joined, after="s"))[0]

    def consume(self, tenant: str, token: str, user: str, new_key: str, old_key: str, operation_id: str,
                record: dict[str, Any], ttl_s: float) -> tuple[bool, bool]:
        """What ``Gate.respond`` writes as one: the round's claim, the retry's id bound
        (:meth:`index_add`), the record saved, the previous id unbound -- all or nothing. Returns
        (claim won, id bound): (False, False) the round was consumed by another caller; (True,
        False) the id is bound to something else -- nothing written, the claim not kept either;
        (True, True) done."""
        LiveBinding, Index = self._models()[0], self._models()[1]
        conn = self._chaining(LiveBinding)
        if conn is None:
            return self._consume_in_transaction(tenant, token, user, new_key, old_key, operation_id, record, ttl_s)
        old = {"tenant": tenant, "key_digest": self._index_key(tenant, user, old_key)}
        steps = [("c", *self._claim_step(conn, tenant, token, ttl_s)),
                 ("i", *self._index_step(conn, tenant, user, new_key, operation_id, ttl_s, "EXISTS (SELECT 1 FROM c)")),
                 ("s", *self._record_step(conn, tenant, operation_id, record, ttl_s, "EXISTS (SELECT 1 FROM i)")),
                 ("d", *delete_sql(Index, conn, old, when="EXISTS (SELECT 1 FROM i)"))]
        joined = take_joined(conn.alias)  # the submitted event and the row's move, only with the move (steps.py)
        found = self._call("claim", LiveBinding, lambda: chained(conn, steps, ["c", "i"], undo_unless=("c", "i"),
                                                                 joined=joined, after="i"))
        return (True, False) if found is None else (found[0], found[1])

    def _consume_in_transaction(self, tenant: str, token: str, user: str, new_key: str, old_key: str,
                                operation_id: str, record: dict[str, Any], ttl_s: float) -> tuple[bool, bool]:
        class _Taken(Exception):
            pass

        try:
            with self.atomic():
                if not self.claim(tenant, token, ttl_s):
                    return False, False
                if not self.index_add(tenant, user, new_key, operation_id, ttl_s):
                    raise _Taken  # rolls the claim back
                self.save(tenant, operation_id, record, ttl_s)
                self.index_delete(tenant, user, old_key)
        except _Taken:
            return True, False
        return True, True

    # ------------------------------------------------------------------ single use
    @staticmethod
    def _claim_key(tenant: str, token: str) -> str:
        return _h("claim", tenant, token)

    def claim(self, tenant: str, token: str, ttl_s: float) -> bool:
        """Mark ``token`` used for ``ttl_s`` seconds; True for exactly one caller while it lives
        (a claim whose time ran out can be taken again)."""
        Claim = self._models()[2]
        return self._call("claim", Claim, lambda: upsert(
            Claim, {"tenant": tenant, "token_digest": self._claim_key(tenant, token)},
            {"expires_at": lifetime(ttl_s)}, only_over_expired=True))

    def release(self, tenant: str, token: str) -> None:
        """Give a claimed token back (the legacy settle key, when an answer was refused)."""
        Claim = self._models()[2]
        self._call("delete", Claim, lambda: delete_rows(
            Claim, {"tenant": tenant, "token_digest": self._claim_key(tenant, token)}))


def _open(sealed: str, tenant: str, operation_id: str) -> dict[str, Any] | None:
    """The record inside a sealed ``LiveBinding.record`` if it was sealed for ``tenant`` and
    ``operation_id``, else None (logged: the operation id only)."""
    from ..authz import crypto

    try:
        payload = crypto.unseal(sealed)
    except crypto.SecretUnreadable:
        logger.warning("binding record for operation %s cannot be opened (keys changed or altered); ignored",
                       operation_id)
        return None
    if not isinstance(payload, dict) or payload.get("t") != _h("tenant", tenant) \
            or not isinstance(payload.get("r"), dict) or payload["r"].get("tenant") != tenant:
        logger.warning("binding record for operation %s belongs to another tenant; ignored", operation_id)
        return None
    # the operation too: a row copied onto another operation of the same tenant (rows sealed before
    # "o" was written are judged by the gate's own ``operation_id`` in the record)
    bound = payload.get("o", _h("operation", tenant, str(payload["r"].get("operation_id", operation_id))))
    if bound != _h("operation", tenant, operation_id):
        logger.warning("binding record for operation %s belongs to another operation; ignored", operation_id)
        return None
    return payload["r"]


def sweep(limit: int = 1000) -> int:
    """Delete up to ``limit`` rows of each binding table (and of ``LegacyAnswer``) past their
    ``expires_at`` by the database's clock (sync); returns how many went. Safe on every worker at once; two indexed
    statements per table when rows are due, one when none is.

    Raises:
        django.db.DatabaseError: the database failed (the caller's loop logs it and goes on).
    """
    from ..models import BindingClaim, BindingIndexEntry, LegacyAnswer, LiveBinding

    gone = 0
    for model in (LiveBinding, BindingIndexEntry, BindingClaim, LegacyAnswer):
        # the database's clock, in both statements: a worker whose clock runs ahead sweeps nothing live
        ids = list(model.objects.filter(expires_at__lte=Now()).values_list("pk", flat=True)[:limit])
        if ids:
            gone += model.objects.filter(pk__in=ids, expires_at__lte=Now())._raw_delete(model.objects.db)
    return gone
