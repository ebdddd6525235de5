"""The operation tasks of this worker and what every phase shares: background tasks
(:func:`_spawn`, :func:`wait_idle`), loading the row, writing an audit event, pushing a change to
the person's browsers (:func:`notify`), and ending an operation once (:func:`finish_operation`: row, binding,
terminal audit event, push).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import logging
import uuid
from collections.abc import Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from .. import prepared
from ..audit import events as audit
from ..runtime import push
from ..text import results
from ..gate import StoreUnavailable
from ..runtime.gates import get_gate, handle_of
from ..models import Operation

logger = logging.getLogger("mrtrweb.operations")


def new_request_id() -> str:
    """A fresh JSON-RPC id: a UUID string, unique across workers and connections."""
    return f"mrtr-{uuid.uuid4()}"


running_tasks: set[asyncio.Task] = set()


def _spawn(coro) -> asyncio.Task:
    """Run ``coro`` in the background, outside the request's context: its ORM calls then share the
    process's one sync thread (one database connection) instead of pinning a connection in the
    finished request's thread for as long as the MCP server takes."""
    task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
    running_tasks.add(task)
    task.add_done_callback(running_tasks.discard)
    return task


async def wait_idle(timeout: float = 60.0) -> None:
    """Wait until no operation task of this loop is running, at most ``timeout`` seconds (tests;
    on a loaded machine a large result's check and storage take seconds). Tasks still running
    then are left running and a ``RuntimeWarning`` names how many (pytest's warnings summary)."""
    loop = asyncio.get_running_loop()
    pending = [t for t in running_tasks if t.get_loop() is loop]
    if pending:
        _, still = await asyncio.wait(pending, timeout=timeout)
        if still:
            import warnings

            warnings.warn(f"wait_idle: {len(still)} operation task(s) still running after {timeout} s",
                          RuntimeWarning, stacklevel=2)


def discard_unusable() -> None:
    """Close this thread's database connections that an error left unusable, or that a failed
    transaction left out of autocommit (sync; what ``close_old_connections`` does, without closing
    a working connection for its age: the round path's hops share one sync thread and its
    connection, and with ``CONN_MAX_AGE = 0`` closing it there meant a new connection -- and its
    health check -- for the next hop)."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            conn.close()
        elif conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
                prepared.check_pool(conn)  # the database broke it: its pool's idle ones too, likely


#: True in an operation task's context when the thread hop that ended its drive closed what its work
#: left unusable itself (:func:`leaves_connections_checked`): the drive's end then needs no hop of its own
connections_checked: contextvars.ContextVar[bool] = contextvars.ContextVar("mrtrweb_connections_checked",
                                                                            default=False)


def leaves_connections_checked(fn):
    """``fn`` (a phase's sync function), then :func:`discard_unusable` in the same thread hop (a
    failure of that is logged, never raised over ``fn``'s own outcome)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            try:
                discard_unusable()
            except Exception as exc:  # noqa: BLE001 -- the connection goes at the next hop's check
                logger.warning("closing an unusable database connection failed (%s)", exc.__class__.__name__)

    return wrapper


@dataclasses.dataclass(frozen=True)
class Change:
    """What :func:`notify` tells a watcher of this process (:func:`watching`): ``op``, a copy of
    the operation as the phase that changed it holds it (server, tenant and user loaded as they
    were); ``round``, the round it now awaits when that phase has it (as the gate accepted it);
    ``settled``, whether its terminal audit event was written (or its failure logged) before."""

    op: Operation
    round: Any = None
    settled: bool = False


#: operation id -> the queues of this process watching it (:func:`watching`), with their loops
_watchers: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]]] = {}


@contextlib.contextmanager
def watching(op_id: Any) -> Iterator[asyncio.Queue]:
    """A queue of the :class:`Change` s of operation ``op_id`` that this process makes, for as long
    as the block runs (the headless client learns an outcome here, without the channel layer or a
    read of the row). Only this process's changes come: another worker's (an answer, a Stop, an
    expiry sweep) do not, so a watcher reads the row when it has waited long enough."""
    entry = (asyncio.get_running_loop(), asyncio.Queue())
    _watchers.setdefault(str(op_id), []).append(entry)
    try:
        yield entry[1]
    finally:
        queues = _watchers.get(str(op_id), [])
        if entry in queues:
            queues.remove(entry)
        if not queues:
            _watchers.pop(str(op_id), None)


async def notify(op: Operation, *, round: Any = None, settled: bool = False) -> None:
    """Tell the user's browsers that the operation changed (they re-render it server-side), and
    this process's watchers (:func:`watching`: ``round`` and ``settled`` as :class:`Change` says).
    Never raises: a push the channel layer cannot take is logged (:mod:`mrtrweb.runtime.push`)."""
    queues = _watchers.get(str(op.id))
    if queues:
        change = Change(copy.copy(op), round, settled)
        running = asyncio.get_running_loop()
        for loop, queue in list(queues):
            if loop is running:
                queue.put_nowait(change)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, change)
    await push.operation_changed(op.user_id, op.id)


