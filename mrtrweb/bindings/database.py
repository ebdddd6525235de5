"""The database binding store: live bindings that survive a restart of Redis or of every worker.

:class:`DatabaseBindingStore` keeps the gate's three tables in the project's database
(:class:`~mrtrweb.models.LiveBinding`, :class:`~mrtrweb.models.BindingIndexEntry`,
:class:`~mrtrweb.models.BindingClaim`):

* a record is sealed (:func:`mrtrweb.authz.crypto.seal`: Fernet, authenticated) together with a
  digest of its tenant, so a row moved to another tenant, or altered, reads as absent (logged);
  it holds the operation's arguments and a round's ``requestState``, never readable at rest;
* ``index_add`` and ``claim`` are one ``INSERT`` each: the unique constraint makes exactly one
  caller win across threads, processes and workers (an expired row in the way is deleted first,
  in the same transaction);
* a row past its ``expires_at`` counts as absent everywhere; :func:`sweep` deletes such rows
  (every worker runs it with its expiry sweep, :mod:`mrtrweb.expiry`).

Every database failure raises :class:`~mrtrweb.gate.StoreUnavailable` (logged with its reason):
the gate then fails closed and nothing is sent. Times are the database's ``expires_at`` compared
with this worker's clock (``timezone.now()``); the gate's own expiry (``expires_at`` in the
record, its clock) decides a round's life, the row's is only the storage lifetime (TTL + slack).
"""

from __future__ import annotations

import datetime
import hashlib
import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..gate import StoreUnavailable

logger = logging.getLogger("mrtrweb.bindings")


def _h(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _expiry(ttl_s: float) -> datetime.datetime:
    return timezone.now() + datetime.timedelta(seconds=max(1.0, float(ttl_s)))


class DatabaseBindingStore:
    """:class:`mrtrweb.gate.BindingStore` over the default database (sync; the gate is sync).

    Raises (every method): :class:`~mrtrweb.gate.StoreUnavailable` when the database fails.
    """

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except StoreUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 -- any database failure fails closed
            logger.warning("binding store %s failed: %s", what, exc.__class__.__name__)
            raise StoreUnavailable(f"binding store unavailable ({what})") from exc

    # ------------------------------------------------------------------ records
    def load(self, tenant: str, operation_id: str) -> dict[str, Any] | None:
        return self._call("read", self._load, tenant, operation_id)

    def _load(self, tenant: str, operation_id: str) -> dict[str, Any] | None:
        from ..authz import crypto
        from ..models import LiveBinding

        sealed = LiveBinding.objects.filter(tenant=tenant, operation_id=operation_id,
                                            expires_at__gt=timezone.now()).values_list("record", flat=True).first()
        if sealed is None:
            return None
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
        return payload["r"]

    def save(self, tenant: str, operation_id: str, record: dict[str, Any], ttl_s: float) -> None:
        self._call("write", self._save, tenant, operation_id, record, ttl_s)

    def _save(self, tenant: str, operation_id: str, record: dict[str, Any], ttl_s: float) -> None:
        from ..authz import crypto
        from ..models import LiveBinding

        sealed = crypto.seal({"t": _h("tenant", tenant), "r": record})
        LiveBinding.objects.update_or_create(tenant=tenant, operation_id=operation_id,
                                             defaults={"record": sealed, "expires_at": _expiry(ttl_s)})

    def delete(self, tenant: str, operation_id: str) -> None:
        from ..models import LiveBinding

        self._call("delete", lambda: LiveBinding.objects.filter(tenant=tenant, operation_id=operation_id).delete())

    # ------------------------------------------------------------------ request-id index
    def index_get(self, tenant: str, user: str, id_key: str) -> str | None:
        from ..models import BindingIndexEntry

        return self._call("read", lambda: BindingIndexEntry.objects.filter(
            tenant=tenant, key_digest=_h(user, id_key), expires_at__gt=timezone.now(),
        ).values_list("operation_id", flat=True).first())

    def index_add(self, tenant: str, user: str, id_key: str, operation_id: str, ttl_s: float) -> bool:
        from ..models import BindingIndexEntry

        return self._call("write", self._insert_once, BindingIndexEntry,
                          {"tenant": tenant, "key_digest": _h(user, id_key)},
                          {"operation_id": operation_id, "expires_at": _expiry(ttl_s)})

    def index_delete(self, tenant: str, user: str, id_key: str) -> None:
        from ..models import BindingIndexEntry

        self._call("delete", lambda: BindingIndexEntry.objects.filter(
            tenant=tenant, key_digest=_h(user, id_key)).delete())

    # ------------------------------------------------------------------ single use
    def claim(self, tenant: str, token: str, ttl_s: float) -> bool:
        from ..models import BindingClaim

        return self._call("claim", self._insert_once, BindingClaim,
                          {"tenant": tenant, "token_digest": _h("claim", token)}, {"expires_at": _expiry(ttl_s)})

    def release(self, tenant: str, token: str) -> None:
        """Give a claimed token back (the legacy settle key, when an answer was refused)."""
        from ..models import BindingClaim

        self._call("delete", lambda: BindingClaim.objects.filter(
            tenant=tenant, token_digest=_h("claim", token)).delete())

    @staticmethod
    def _insert_once(model, unique: dict[str, Any], values: dict[str, Any]) -> bool:
        """Insert the row named by ``unique`` unless a live one exists; True if this call inserted.

        An expired row in the way is deleted first; the unique constraint decides between
        concurrent callers (the loser's ``IntegrityError`` is False, never an error)."""
        try:
            with transaction.atomic():
                model.objects.filter(**unique, expires_at__lte=timezone.now()).delete()
                model.objects.create(**unique, **values)
            return True
        except IntegrityError:
            return False


def sweep(limit: int = 1000) -> int:
    """Delete up to ``limit`` rows of each binding table past their ``expires_at`` (sync); returns
    how many went. Safe on every worker at once."""
    from ..models import BindingClaim, BindingIndexEntry, LegacyAnswer, LiveBinding

    now = timezone.now()
    gone = 0
    for model in (LiveBinding, BindingIndexEntry, BindingClaim, LegacyAnswer):
        ids = list(model.objects.filter(expires_at__lte=now).values_list("pk", flat=True)[:limit])
        if ids:
            gone += model.objects.filter(pk__in=ids, expires_at__lte=now).delete()[0]
    return gone
