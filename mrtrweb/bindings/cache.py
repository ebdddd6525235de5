"""The Django-cache binding store: live bindings signed per tenant in a shared cache.

Each record is signed with :mod:`django.core.signing` (salt ``mrtrweb.binding/<tenant>``, so a
record of one tenant never verifies as another's), stored under
``<prefix>:<tenant digest>:<kind>:<digest>`` with the round's TTL, and consumed atomically with
``cache.add`` (Redis ``SET NX`` through django-redis; a lock in locmem), so a round answered
twice -- concurrently, late, or through another worker -- is sent once.

**Consuming a round is one atomic step** (:meth:`DjangoCacheBindingStore.atomic`, which the gate
uses around the round's claim and the record's writes, issue 26): inside it the claim and the
writes are collected, not sent, and at its end they go to Redis as **one Lua script** (``SET NX``
of the claim, then the writes, or nothing when the claim is taken). Redis runs a script whole or
not at all, so a failure -- Redis killed, the connection cut, the worker dying -- leaves either
the round consumed with its record written, or the round untouched and answerable again; never a
claim without its writes (a round no answer could consume until its TTL ran out). An error raised
inside the block sends nothing at all. Keys must live on one Redis server (django-redis' default
client; not Redis Cluster).

Other cache backends (locmem in development and tests, memcached) have no script: the collected
steps run one after the other at the end (``add`` the claim, then the writes), and a failure
after the claim deletes it again, best effort -- locmem lives in one process and does not fail;
on a shared cache without scripts a failure of that delete leaves the claim until its TTL.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
from collections.abc import Iterator
from typing import Any

from django.core import signing
from django.core.cache import caches

from .. import conf
from ..gate import GateRejection, StoreUnavailable
from ..gate.codes import INACTIVE_MRTR_ROUND

logger = logging.getLogger("mrtrweb.bindings")


#: the consume as one Redis script. KEYS[1]: the claim, KEYS[2..]: the writes' keys; ARGV[1], ARGV[2]:
#: the claim's value and lifetime (ms), then per write its kind (set, add, del), value, lifetime (ms)
_CONSUME_LUA = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
for i = 2, #KEYS do
  local kind, value, ms = ARGV[3 * i - 3], ARGV[3 * i - 2], ARGV[3 * i - 1]
  if kind == 'del' then redis.call('DEL', KEYS[i])
  elseif kind == 'add' then redis.call('SET', KEYS[i], value, 'NX', 'PX', ms)
  else redis.call('SET', KEYS[i], value, 'PX', ms) end
end
return 1
"""


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
        # the steps collected inside atomic() (per thread and task): [claim or None, writes]
        self._batch: contextvars.ContextVar[list | None] = contextvars.ContextVar(
            f"mrtrweb-binding-batch-{id(self)}", default=None)

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
        if not self._defer("set", self._key(tenant, "op", operation_id), value, ttl_s):
            self._call("write", self.cache.set, self._key(tenant, "op", operation_id), value, self._timeout(ttl_s))

    def delete(self, tenant: str, operation_id: str) -> None:
        if not self._defer("del", self._key(tenant, "op", operation_id)):
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
        if self._defer("add", self._key(tenant, "id", user, id_key), value, ttl_s):
            return True  # provisional: the gate's consume does not look at it
        return bool(self._call("write", self.cache.add, self._key(tenant, "id", user, id_key), value,
                               self._timeout(ttl_s)))

    def index_delete(self, tenant: str, user: str, id_key: str) -> None:
        if not self._defer("del", self._key(tenant, "id", user, id_key)):
            self._call("delete", self.cache.delete, self._key(tenant, "id", user, id_key))

    def claim(self, tenant: str, token: str, ttl_s: float) -> bool:
        """Mark ``token`` used; True for exactly one caller while it lives. Inside :meth:`atomic`
        (the first claim there): False when the claim is taken already, else True provisionally
        -- it is taken, with the writes after it, at the block's end."""
        key = self._key(tenant, "claim", token)
        batch = self._batch.get()
        if batch is not None and batch[0] is None:
            if self._call("claim", self.cache.has_key, key):
                return False
            batch[0] = (key, self._timeout(ttl_s))
            return True
        return bool(self._call("claim", self.cache.add, key, 1, self._timeout(ttl_s)))

    # ------------------------------------------------------------------ the consume, atomic
    def _defer(self, kind: str, key: str, value: Any = None, ttl_s: float = 0.0) -> bool:
        """Collect a write made inside :meth:`atomic` after its claim; False outside one."""
        batch = self._batch.get()
        if batch is None or batch[0] is None:
            return False
        batch[1].append((kind, key, value, self._timeout(ttl_s)))
        return True

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """The claim taken inside and the writes after it happen together or not at all (see the
        module's docstring): one Lua script on Redis, sequential steps elsewhere.

        Raises:
            GateRejection: ``inactive_mrtr_round``, the claim was taken meanwhile (nothing written).
            StoreUnavailable: the cache failed (on Redis: nothing, or everything, was written).
        """
        if self._batch.get() is not None:  # nested: the outer block applies everything
            yield
            return
        batch: list = [None, []]
        reset = self._batch.set(batch)
        try:
            yield  # an error inside sends nothing: the claim was never taken
        finally:
            self._batch.reset(reset)
        if batch[0] is None:
            return  # no claim: nothing was collected (writes are collected only after one)
        if not self._call("consume", self._apply, batch[0], batch[1]):
            raise GateRejection(INACTIVE_MRTR_ROUND, "the round was answered by a concurrent submission")

    def _apply(self, claim: tuple[str, int], writes: list[tuple[str, str, Any, int]]) -> bool:
        client = getattr(self.cache, "client", None)
        if client is not None and hasattr(client, "get_client") and hasattr(client, "encode"):
            keys = [str(client.make_key(claim[0]))]
            args: list[Any] = [client.encode(1), claim[1] * 1000]
            for kind, key, value, timeout in writes:
                keys.append(str(client.make_key(key)))
                args += [kind, b"" if value is None else client.encode(value), timeout * 1000]
            return bool(client.get_client(write=True).eval(_CONSUME_LUA, len(keys), *keys, *args))
        # no scripts (locmem, ...): the claim, then the writes; a failure after it gives it back
        if not self.cache.add(claim[0], 1, claim[1]):
            return False
        try:
            for kind, key, value, timeout in writes:
                self._apply_one(kind, key, value, timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                self.cache.delete(claim[0])
            raise
        return True

    def _apply_one(self, kind: str, key: str, value: Any, timeout: int) -> None:
        if kind == "del":
            self.cache.delete(key)
        elif kind == "add":
            self.cache.add(key, value, timeout)
        else:
            self.cache.set(key, value, timeout)