async def load_operation(op_id: Any) -> Operation:
    return await Operation.objects.select_related("server", "tenant", "user").aget(pk=op_id)


async def _audit(op: Operation, event: str, **kw: Any) -> None:
    await sync_to_async(audit.record)(op, event, **kw)


async def finish_operation(op: Operation, status: str, *, code: str = "", message: str = "", result: Any = None,
                  event: str | None = None, already_marked: bool = False, reason: str = "",
                  digests: dict[str, Any] | None = None) -> None:
    """End an operation once: update its row (only if it is not already terminal), close its
    binding, write the terminal audit event and tell the browsers.

    One thread hop for the row, the binding and the audit event (:func:`_finish_sync`), one more
    (off the sync thread) only when a result is stored. ``digests``: the round's ``state_digest`` /
    ``schema_digests`` when the caller has them (spares the audit its lookup)."""
    op.status = status
    op.error_code = code
    op.error_message = message[:500]
    if result is not None:
        # within MAX_STORED_RESULT_BYTES; off the event loop (a result may be megabytes of JSON)
        op.result = await sync_to_async(results.for_storage, thread_sensitive=False)(result, op_id=op.id)
    if await sync_to_async(_finish_sync)(op, status, event=event, already_marked=already_marked, reason=reason,
                                         digests=digests):
        await notify(op, settled=True)


#: the columns :func:`mark_ended` writes, in its SQL's order
_ENDED_FIELDS = ("status", "error_code", "error_message", "result", "worker", "round_expires_at", "updated_at")
_ENDED_SQL: dict[tuple[str, bool, str | None], tuple[str, list[Any]] | None] = {}


def mark_ended(op: Operation, status: str, *, while_allowed: bool = False) -> int:
    """Write the operation's end to its row (``status``; ``op``'s error code, message and result;
    no worker, no round expiry, ``updated_at`` now) if it has not ended yet -- and, with
    ``while_allowed``, only while its owner may act on it (:func:`mrtrweb.tenancy.access.allowed_condition`
    in the same ``WHERE``: the phase's access check and its row move in one statement). Returns the
    rows written (0: ended already, or, with ``while_allowed``, maybe access ended: ask
    :func:`~mrtrweb.tenancy.access.denial`). One UPDATE whose SQL is built once per database
    (sync); with ``while_allowed`` and no condition to build, the access is checked first (two).

    Raises:
        django.db.DatabaseError: the database failed (nothing written).
    """
    from django.db import connections, router

    from ..tenancy import access

    alias = router.db_for_write(Operation)
    conn = connections[alias]
    compiled = _ended_compiled(alias, while_allowed)
    if compiled is None:  # the access conditions cannot go into the WHERE: checked first
        if access.denial(op.user_id, op.tenant_id, op.server_id):
            return 0
        return mark_ended(op, status)
    sql, params = _ended_params(op, status, conn, compiled)
    with prepared.cursor(conn) as cur:
        cur.execute(sql, params)
        return cur.rowcount


def _ended_compiled(alias: str, while_allowed: bool) -> tuple[str, list[Any]] | None:
    """:func:`mark_ended`'s UPDATE on ``alias`` and its access slots, built once per database and
    access SQL in force; None when the access conditions cannot go into the ``WHERE``."""
    from django.db import connections

    from ..tenancy import access

    conn = connections[alias]
    condition = access.allowed_condition(alias) if while_allowed else ("", [])
    key = (alias, while_allowed, condition[0] if condition is not None else None)  # the access SQL in force
    if key not in _ENDED_SQL:
        qn, meta = conn.ops.quote_name, Operation._meta
        if condition is None:
            _ENDED_SQL[key] = None
        else:
            terminal = ", ".join(["%s"] * len(Operation.TERMINAL))
            sql = (f"UPDATE {qn(meta.db_table)} SET "
                   + ", ".join(f"{qn(meta.get_field(name).column)} = %s" for name in _ENDED_FIELDS)
                   + f" WHERE {qn(meta.pk.column)} = %s AND {qn(meta.get_field('status').column)} NOT IN ({terminal})"
                   + (f" AND {condition[0]}" if condition[0] else ""))
            _ENDED_SQL[key] = (sql, condition[1])
    return _ENDED_SQL[key]


def mark_ended_sql(op: Operation, status: str) -> tuple[str, list[Any]] | None:
    """(SQL, parameters) of :func:`mark_ended`'s UPDATE with ``while_allowed``, not run (a step of
    the binding's close, :func:`end_and_close`); None when the access conditions cannot go into its
    ``WHERE`` (then :func:`mark_ended` checks first)."""
    from django.db import connections, router

    alias = router.db_for_write(Operation)
    compiled = _ended_compiled(alias, True)
    return None if compiled is None else _ended_params(op, status, connections[alias], compiled)


