"""Audit events for every round: digests only (mrtr-gate.md §4).

User and tenant are recorded as keyed digests (HMAC-SHA256 with ``MRTRWEB["AUDIT_SECRET"]`` or a
key derived from ``SECRET_KEY``) so small id spaces cannot be brute-forced; ``requestState`` and
each ``requestedSchema`` as SHA-256 digests; answers as their keys and actions only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import logging
import random
import threading
import time
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError, connections, router, transaction
from django.utils import timezone

from .. import conf
from .chain import HASHED_FIELDS, OPTIONAL_HASHED_FIELDS, event_hash  # noqa: F401 -- the API
from .chain import PgAppend, is_lock_wait, locked_head, read_event, sqlite_busy_timeout
from ..models import AuditChainHead, AuditEvent, Operation
from ..runtime import metrics  # noqa: I001 -- mrtrweb_* counters: one hook in record()
from . import verify as _verify

logger = logging.getLogger("mrtrweb.audit")


class AuditUnavailable(Exception):
    """The audit event could not be written or read back: the retry must not be sent."""


def keyed_digest(value: str) -> str:
    """``hmac-sha256:<hex>`` of ``value`` under the audit key."""
    secret = conf.get("AUDIT_SECRET") or ("mrtrweb.audit/" + settings.SECRET_KEY)  # a key: never renamed with the module
    mac = hmac.new(str(secret).encode(), value.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()


def _append(values: dict[str, Any], *, once: tuple[str, ...] = (),
            then: tuple[str, list[Any]] | None = None) -> AuditEvent:
    """Append one event at the head of its tenant's chain, so that concurrent appenders (threads
    or processes) queue on the tenant's chain head instead of failing:

    * PostgreSQL: ONE statement (:class:`PgAppend`), its own transaction: it locks the tenant's
      head row (``SELECT ... FOR UPDATE``; other tenants' appends do not wait), moves it, computes
      the event's hash in the database from the canonical JSON built here (only ``prev_hash`` and
      ``sequence`` are filled in under the lock) and inserts the event; ``lock_timeout`` = what
      is left of ``MRTRWEB["AUDIT_WAIT_S"]`` is set by that statement itself before it tries the
      lock (``set_config(..., true)``). At most :data:`APPENDERS_PER_TENANT` threads of a process
      wait there for one tenant's head, the lock held for the statement's execution and commit alone; its hash is checked here against :func:`event_hash`. With ``once`` the same statement
      first inserts the event's claim (:class:`mrtrweb.models.AuditOnce`, unique) and appends only
      when it wrote it: exact across workers (:class:`PgAppend`; in a caller's transaction the lock,
      check and statement go one by one, and a race there ends as a deadlock error);
    * SQLite: the transaction's first statement is a write (``INSERT OR IGNORE`` of the head row),
      so the database's one write lock is taken at once and waited for (busy timeout = what is left
      of ``AUDIT_WAIT_S``) -- never the read-then-write lock upgrade that fails at once with
      "database is locked" (with ``"transaction_mode": "IMMEDIATE"`` the ``BEGIN`` takes it);
      then the event is linked to the head (sequence + 1, ``prev_hash``), inserted, the head moved.

    ``created_at`` is taken when the append starts (hashed before the lock): it may be earlier, by
    at most the wait, than the previous event's. A failed lock wait is retried until ``AUDIT_WAIT_S``
    has passed (not inside a caller's transaction, which a failed statement may have spoilt).

    Args:
        values: the event's fields by attribute name (``tenant_id``, ``operation_id``, ...), all but
            ``sequence``, ``prev_hash``, ``created_at`` and ``hash``, which are set here.
        once: names of fields; when an event of the same operation and kind with equal values of
            these fields exists, it is returned and nothing is appended (checked under the lock,
            so concurrent writers of the same receipt append it once).
        then: an ``UPDATE ... WHERE ...`` (no ``RETURNING``) and its parameters made in the same
            statement, only when the event is inserted (PostgreSQL's one-trip path); the event's
            ``then_rows`` is how many rows it wrote, None when it was not made (the caller makes it).
    Returns:
        The appended (or, with ``once``, the existing) event, its ``pk`` set.

    Raises:
        AuditUnavailable: the chain stayed locked by others for ``AUDIT_WAIT_S`` seconds.
        django.db.DatabaseError: any other failure of the database (the caller denies).
    """
    tenant_id = values["tenant_id"]
    using = router.db_for_write(AuditEvent)
    conn = connections[using]
    wait_s = float(conf.get("AUDIT_WAIT_S"))
    deadline = time.monotonic() + wait_s
    nested = conn.in_atomic_block
    values = dict(values, created_at=timezone.now())
    one = PgAppend(conn, values, once, then) if conn.vendor == "postgresql" else None  # (without then: when sent)

    def same() -> AuditEvent | None:  # (the once-guard's query: built only when asked)
        return AuditEvent.objects.using(using).filter(
            operation_id=values["operation_id"], event=values["event"], **{name: values[name] for name in once}).first()

    head_made = False
    while True:
        try:
            if one is not None and not nested and conn.get_autocommit() and one.one_trip():
                with _queued(tenant_id, deadline, wait_s):
                    found = one.execute(deadline, with_timeout=True)  # its own transaction
                if found is None and once and (existing := same()) is not None:
                    return existing  # written before (its claim was, and it committed with it)
                if found is None and head_made:  # a claim without its event (a purged one): nothing appended
                    raise DatabaseError("the audit event's once-claim exists without the event")
                if found is None:  # the tenant has no head yet: create it, then append
                    head_made = True
                    with transaction.atomic(using=using):
                        locked_head(conn, tenant_id, deadline)
                    continue
                event = _event(found[:4], values, using)
                if then is not None:
                    event.then_rows = int(found[4])
                return event
            with sqlite_busy_timeout(conn, deadline, nested), transaction.atomic(using=using):
                sequence, prev_hash = locked_head(conn, tenant_id, deadline)
                if once and (existing := same()) is not None:
                    return existing
                if one is not None:
                    found = (one if then is None else PgAppend(conn, values, once)).execute(deadline, with_timeout=False)
                    if found is None or found[1] != sequence + 1:  # cannot happen while locked
                        raise DatabaseError("the audit chain head moved while locked")
                else:
                    row = dict(values, sequence=sequence + 1, prev_hash=prev_hash)
                    digest_hex = event_hash(row)
                    pk = AuditEvent.objects.using(using).create(hash=digest_hex, **row).pk
                    moved = AuditChainHead.objects.using(using).filter(tenant_id=tenant_id).update(
                        sequence=sequence + 1, hash=digest_hex)
                    if moved != 1:  # cannot happen while the lock is held; never fork the chain
                        raise DatabaseError("the audit chain head moved while locked")
                    found = (pk, sequence + 1, prev_hash, digest_hex)
                event = _event(found, values, using)  # a mismatch rolls the append back
            return event
        except OperationalError as exc:
            if nested or not is_lock_wait(conn, exc):
                raise
            if time.monotonic() >= deadline:
                raise AuditUnavailable(f"the audit chain stayed locked by other writers for {wait_s:g} s") from exc
            time.sleep(random.uniform(0.005, 0.05))


#: at most this many threads of one process wait at PostgreSQL for one tenant's chain head at a time
#: (the others wait here, on a semaphore, at no CPU cost): enough that the next append is already
#: waiting when the head is released, few enough that the database does not spend its CPU on a crowd
#: of waiters (docs/benchmarks.md, audit_threads: 40 threads appending at once fell to ~80 % of 8's)
APPENDERS_PER_TENANT = 4
_queues: dict[Any, threading.BoundedSemaphore] = {}
_queues_lock = threading.Lock()


@contextlib.contextmanager
def _queued(tenant_id: Any, deadline: float, wait_s: float):
    """Hold one of the :data:`APPENDERS_PER_TENANT` places of this process for ``tenant_id``'s
    chain while the block runs, waiting at most until ``deadline``.

    Raises:
        AuditUnavailable: no place came free before ``deadline`` (as a lock wait that ran out)."""
    places = _queues.get(tenant_id)
    if places is None:
        with _queues_lock:
            places = _queues.setdefault(tenant_id, threading.BoundedSemaphore(APPENDERS_PER_TENANT))
    if not places.acquire(timeout=max(0.0, deadline - time.monotonic())):
        raise AuditUnavailable(f"the audit chain stayed locked by other writers for {wait_s:g} s")
    try:
        yield
    finally:
        places.release()


@functools.cache
def _columns() -> tuple[str, ...]:
    return tuple(f.attname for f in AuditEvent._meta.concrete_fields)


def _event(found: tuple[Any, int, str, str], values: dict[str, Any], using: str) -> AuditEvent:
    """The appended event from (pk, sequence, prev_hash, hash), its hash checked against
    :func:`event_hash` (a mismatch raises DatabaseError: the retry it guards is not sent)."""
    pk, sequence, prev_hash, digest_hex = found
    row = dict(values, id=pk, sequence=sequence, prev_hash=prev_hash, hash=digest_hex)
    names = _columns()  # every column given: the positional constructor (no look-up of each keyword)
    event = AuditEvent(*[row[n] for n in names]) if row.keys() == set(names) else AuditEvent(**row)
    event._state.adding, event._state.db = False, using
    if event_hash(event.__dict__) != digest_hex:
        raise DatabaseError("the audit event's hash computed by the database differs from its canonical hash")
    return event


def event_values(operation: Operation, event: str, *, code: str = "", reason: str = "", round_number: int = 0,
                 request_id: Any = "", retry_id: Any = "", state_digest: str | None = None,
                 schema_digests: dict[str, str] | None = None, actions: dict[str, str] | None = None,
                 display_digest: str = "", config_digest: str = "", user_id: Any = None,
                 auth: dict[str, str] | None = None) -> dict[str, Any]:
    """The fields of ``operation``'s event ``event`` by attribute name (what :func:`_append` takes;
    the arguments as :func:`record`'s): digests only, never a value."""
    return {
        "tenant_id": operation.tenant_id,
        "operation_id": operation.id,
        "event": event,
        "code": code,
        "reason": reason[:200],
        "round_number": round_number,
        "original_request_id": str(operation.request_id or ""),
        "request_id": str(request_id or ""),
        "retry_id": str(retry_id or ""),
        "server_id": str(operation.server_id),
        "server_origin": operation.server.origin,
        "method": operation.method,
        "name": operation.name[:500],
        "user_digest": keyed_digest(f"user:{operation.user_id if user_id is None else user_id}"),
        "tenant_digest": keyed_digest(f"tenant:{operation.tenant_id}"),
        "state_digest": state_digest or "",
        "schema_digests": schema_digests or {},
        "display_digest": display_digest,
        "config_digest": config_digest,
        "actions": actions or {},
        "policy_version": str(conf.get("POLICY_VERSION")),
        **_auth_fields(operation, auth),
        **_initiator_fields(operation),
    }


def record(operation: Operation, event: str, *, code: str = "", reason: str = "", round_number: int = 0,
           request_id: Any = "", retry_id: Any = "", state_digest: str | None = None,
           schema_digests: dict[str, str] | None = None, actions: dict[str, str] | None = None,
           display_digest: str = "", config_digest: str = "", user_id: Any = None,
           read_back: bool = False, once: tuple[str, ...] = (), auth: dict[str, str] | None = None,
           then: tuple[str, list[Any]] | None = None) -> AuditEvent:
    """Append one event for ``operation`` (sync; call through ``sync_to_async`` from async code).
    Concurrent appends wait for each other (bounded by ``MRTRWEB["AUDIT_WAIT_S"]``, see
    :func:`_append`); a real outage of the database fails at once.

    Args:
        user_id: whose action it is, when not the operation's owner (an attempt by another user).
        read_back: re-read the row from the database and check its hash (used before a retry leaves).
        once: field names (e.g. ``("round_number", "display_digest")``): when this operation already
            has an event of this kind with the same values, that one is returned, nothing appended.
        then: a write made in the append's own statement, only with the event (see
            :func:`_append`): the returned event's ``then_rows`` says how many rows it wrote, or is
            None when it was not made there (the caller makes it).
        auth: ``auth_mode`` / ``auth_digest`` / ``auth_identity`` (digests, see
            :func:`mrtrweb.authz.identity.binding_fields`) when they differ from what the operation
            recorded at its start (a round received under another identity); default: the operation's.

    Raises:
        AuditUnavailable: the write or the read-back failed (reason logged).
    """
    def append() -> AuditEvent:
        nonlocal state_digest, schema_digests
        if event != "received" and round_number and (state_digest is None or schema_digests is None):
            # every event of a round carries the round's requestState and requestedSchema digests
            received = AuditEvent.objects.filter(operation_id=operation.id, round_number=round_number,
                                                 event="received").order_by("-sequence").first()
            if received is not None:
                state_digest = received.state_digest if state_digest is None else state_digest
                schema_digests = received.schema_digests if schema_digests is None else schema_digests
        return _append(event_values(operation, event, code=code, reason=reason, round_number=round_number,
                                    request_id=request_id, retry_id=retry_id, state_digest=state_digest,
                                    schema_digests=schema_digests, actions=actions, display_digest=display_digest,
                                    config_digest=config_digest, user_id=user_id, auth=auth), once=once, then=then)

    return recorded(operation, event, append, read_back=read_back, code=code, reason=reason,
                    round_number=round_number, actions=actions, once=once)


def recorded(operation: Operation, event: str, append, *, read_back: bool, code: str, reason: str, round_number: int,
             actions: dict[str, str] | None, once: tuple[str, ...] = (), started: float | None = None) -> AuditEvent:
    """What :func:`record` does around ``append()`` (a callable that appends the event, or gives
    the event another statement appended: :mod:`mrtrweb.audit.joined`): the read-back with
    ``read_back``, the metrics, and every failure logged and raised as :class:`AuditUnavailable`.
    ``started``: ``time.perf_counter()`` when the append began (default: now)."""
    started = time.perf_counter() if started is None else started
    try:
        row = append()
        if read_back:
            again = read_event(connections[router.db_for_read(AuditEvent)], row.pk)
            if again is None or again["hash"] != event_hash(again) or again["hash"] != row.hash:
                raise AuditUnavailable("the audit event read back differs from what was written")
        metrics.observe_event(operation, event, code=code, reason=reason, round_number=round_number, actions=actions,
                              seconds=time.perf_counter() - started, row=row if once else None)  # never raises
        return row
    except AuditUnavailable as exc:
        metrics.audit_failed()
        logger.error("audit write/read-back failed for operation %s (%s): %s", operation.id, event, exc)
        raise
    except Exception as exc:  # noqa: BLE001 -- any sink failure denies the retry
        metrics.audit_failed()
        logger.error("audit write failed for operation %s (%s): %s", operation.id, event, exc.__class__.__name__)
        raise AuditUnavailable(f"audit sink failed: {exc.__class__.__name__}") from exc


def append_config(values: dict[str, Any]) -> AuditEvent:
    """Append an event that is no operation's round: a server's or the tenant's configuration
    changed (issue 29, :mod:`mrtrweb.serverconfig.events`; ``event`` one of
    :data:`AuditEvent.CONFIG`), or a model's proposal was made or decided (issue 32,
    :mod:`mrtrweb.chat.events`; :data:`AuditEvent.CHAT`). ``values`` as :func:`_append`'s; the fields left out are empty.
    Inside the caller's transaction when there is one (the change and its event commit together).

    Raises:
        ValueError: ``event`` is not a configuration event.
        AuditUnavailable: the chain stayed locked (see :func:`_append`); other database errors as they are.
    """
    if values.get("event") not in AuditEvent.CONFIG + AuditEvent.CHAT:
        raise ValueError(f"not a configuration event: {values.get('event')!r}")
    full = {"code": "", "reason": "", "round_number": 0, "original_request_id": "", "request_id": "", "retry_id": "",
            "server_id": "", "server_origin": "", "name": "", "state_digest": "", "schema_digests": {},
            "display_digest": "", "config_digest": "", "actions": {}, "auth_mode": "", "auth_digest": "",
            "auth_identity": "", "initiator": "", "initiator_detail": {}, "policy_version": str(conf.get("POLICY_VERSION")),
            "tenant_digest": keyed_digest(f"tenant:{values['tenant_id']}"), **values}
    return _append(full)


AUTH_FIELDS = ("auth_mode", "auth_digest", "auth_identity")


def _auth_fields(operation: Operation, auth: dict[str, str] | None) -> dict[str, str]:
    """The authorization digests of an event: ``auth`` or the operation's own (never a token)."""
    source = auth if auth is not None else {name: getattr(operation, name, "") for name in AUTH_FIELDS}
    return {name: str(source.get(name) or "")[:80] for name in AUTH_FIELDS}


def _initiator_fields(operation: Operation) -> dict[str, Any]:
    """The event's ``initiator`` / ``initiator_detail``: the operation's, empty for a person's own call
    (so that a person's events hash as before issue 31)."""
    initiator = getattr(operation, "initiator", "") or ""
    if initiator in ("", Operation.Initiator.PERSON):
        return {"initiator": "", "initiator_detail": {}}
    return {"initiator": initiator, "initiator_detail": dict(getattr(operation, "initiator_detail", None) or {})}


# the chain's verification, checkpoints and purge (mrtrweb.audit.verify), where callers find them
CHECKPOINT_SALT, ChainReport, sign_checkpoint = _verify.CHECKPOINT_SALT, _verify.ChainReport, _verify.sign_checkpoint
verify_chain, purge_before, GENESIS = _verify.verify_chain, _verify.purge_before, _verify.GENESIS
