"""Sending a request of an operation and following it: the user's pooled connection
(:mod:`mrtrweb.servers.connections`), progress pushed to the page, Stop polled, requests the server sends
during the call (2025-11-25, :mod:`.legacy`), the server's log messages pushed (:mod:`.serverlog`), and
the result judged (:mod:`.rounds`); a state-only
retry goes out again from here. Each request names this worker (``Operation.worker``) while it is
in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.utils import timezone
from django.utils.translation import gettext_noop

from ..tenancy import access
from .. import conf
from ..text import display
from ..runtime import outage, push
from ..servers.connections import HANDSHAKE_VERSIONS as _HANDSHAKE_VERSIONS, connection_for, declared as _declared, pool, server_key
from ..servers.connections import release_while_waiting
from ..gate import Retry
from ..mcp import McpCallError
from ..mcp.tasks import TaskWireError
from ..models import McpServer, Operation
from ..runtime.push import user_group
from .authorization import _note_challenge
from .legacy import _Call, _on_server_request
from .messages import AnswerPending, failure_message, message_for, PROTOCOL_CHANGED, STOPPED_BY
from .retries import _move_when_back
from .rounds import _handle_result
from . import serverlog, tasks
from .holding import database_back, following, HoldFull, mark_failed
from .messages import OUTCOME_NOT_KEPT
from .runtime import (connections_checked, finish_operation, load_operation, _spawn, discard_unusable, new_request_id,
                      notify)
from .revocation import _access_ended, end_operation
from .stopping import stop_requested, STOP_POLL_S
from .url_required import is_url_required, url_required_round

logger = logging.getLogger("mrtrweb.operations")

_STOPPED = object()


async def _send_cancellable(op: Operation, conn: Any, params: dict[str, Any], request_id: str,
                            call: "_Call | None" = None, *, method: str | None = None,
                            extensions: dict[str, Any] | None = None,
                            before_stop: Callable[[], Awaitable[None]] | None = None,
                            defer_stop: bool = False) -> Any:
    """Send one request, pushing its progress notifications to the user's browsers, and abandon it
    when the person stops the operation: the SDK then cancels the request (``notifications/cancelled``
    on a stream transport; on 2026-07-28 Streamable HTTP the request's POST is closed). Returns the
    raw result, or ``_STOPPED``.

    With ``call``, requests the server sends during the call (2025-11-25) become rounds of the
    operation (:func:`_on_server_request`); while one is held for the person, a stop is answered
    there first ("cancel" to the server), and the call is abandoned after.

    ``method`` (default ``op.method``) and ``extensions`` (per-request client extensions) serve a
    task's requests (:mod:`.tasks`: ``tasks/result``); ``before_stop`` runs once the request is
    abandoned on a Stop, before the operation ends (a task's ``tasks/cancel``). ``defer_stop``: a
    result asking for more is returned even after a Stop; the caller's judge checks the Stop with
    the result (:func:`.rounds._judge_round`, the same thread hop)."""
    last_push = 0.0

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        nonlocal last_push
        now = asyncio.get_running_loop().time()
        if now - last_push < 0.2 and (total is None or progress < total):
            return  # throttled
        last_push = now
        await push.group_send(user_group(op.user_id), {
            "type": "operation.progress", "operation_id": str(op.id), "progress": progress, "total": total,
            # server text: pushed as data (the page sets it as textContent), bidi/controls visible
            "message": display.shown(message[:200]) if isinstance(message, str) else ""}, what="progress")

    extra: dict[str, Any] = {}
    if call is not None:
        extra["on_server_request"] = lambda asked, p: _on_server_request(call, asked, p)
    if extensions:
        extra["extensions"] = extensions
    on_log: serverlog.LogPush | None = None
    if "logging" in (getattr(conn, "server_capabilities", None) or {}):  # the person's level, if any (.serverlog)
        level = await sync_to_async(serverlog.level_for)(op.user_id, op.server_id)
        if level is not None:
            on_log = serverlog.LogPush(op, level)
            extra.update(log_level=level, on_log=on_log)
    task = asyncio.ensure_future(conn.send(method or op.method, params, request_id, on_progress=on_progress,
                                           **extra))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=STOP_POLL_S)
            if done:
                if not defer_stop and _asks_more(task):
                    by = await sync_to_async(stop_requested)(op.id)
                    if by:  # Stop came before the answer asking for more: no round after a Stop
                        logger.info("operation %s stopped during the call (by: %s); the server's answer "
                                    "asked for more and was dropped", op.id, by)
                        await finish_operation(op, Operation.Status.DENIED, code="denied", reason="cancelled",
                                      event="denied", message=STOPPED_BY[by])
                        return _STOPPED
                return task.result()
            if call is not None and call.holding:
                continue  # the held round answers the stop first (see _hold)
            by = await sync_to_async(stop_requested)(op.id)
            if by:
                task.cancel()
                # let the SDK queue its notifications/cancelled (2025-11-25 sessions) before the
                # operation ends and a per-operation connection is closed
                await asyncio.wait({task}, timeout=1.0)
                if before_stop is not None:
                    await before_stop()
                logger.info("operation %s stopped during the call (by: %s)", op.id, by)
                await finish_operation(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                              message=STOPPED_BY[by])
                return _STOPPED
    finally:
        if not task.done():
            task.cancel()
        if on_log is not None:  # what the server logged, kept with the operation in one write
            await on_log.keep()


def _asks_more(task: "asyncio.Task[Any]") -> bool:
    """Whether a finished send asks the person for more: an ``input_required`` result, or a
    URL-required error (``-32042``)."""
    if task.cancelled():
        return False
    exc = task.exception()
    if exc is not None:
        return isinstance(exc, McpCallError) and is_url_required(exc)
    raw = task.result()
    return isinstance(raw, dict) and raw.get("resultType") == "input_required"


async def _drive(op_id: Any, request_id: str, params: dict[str, Any], *, checked: Operation | None = None) -> None:
    """Follow the operation (:func:`_follow`) as a task of this process (:func:`.holding.following`);
    one that stopped on an error is marked failed, waiting for the database as long as it takes
    (:func:`.holding.mark_failed`): never left ``running`` behind a task that is gone."""
    with following(op_id):
        failure = await _follow(op_id, request_id, params, checked=checked)
        if failure is not None:
            await mark_failed(op_id, *failure)


_INTERNAL_ERROR = gettext_noop("The operation stopped on an internal error; nothing more was sent.")


async def _follow(op_id: Any, request_id: str, params: dict[str, Any], *,
                  checked: Operation | None = None) -> tuple[str, str] | None:
    """Send one request of the operation and follow it until it needs the person or ends. The
    operation names this worker (``Operation.worker``) while it does: set by
    :func:`start_operation` or :func:`build_and_record`, after the lease was written.

    ``checked``: the operation as the caller has just read it (server, tenant and user loaded,
    :func:`.answers.answer_round`, :func:`.starting.start_operation`): not read again, but its
    owner's access is checked right before the request is sent, as always.

    Returns None, or ``(code, message)`` when it stopped on an error (the caller marks it failed)."""
    from ..runtime.workers import WORKER_ID, ensure_heartbeat, ensure_lease

    connections_checked.set(False)
    try:
        await ensure_heartbeat()
        if checked is not None and str(checked.pk) == str(op_id):
            op = checked  # not read again; its owner's access is, right before the send (below)
        else:
            op, cause = await sync_to_async(_on_a_working_connection)(_load_checked, op_id)
            if cause:
                await end_operation(op, cause)
                return
        if op.worker != WORKER_ID:  # an operation started before this worker ran the call
            await ensure_lease()
            await Operation.objects.filter(pk=op.pk).exclude(status__in=Operation.TERMINAL).aupdate(
                worker=WORKER_ID, updated_at=timezone.now())
            op.worker = WORKER_ID
        plan: tasks.Plan | None = None
        planned = False
        # access was checked with the row just read (_load_checked), or by the statement of the
        # phase that hands the operation over (the start's, the retry's row move: checked.access_checked)
        fresh = checked is None or bool(getattr(checked, "access_checked", False))
        if checked is not None:
            checked.access_checked = False  # used once
        while True:
            if not fresh:
                cause = await sync_to_async(_on_a_working_connection)(access.denial, op.user_id, op.tenant_id,
                                                                       op.server_id)
                if cause:
                    await end_operation(op, cause)
                    return
            call = _Call(op, request_id)
            dedicated = ""
            try:
                declare, _suffix = _declared(op.server)
                key = server_key(op.server)  # the connection the server's pages list through
                kept = pool().open_connection(str(op.user_id), key)
                # the operation's own user's credentials, never anyone else's
                conn = await connection_for(op.user, op.server, key=key, declare=declare)
                if conn.protocol_version in _HANDSHAKE_VERSIONS and ("inputResponses" in params or
                                                                     "requestState" in params):
                    # a round's retry exists only at 2026-07-28: the server downgraded since it asked
                    logger.info("operation %s: the retry of round %s not sent: the server now negotiates %s",
                                op.id, op.rounds, conn.protocol_version)
                    await finish_operation(op, Operation.Status.FAILED, code=PROTOCOL_CHANGED,
                                  message=message_for(PROTOCOL_CHANGED))
                    return
                if conn.protocol_version in _HANDSHAKE_VERSIONS:
                    # A legacy server asks during the call; a request on the call's own stream is a
                    # round of it, anything else is session-level (mrtrweb.mcp.server_requests). The
                    # call gets a connection of its own all the same, so a held round never shares
                    # it (a replaced or swept pooled connection cannot end the call it holds).
                    # It stays open when the server answers -32042 (URL required): the request goes
                    # again on the same session once the person is done (servers key on it), if this
                    # worker sends it within CONNECTION_IDLE_S; else the pool's sweeper closes it.
                    dedicated = f"{key}/operation:{op.id}"
                    conn = await connection_for(op.user, op.server, key=dedicated, declare=declare)
                if not planned:  # a tool that runs only as a task goes out task-augmented (.tasks)
                    waited = tasks.may_list(op, conn)
                    plan, planned = await tasks.plan(op, conn), True
                else:
                    waited = False
                if fresh and (waited or conn is not kept or dedicated or op.server.auth_mode != McpServer.AuthMode.NONE):
                    # the phase's check was followed by a wait (a new connection or session, a
                    # credential looked up or refreshed, a tools listing): access again, right before the send
                    cause = await sync_to_async(_on_a_working_connection)(access.denial, op.user_id, op.tenant_id,
                                                                           op.server_id)
                    if cause:
                        if dedicated:
                            await pool().close(str(op.user_id), dedicated)
                        await end_operation(op, cause)
                        return
                fresh = False
                keep_session = False
                try:
                    raw = await _send_task(op, conn, plan, params, request_id, call) if plan is not None \
                        else await _send_cancellable(op, conn, params, request_id, call, defer_stop=True)
                except McpCallError as exc:
                    keep_session = is_url_required(exc)
                    raise
                finally:
                    if dedicated and not keep_session:
                        await pool().close(str(op.user_id), dedicated)
                if plan is not None or call.rounds:  # else the result's own hop waits for the database
                    await database_back(op_id)
                if call.rounds:  # legacy rounds were answered during the call: the row moved on
                    op = await load_operation(op_id)
                if raw is _STOPPED:
                    return
            except McpCallError as exc:
                if not is_url_required(exc):
                    # the kind of failure, never the message (it may hold server text or a URL)
                    logger.info("operation %s: MCP call failed (%s; reason=%s, http_status=%s, reached=%s, cause=%s)",
                                op.id, exc.code, exc.reason, exc.http_status, exc.reached,
                                type(exc.__cause__ or exc.__context__).__name__ if (exc.__cause__ or exc.__context__)
                                else "-")
                await database_back(op_id)
                if exc.code == "insufficient_scope":
                    await _note_challenge(op, exc)
                if call.rounds:
                    op = await load_operation(op_id)
                if is_url_required(exc):  # -32042: a URL-mode round; accepted, the request goes again
                    if not await _access_ended(op):
                        await url_required_round(op, call.gate_id, exc)
                    return
                await finish_operation(op, Operation.Status.FAILED, code=exc.code, message=failure_message(exc))
                return
            if not dedicated and isinstance(raw, dict) and raw.get("resultType") == "input_required":
                # the round will wait for the person: no session needed then. Asked before the row
                # says so (anything using the connection after that keeps it; a state-only round's
                # retry goes out at once on it, and so keeps it too)
                release_while_waiting(op.user_id, key, conn)
            try:  # access is re-checked there, with the result (one thread hop)
                nxt = await _handle_result(op, call.gate_id, raw)
            except AnswerPending as pending:  # a state-only retry recorded as the database went away
                _spawn(_send_when_back(op.id, pending.retry, pending.fields))
                return
            if nxt is None:
                return
            request_id, params = nxt.id, nxt.params
    except asyncio.CancelledError:
        raise
    except HoldFull:  # logged there; the outcome is dropped here, the operation ends once the database is back
        return OUTCOME_NOT_KEPT, message_for(OUTCOME_NOT_KEPT)
    except Exception as exc:  # noqa: BLE001 -- never leave an operation spinning: the caller marks it failed
        if outage.kind(exc) == "database":  # lost again right after it answered: the outcome is gone
            logger.error("operation %s: the database failed as the call's outcome was written (%s)", op_id,
                         exc.__class__.__name__)
            return OUTCOME_NOT_KEPT, message_for(OUTCOME_NOT_KEPT)
        logger.exception("operation %s crashed", op_id)
        return "internal_error", _INTERNAL_ERROR
    finally:  # a connection the drive's work left unusable is not kept (a working one is: shared)
        if not connections_checked.get():  # else the phase's own hop did it, last (.rounds)
            await sync_to_async(discard_unusable)()


async def _send_task(op: Operation, conn: Any, plan: "tasks.Plan", params: dict[str, Any], request_id: str,
                     call: _Call) -> Any:
    """Send one request of an operation whose tool runs as a task (:mod:`.tasks`) and follow the
    task: the task-augmented ``tools/call`` (or, answering a 2026-07-28 task's round, its
    ``tasks/update``), ``tasks/get`` until it needs the person or ends, and (2025-11-25)
    ``tasks/result``. Returns the raw result to judge (a final result, or an MRTR round: the
    server's own before the task, or the task's ``inputRequests``), or ``_STOPPED`` when the
    operation ended here."""
    if op.task_id:  # the person answered the task's round: delivered once, then the task again
        await tasks.send_update(op, conn, plan, request_id, params)
        outcome = await tasks.follow(op, conn, plan)
    else:
        raw = await _send_cancellable(op, conn, plan.params(params), request_id, call, extensions=plan.extensions)
        if raw is _STOPPED:
            return raw
        try:
            view = tasks.created(raw, plan)
        except TaskWireError as exc:
            await tasks.broken(op, conn, plan, exc)
            return _STOPPED
        if view is None:  # a plain result, or an MRTR round before the task: judged as any
            return raw
        outcome = await tasks.follow(op, conn, plan, view)
    if outcome.kind == "fetch":  # 2025-11-25: the result (and the requests of an input_required task)
        return await _send_cancellable(op, conn, {"taskId": op.task_id}, new_request_id(), call,
                                       method="tasks/result", before_stop=lambda: tasks.cancel(op, conn, plan))
    return outcome.raw if outcome.kind in ("result", "round") else _STOPPED


def _on_a_working_connection(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)`` (sync, reads only), once more on a new connection when the first attempt
    fails on one the database broke while it was kept between hops (a restart: the first
    statement fails and marks it, :func:`~.runtime.discard_unusable` then closes it). A second
    failure propagates (the database is down)."""
    from django.db import DatabaseError

    discard_unusable()
    try:
        return read(*args)
    except DatabaseError:
        discard_unusable()
        return read(*args)


def _load_checked(op_id: Any) -> tuple[Operation, str]:
    """The operation (server, tenant, user loaded) and why its owner may no longer act on it
    (:func:`mrtrweb.tenancy.access.denial`, ``""`` when they may), in one thread hop."""
    from ..tenancy import access

    op = Operation.objects.select_related("server", "tenant", "user").get(pk=op_id)
    return op, access.denial(op.user_id, op.tenant_id, op.server_id)


async def _send_when_back(op_id: Any, retry: Retry, fields: dict[str, Any]) -> None:
    """An answer recorded while the database went away: wait for it (up to ``TTL_S``), move the
    row and send the retry, once (this task holds the only copy of the retry)."""
    with following(op_id):
        moved = await _move_when_back(op_id, fields, float(conf.get("TTL_S")))
        if not moved:
            logger.error("operation %s: retry %s not sent (%s)", op_id, retry.id,
                         "the database did not come back" if moved is None else "the operation ended meanwhile")
            return
        logger.warning("operation %s: the database answers again; the recorded answer goes out now", op_id)
        await notify(await load_operation(op_id))
        await _drive(op_id, str(retry.id), retry.params)
