"""The Django-cache binding store: live bindings signed per tenant in a shared cache.

Each record is signed with :mod:`django.core.signing` (salt ``mrtrweb.binding/<tenant>``, so a
record of one tenant never verifies as another's), stored under
``<prefix>:<tenant digest>:<kind>:<digest>`` with the round's TTL, and consumed atomically with
``cache.add`` (Redis ``SET NX`` through django-redis; a lock in locmem), so a round answered
twice -- concurrently, late, or through another worker -- is sent once.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.core import signing
from django.core.cache import caches

from .. import conf
from ..gate import StoreUnavailable

logger = logging.getLogger("mrtrweb.bindings")


def _h(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:40]


class DjangoCacheBindingStore:
    """:class:`mrtrweb.gate.BindingStore` over a Django cache alias.

    Args:
        alias: cache alias (default ``MRTRWEB["BINDING_CACHE"]``).
        prefix: key prefix (default ``MRTRWEB["BINDING_KEY_PREFIX"]``).

    Every cache failure raises :class:`StoreUnavailable` (logged with its reason); a record whose
    signature does not verify is treated as absent and logged.
    """

    def __init__(self, alias: str | None = None, prefix: str | None = None) -> None:
        self.alias = alias or conf.get("BINDING_CACHE")
        self.prefix = prefix or conf.get("BINDING_KEY_PREFIX")

    @property
    def cache(self):
        return caches[self.alias]

    def _key(self, tenant: str, kind: str, *parts: str) -> str:
        return f"{self.prefix}:{_h(tenant)}:{kind}:{_h(tenant, *parts)}"

    @staticmethod
    def _salt(tenant: str) -> str:
        return "mrtrweb.binding/" + _h(tenant)

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 -- any cache failure fails closed
            logger.warning("binding store %s failed: %s", what, exc.__class__.__name__)
            raise StoreUnavailable(f"binding store unavailable ({what})") from exc

    @staticmethod
    def _timeout(ttl_s: float) -> int:
        return max(1, int(ttl_s + 0.999))

    def load(self, tenant: str, operation_id: str) -> dict[str, Any] | None:
        raw = self._call("read", self.cache.get, self._key(tenant, "op", operation_id))
        if raw is None:
            return None
        try:
            record = signing.loads(raw, salt=self._salt(tenant))
        except signing.BadSignature:
            logger.warning("binding record for operation %s failed its signature check; ignored", operation_id)
            return None
        if not isinstance(record, dict) or record.get("tenant") != tenant:
            logger.warning("binding record for operation %s belongs to another tenant; ignored", operation_id)
            return None
        return record

    def save(self, tenant: str, operation_id: str, record: dict[str, Any], ttl_s: float) -> None:
        value = signing.dumps(record, salt=self._salt(tenant), compress=True)
        self._call("write", self.cache.set, self._key(tenant, "op", operation_id), value, self._timeout(ttl_s))

    def delete(self, tenant: str, operation_id: str) -> None:
        self._call("delete", self.cache.delete, self._key(tenant, "op", operation_id))

    def index_get(self, tenant: str, user: str, id_key: str) -> str | None:
        raw = self._call("read", self.cache.get, self._key(tenant, "id", user, id_key))
        if raw is None:
            return None
        try:
            return signing.loads(raw, salt=self._salt(tenant) + "/id")
        except signing.BadSignature:
            logger.warning("binding index entry failed its signature check; ignored")
            return None

    def index_add(self, tenant: str, user: str, id_key: str, operation_id: str, ttl_s: float) -> bool:
        value = signing.dumps(operation_id, salt=self._salt(tenant) + "/id")
        return bool(self._call("write", self.cache.add, self._key(tenant, "id", user, id_key), value,
                               self._timeout(ttl_s)))

    def index_delete(self, tenant: str, user: str, id_key: str) -> None:
        self._call("delete", self.cache.delete, self._key(tenant, "id", user, id_key))

    def claim(self, tenant: str, token: str, ttl_s: float) -> bool:
        return bool(self._call("claim", self.cache.add, self._key(tenant, "claim", token), 1, self._timeout(ttl_s)))