def _ended_params(op: Operation, status: str, conn, compiled: tuple[str, list[Any]]) -> tuple[str, list[Any]]:
    from ..tenancy import access

    sql, slots = compiled
    meta = Operation._meta
    values = {"status": status, "error_code": op.error_code, "error_message": op.error_message, "result": op.result,
              "worker": "", "round_expires_at": None, "updated_at": timezone.now()}
    params = [meta.get_field(name).get_db_prep_save(values[name], conn) for name in _ENDED_FIELDS]
    params += [meta.pk.get_db_prep_value(op.pk, conn), *Operation.TERMINAL]
    params += access.bind_ids(slots, op.user_id, op.tenant_id, op.server_id)
    return sql, params


def _finish_sync(op: Operation, status: str, *, event: str | None, already_marked: bool, reason: str,
                 digests: dict[str, Any] | None = None) -> bool:
    """What :func:`finish_operation` does in the sync thread: the row (conditional on not being terminal
    yet, unless ``already_marked``: :func:`mark_ended`), the binding closed, the terminal event
    appended (:func:`settle_ended`; an audit outage is logged by :func:`mrtrweb.audit.events.record`).
    Returns False when the operation had already ended (a late outcome: nothing else is done)."""
    if not already_marked:
        if not mark_ended(op, status):
            logger.info("operation %s was already ended; late outcome %s ignored", op.id, status)
            return False
    else:  # marked by a conditional update of its own (reaper, drain, access): end it cleanly
        Operation.objects.filter(pk=op.pk).update(error_message=op.error_message, worker="", round_expires_at=None)
    settle_ended(op, status, event=event, reason=reason, digests=digests)
    return True


def settle_ended(op: Operation, status: str, *, event: str | None, reason: str,
                 digests: dict[str, Any] | None = None, closed: bool = False, joined: Any = None) -> None:
    """After the row says the operation ended (:func:`mark_ended`): its binding closed (unless
    ``closed``: with the row's move, :func:`end_and_close`), its terminal event appended -- unless
    ``joined`` (a :class:`mrtrweb.audit.joined.JoinedAppend`) appended it with the row's move: then
    only checked (sync; never raises for a store or audit outage: both logged)."""
    try:
        if not closed:  # the latest request id the row names: its index entry goes with the record (one statement)
            get_gate().close(handle_of(op), latest=(str(op.user_id), op.latest_request_id))
    except StoreUnavailable:
        logger.warning("could not close binding of operation %s (store unavailable); it expires on its own", op.id)
    try:
        if joined is not None and joined.appended:  # made with the row's move: its hash checked
            joined.event()
        else:
            audit.record(op, event or ("completed" if status == Operation.Status.COMPLETED else "failed"),
                         code=op.error_code, reason=reason, round_number=op.rounds, request_id=op.latest_request_id,
                         **(digests or {}))
    except audit.AuditUnavailable:
        pass  # logged by audit.record


def end_and_close(op: Operation, status: str, joined: Any = None) -> int | None:
    """:func:`mark_ended` with ``while_allowed`` and, made only with it, the binding's close in
    ONE statement (the database store on PostgreSQL: the row's move is the first step of the
    close's delete, :meth:`mrtrweb.bindings.primed.Priming.along`) -- and ``joined``'s append (the
    terminal event, :mod:`mrtrweb.audit.joined`: whether it was made there, it says). Returns the
    rows moved, or None when that is not possible here or the statement failed (nothing written:
    the caller moves the row and closes the binding on their own). Sync."""
    from django.db import router

    store = get_gate().store
    takes_along = getattr(store, "takes_along", None)
    alias = router.db_for_write(Operation)
    if takes_along is None or not takes_along(alias):
        return None
    built = mark_ended_sql(op, status)
    if built is None:
        return None
    with store.along(alias, *built, joined=joined) as made:
        try:
            get_gate().close(handle_of(op), latest=(str(op.user_id), op.latest_request_id))
        except StoreUnavailable:
            return None
    return int(made[1]) if made[0] else None


async def _answer_refused(op: Operation, exc: Any) -> None:
    """The gate refused the person's answer (``exc``: a :class:`~mrtrweb.gate.GateRejection`):
    log it and write the ``rejected`` event (nothing was sent; an audit outage is logged by
    :func:`mrtrweb.audit.events.record`)."""
    logger.info("operation %s: answer refused (%s): %s", op.id, exc.code, exc.reason)
    try:
        await _audit(op, "rejected", code=exc.code, round_number=op.rounds, request_id=op.latest_request_id)
    except audit.AuditUnavailable:
        pass
