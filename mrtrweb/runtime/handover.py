"""The hand-over of a legacy (2025-11-25) round: from the worker that took the person's answer (B)
to the worker holding the server's call open (A). See "Legacy servers" in :mod:`mrtrweb.operations`.

* **The settle key** of a round is taken once, by whoever settles the round first: B before it
  consumes the round (:func:`settle` ``who="answer"``), A before it gives up on it (deadline,
  stop, operation ended). With the database store (``BINDING_STORE = "database"``, the default)
  it is a claim in that store (a :class:`~mrtrweb.models.BindingClaim` row: it survives a restart
  of Redis), given back with ``release``; with the cache store it is the cache key
  ``<prefix>:legacy:<operation>:<round>:settle`` (``cache.add``), as before.
* **The answer** B validated is a :class:`~mrtrweb.models.LegacyAnswer` row whatever the store:
  ``payload`` sealed (:func:`mrtrweb.authz.crypto.seal`) with its operation and round inside, so a
  row copied to another operation or altered is ignored (logged); taken once by A (a delete that
  removed it), expiring ``TTL_S + 60`` seconds after it was written.

So an answer that was consumed is always delivered, even if the cache is emptied in between, and
a round that A gave up on can no longer be consumed. Sync functions (call them through
``sync_to_async``); ``op`` is an :class:`~mrtrweb.models.Operation` (its ``id`` and ``tenant_id``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.models.functions import Now

from .. import conf
from ..gate import StoreUnavailable

logger = logging.getLogger("mrtrweb.operations")

#: (operation id, round) of answers whose read failed, logged once until a read succeeds again
_unreadable: set[tuple[str, int]] = set()


def _ttl_s() -> int:
    return int(conf.get("TTL_S")) + 60


def _token(op: Any, round_number: int) -> str:
    return f"legacy-settle:{op.id}:{round_number}"


def _cache_key(op: Any, round_number: int) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:legacy:{op.id}:{round_number}:settle"


def _store():
    """The gate's store."""
    from .gates import get_gate

    return get_gate().store


def _cache():
    from django.core.cache import caches

    return caches[conf.get("BINDING_CACHE")]


def settle(op: Any, round_number: int, who: str) -> bool:
    """Take the round's settle key; False: the other side holds it. ``who`` (``"answer"``,
    ``"timeout"``, ``"stopped"``, ``"ended"``) is kept with the cache key only.

    Raises:
        StoreUnavailable: the store (or, with the cache store, the cache) failed; logged.
    """
    store = _store()
    if hasattr(store, "release"):  # the database store
        return store.claim(str(op.tenant_id), _token(op, round_number), _ttl_s())
    try:
        return bool(_cache().add(_cache_key(op, round_number), who, timeout=_ttl_s()))
    except Exception as exc:  # noqa: BLE001
        logger.warning("legacy settle key of operation %s failed: %s", op.id, exc.__class__.__name__)
        raise StoreUnavailable("binding store unavailable (legacy settle)") from exc


def unsettle(op: Any, round_number: int) -> None:
    """Give the settle key back (B, when the answer was refused or not handed over). A failure is
    logged, never raised: A then gives up at its deadline (+ grace)."""
    store = _store()
    try:
        if hasattr(store, "release"):
            store.release(str(op.tenant_id), _token(op, round_number))
        else:
            _cache().delete(_cache_key(op, round_number))
    except Exception as exc:  # noqa: BLE001 -- StoreUnavailable (logged by the store) or a cache failure
        logger.warning("legacy settle key of operation %s could not be released: %s", op.id, exc.__class__.__name__)


def put_answer(op: Any, round_number: int, payload: dict[str, Any]) -> None:
    """Hand the validated answer over: ``payload`` is ``{"retry_id": str, "response": <what the
    server gets>}``, sealed in a ``LegacyAnswer`` row (one statement).

    Raises:
        django.db.DatabaseError: the database failed.
        RuntimeError: a live answer for this round is there already (the settle key prevents it).
    """
    from ..authz import crypto
    from ..bindings.database import lifetime, upsert
    from ..models import LegacyAnswer

    sealed = crypto.seal({"op": str(op.id), "round": round_number, "a": payload})
    # the database's clock (as every binding row): a worker whose clock drifts neither shortens
    # nor stretches the answer's life
    if not upsert(LegacyAnswer, {"operation_id": op.id, "round_number": round_number},
                  {"payload": sealed, "expires_at": lifetime(_ttl_s())}, only_over_expired=True):
        raise RuntimeError("an answer for this round was handed over already")


def take_answer(op: Any, round_number: int) -> dict[str, Any] | None:
    """The answer handed over for this round, once (the row is deleted; whoever deleted it gets
    it); None while there is none, when it fails its checks (logged), or when the database
    failed (logged once until it answers again; A polls again)."""
    from ..authz import crypto
    from ..bindings.database import drop_broken_connection
    from ..models import LegacyAnswer

    key = (str(op.id), round_number)
    rows = LegacyAnswer.objects.filter(operation_id=op.id, round_number=round_number)
    try:
        found = rows.filter(expires_at__gt=Now()).values_list("pk", "payload").first()
        taken = bool(found) and rows.filter(pk=found[0])._raw_delete(rows.db) == 1
    except Exception as exc:  # noqa: BLE001 -- read again at the next poll
        if key not in _unreadable:
            _unreadable.add(key)
            logger.warning("legacy answer of operation %s unreadable: %s", op.id, exc.__class__.__name__)
        drop_broken_connection(LegacyAnswer)
        return None
    if key in _unreadable:
        _unreadable.discard(key)
        logger.info("legacy answer of operation %s readable again", op.id)
    if not taken:
        return None
    try:
        sealed = crypto.unseal(found[1])
    except crypto.SecretUnreadable:
        logger.error("legacy answer of operation %s cannot be opened (keys changed or altered); ignored", op.id)
        return None
    if not isinstance(sealed, dict) or sealed.get("op") != str(op.id) or sealed.get("round") != round_number \
            or not isinstance(sealed.get("a"), dict) or "response" not in sealed["a"]:
        logger.error("legacy answer of operation %s was sealed for another round; ignored", op.id)
        return None
    return sealed["a"]
