"""Binding stores: where live operations, their rounds and their request-id index are kept.

A store keeps JSON-serializable *records* under keys scoped by tenant. It needs three atomic
primitives; the gate builds everything else on them:

* ``save``/``load``/``delete`` of an operation record by ``(tenant, operation_id)``;
* an index ``(tenant, user, request-id key) -> operation_id`` with add-if-absent;
* ``claim(tenant, token)``: true for exactly one caller per token, across threads and processes
  (it is what makes a round consumed once, so a double submit sends one retry).

:class:`InMemoryBindingStore` serves one process (tests, ``mrtr_verify``); the Django app uses
the store ``MRTRWEB["BINDING_STORE"]`` names (``mrtrweb.bindings``): the database (default:
sealed records, unique constraints) or the shared cache (signed records, per-tenant prefixes).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from .jsoncopy import json_copy


class BindingStore(Protocol):
    """The storage interface of the gate. Every method may raise
    :class:`mrtrweb.gate.codes.StoreUnavailable` (the gate then fails closed)."""

    def load(self, tenant: str, operation_id: str) -> dict[str, Any] | None:
        """The operation record, or ``None`` if absent or expired."""

    def save(self, tenant: str, operation_id: str, record: dict[str, Any], ttl_s: float) -> None:
        """Store (replace) the record for ``ttl_s`` seconds."""

    def delete(self, tenant: str, operation_id: str) -> None:
        """Forget the record."""

    def index_get(self, tenant: str, user: str, id_key: str) -> str | None:
        """The operation id bound to that request id for that user and tenant."""

    def index_add(self, tenant: str, user: str, id_key: str, operation_id: str, ttl_s: float) -> bool:
        """Bind the request id to the operation unless it is already bound; True if added."""

    def index_delete(self, tenant: str, user: str, id_key: str) -> None:
        """Unbind a request id."""

    def claim(self, tenant: str, token: str, ttl_s: float) -> bool:
        """Atomically mark ``token`` used; True for exactly one caller while it lives."""

    # Optional, for a store that can do better than the calls above (the gate asks ``getattr``):
    #   load_bound(tenant, user, id_key) -> record | None: index_get, then load, in one look-up;
    #   discard(tenant, operation_id) -> record | None: load, then delete, in one statement;
    #   atomic() / release(tenant, token): see mrtrweb.gate.responding._consuming.


class InMemoryBindingStore:
    """A thread-safe store for one process. Entries expire ``ttl_s`` seconds (wall time) after
    they were written."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._index: dict[tuple[str, str, str], tuple[float, str]] = {}
        self._claims: dict[tuple[str, str], float] = {}
        self._writes = 0

    @staticmethod
    def _alive(expires: float) -> bool:
        return time.monotonic() < expires

    def _count_write(self) -> None:
        """Sweep expired entries once every 256 writes of any table (amortised: a sweep walks
        every entry, so sweeping on a size condition that stays true -- e.g. no live record, as
        when every operation is closed -- made each write O(live claims))."""
        self._writes += 1
        if self._writes % 256 == 0:
            self._sweep()

    def _sweep(self) -> None:
        """Drop expired records and index entries (a walk of each: they are few, every finished
        operation deletes its own), and the expired claims at the front of the claims table. Claims
        are never deleted when their round ends -- they are what keeps it consumed for the TTL -- so
        that table holds every claim of the last TTL (two a round: 100,000 entries after 10,000
        rounds a minute). They are kept in the order they were taken, which is the order they
        expire in where their TTL is the same: the sweep stops at the first live one, costing
        the expired ones only, where walking all made every 256th write cost the whole table (3 ms
        at 100,000: a third of the gate's time per round in the benchmark). A claim behind a
        longer-lived one (another TTL, or taken again after it expired) waits for the next sweep
        that reaches it: at most its TTL longer, and never counted alive (``claim`` compares its
        time)."""
        now = time.monotonic()
        for table in (self._records, self._index):
            for key in [k for k, (exp, _) in table.items() if exp <= now]:
                del table[key]
        expired = []
        for key, exp in self._claims.items():
            if exp > now:
                break
            expired.append(key)
        for key in expired:
            del self._claims[key]

    def load(self, tenant: str, operation_id: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._records.get((tenant, operation_id))
            if entry is None or not self._alive(entry[0]):
                return None
            return json_copy(entry[1])

    def save(self, tenant: str, operation_id: str, record: dict[str, Any], ttl_s: float) -> None:
        with self._lock:
            self._count_write()
            self._records[(tenant, operation_id)] = (time.monotonic() + ttl_s, json_copy(record))

    def delete(self, tenant: str, operation_id: str) -> None:
        with self._lock:
            self._records.pop((tenant, operation_id), None)

    def index_get(self, tenant: str, user: str, id_key: str) -> str | None:
        with self._lock:
            entry = self._index.get((tenant, user, id_key))
            if entry is None or not self._alive(entry[0]):
                return None
            return entry[1]

    def index_add(self, tenant: str, user: str, id_key: str, operation_id: str, ttl_s: float) -> bool:
        with self._lock:
            entry = self._index.get((tenant, user, id_key))
            if entry is not None and self._alive(entry[0]):
                return False
            self._count_write()
            self._index[(tenant, user, id_key)] = (time.monotonic() + ttl_s, operation_id)
            return True

    def index_delete(self, tenant: str, user: str, id_key: str) -> None:
        with self._lock:
            self._index.pop((tenant, user, id_key), None)

    def claim(self, tenant: str, token: str, ttl_s: float) -> bool:
        with self._lock:
            exp = self._claims.get((tenant, token))
            if exp is not None and self._alive(exp):
                return False
            self._count_write()
            self._claims[(tenant, token)] = time.monotonic() + ttl_s
            return True

    def release(self, tenant: str, token: str) -> None:
        """Give a claimed token back (a consume that failed after its claim, see
        :func:`mrtrweb.gate.responding._consuming`)."""
        with self._lock:
            self._claims.pop((tenant, token), None)

    def __len__(self) -> int:
        with self._lock:
            self._sweep()
            return len(self._records)
