"""Task-augmented calls of an operation (MCP 2025-11-25 ``basic/utilities/tasks``; the 2026-07-28
tasks extension ``io.modelcontextprotocol/tasks``, SEP-2663; wire shapes in :mod:`mrtrweb.mcp.tasks`).

A tool listed with ``execution.taskSupport: "required"`` on a server that declares tasks is
called task-augmented (:func:`plan`): the ``tools/call`` asks for a task (2025-11-25: the ``task``
param; 2026-07-28: the extension declared for that request) and the server answers with the task
it created (or, on 2026-07-28, an MRTR round first, judged as any). The operation keeps the task's
id, status and status message on its row (``Operation.task_id`` / ``task_status`` /
``task_message``: so a page, a Stop or the reaper on another worker can act on it) and follows it
(:func:`follow`, called by :mod:`.calls` with this worker named on the operation): ``tasks/get``
at the server's ``pollInterval`` within ``MRTRWEB["TASK_POLL_MIN_S"]`` .. ``["TASK_POLL_MAX_S"]``,
each new status pushed to the person's browsers as progress data (``display.shown``, bounded);
Stop sends ``tasks/cancel`` and ends the operation as a Stop does; a ``failed`` or ``cancelled``
task ends it failed with the server's (cleaned) message; a task that completed gives its result
(2026-07-28: inlined on ``tasks/get``; 2025-11-25: fetched with ``tasks/result``, during which the
requests the server sends for an ``input_required`` task are rounds of the operation,
:mod:`.legacy`); an ``input_required`` task on 2026-07-28 gives its ``inputRequests`` as a round
through the gate (:mod:`.rounds`), answered once with ``tasks/update`` (:func:`send_update`).

A tool that requires tasks on a server that does **not** declare them is never called: the tool
page says why and the headless client reports :data:`TASK_REQUIRED` (``mrtr_client`` exit 10).
``"optional"`` and ``"forbidden"`` tools are called plainly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.utils.translation import gettext_noop

from .. import conf
from ..text import display, stored_text
from ..runtime import push
from ..mcp import McpCallError
from ..mcp import tasks as wire
from ..models import Operation
from .messages import server_error_text, STOPPED_BY
from .revocation import _access_ended
from .runtime import finish_operation, new_request_id
from .stopping import stop_requested, STOP_POLL_S
from .task_cancel import CANCEL_TIMEOUT_S

logger = logging.getLogger("mrtrweb.operations")

#: the outcome code of a call refused here because its tool runs only as a task (nothing sent)
TASK_REQUIRED: Final = "task_required"
#: what the person (page) or the caller (headless) reads
TASK_REQUIRED_MESSAGE: Final = (
    gettext_noop('This tool runs only as a task (the server lists it with execution.taskSupport "required"), but the server '
    "does not declare task support, so it cannot be called: a plain call would be refused. Nothing was sent."))
#: the codes an operation's task ends with (besides the codes of a failed request)
TASK_FAILED: Final = "task_failed"
TASK_CANCELLED: Final = "task_cancelled"


def task_support(tool: Any) -> str:
    """A listed tool's ``execution.taskSupport``: ``"required"``, ``"optional"`` or ``"forbidden"``
    (also for an absent or unknown value: the specification's default is ``"forbidden"``).

    Args:
        tool: the tool as listed (a raw ``tools/list`` item, any JSON value)."""
    execution = tool.get("execution") if isinstance(tool, Mapping) else None
    value = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    return value if value in ("required", "optional") else "forbidden"


def requires_task(tool: Any) -> bool:
    """Whether the listed tool may only be called task-augmented."""
    return task_support(tool) == "required"


def refused(tool: Any, server_capabilities: Mapping[str, Any] | None) -> bool:
    """Whether the tool is never called here: it requires a task and the server declares no tasks
    (neither shape of :func:`mrtrweb.mcp.tasks.flavor`)."""
    return requires_task(tool) and wire.flavor(server_capabilities) is None


@dataclasses.dataclass(frozen=True)
class Plan:
    """How an operation's ``tools/call`` goes out as a task: ``flavor`` (``"v1"``/``"v2"``)."""

    flavor: wire.Flavor

    def params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The request params (v1: with the ``task`` param)."""
        return wire.task_params(params, self.flavor)

    @property
    def extensions(self) -> dict[str, Any] | None:
        """The per-request extensions (v2: the tasks extension)."""
        return {wire.TASKS_EXTENSION: {}} if self.flavor == "v2" else None


def may_list(op: Operation, conn: Any) -> bool:
    """Whether :func:`plan` may send a request first (a ``tools/list``: the server declares tasks)."""
    return op.method == "tools/call" and wire.flavor(conn.server_capabilities) is not None


async def plan(op: Operation, conn: Any) -> Plan | None:
    """The task plan of the operation's requests, or None (sent plainly): a ``tools/call`` of a
    tool the server lists as ``taskSupport: "required"`` while it declares tasks. Costs one
    ``tools/list`` only where the server declares tasks; a listing that fails says plain (the
    server then answers the call with its own error)."""
    if op.method != "tools/call":
        return None
    flavor = wire.flavor(conn.server_capabilities)
    if flavor is None:
        return None
    try:
        tools = await conn.list_tools()
    except McpCallError:
        return None
    listed = [t for t in tools if isinstance(t, dict) and t.get("name") == op.name]
    return Plan(flavor) if listed and requires_task(listed[0]) else None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Where following a task ended: ``kind`` ``"result"`` (``raw``: a final result to judge),
    ``"round"`` (``raw``: an MRTR round made of a v2 task's ``inputRequests``), ``"fetch"`` (v1:
    send ``tasks/result``), or ``"ended"`` (the operation ended: stopped, failed, access ended)."""

    kind: str
    raw: Any = None


def _poll_s(view: wire.TaskView) -> float:
    low, high = float(conf.get("TASK_POLL_MIN_S")), float(conf.get("TASK_POLL_MAX_S"))
    wanted = view.poll_ms / 1000 if view.poll_ms else high
    return min(max(wanted, low), max(low, high))


async def _record(op: Operation, view: wire.TaskView) -> None:
    """Keep the task's id, status and message on the row, and push the status to the person's
    browsers (server text as data: ``display.shown``, bounded)."""
    message = view.message[: wire.MAX_STATUS_MESSAGE_CHARS]
    await Operation.objects.filter(pk=op.pk).exclude(status__in=Operation.TERMINAL).aupdate(
        task_id=view.task_id, task_status=view.status, task_message=message)
    op.task_id, op.task_status, op.task_message = view.task_id, view.status, message
    from ..runtime.push import user_group

    await push.group_send(user_group(op.user_id), {
        "type": "operation.progress", "operation_id": str(op.id), "progress": None, "total": None,
        "message": display.shown(message), "task_status": view.status}, what="progress")


async def cancel(op: Operation, conn: Any, plan_: Plan) -> None:
    """Best effort: ``tasks/cancel`` the operation's task (failures logged, never raised)."""
    if not op.task_id:
        return
    try:
        await conn.send("tasks/cancel", {"taskId": op.task_id}, new_request_id(), timeout_s=CANCEL_TIMEOUT_S,
                        extensions=plan_.extensions)
        logger.info("operation %s: its task was cancelled (tasks/cancel acknowledged)", op.id)
    except McpCallError as exc:
        logger.info("operation %s: tasks/cancel failed (%s)", op.id, exc.code)


async def _ended_by_server(op: Operation, view: wire.TaskView) -> None:
    said = server_error_text((view.error or {}).get("message") or view.message)
    if view.status == "cancelled":
        text = gettext_noop("The server cancelled the task; nothing more was sent.")
        code = TASK_CANCELLED
    else:
        rpc = (view.error or {}).get("code")
        text = (stored_text.TASK_FAILED_RPC % {"code": rpc} if isinstance(rpc, int)
                else gettext_noop("The server's task failed."))
        code = TASK_FAILED
    logger.info("operation %s: its task ended %s", op.id, view.status)
    await finish_operation(op, Operation.Status.FAILED, code=code, message=f"{text} Server said: {said}" if said else text)


async def broken(op: Operation, conn: Any, plan_: Plan, exc: wire.TaskWireError) -> None:
    """A task answer the server got wrong: logged (which field), the task cancelled, the operation
    failed (:data:`~mrtrweb.mcp.tasks.INVALID_TASK`)."""
    logger.info("operation %s: the server's task answer was refused (%s)", op.id, exc.reason)
    followed = bool(op.task_id)  # a task already followed is cancelled; a malformed new one has no usable id
    await cancel(op, conn, plan_)
    await finish_operation(op, Operation.Status.FAILED, code=wire.INVALID_TASK,
                  message=f"The server's task answer is malformed and was refused ({exc.reason}); "
                          + ("the task was cancelled and " if followed else "") + "nothing more was sent.")


#: how often the operation's row is read while its task is followed, seconds (an operation ended
#: by another path -- a drain marking it ``worker_stopped`` -- stops being followed, its task cancelled)
ROW_CHECK_S: Final = 1.0


async def _ended_elsewhere(op: Operation) -> bool:
    status = await Operation.objects.filter(pk=op.pk).values_list("status", flat=True).afirst()
    return status is None or status in Operation.TERMINAL


async def _stopped(op: Operation) -> str | None:
    """Who asked to stop the operation (its stop request, :mod:`.stopping`), or None."""
    return await sync_to_async(stop_requested)(op.id)


async def follow(op: Operation, conn: Any, plan_: Plan, view: wire.TaskView | None = None) -> Outcome:
    """Follow the operation's task until it needs the person, gives a result or ends.

    ``view``: the task as the ``tools/call`` created it; None to read it first (after a
    ``tasks/update``). Raises :class:`~mrtrweb.mcp.McpCallError` when a ``tasks/get`` fails (the
    caller fails the operation with it)."""
    loop = asyncio.get_running_loop()
    try:
        if view is None:
            view = wire.read(await conn.send("tasks/get", {"taskId": op.task_id}, new_request_id(),
                                             extensions=plan_.extensions), plan_.flavor, op.task_id)
        await _record(op, view)
        checked = loop.time()
        while True:
            if view.status in ("failed", "cancelled"):
                await _ended_by_server(op, view)
                return Outcome("ended")
            if view.status == "completed":
                return Outcome("result", view.result) if plan_.flavor == "v2" else Outcome("fetch")
            if view.status == "input_required":
                return Outcome("round", wire.as_round(view)) if plan_.flavor == "v2" else Outcome("fetch")
            deadline = loop.time() + _poll_s(view)
            while loop.time() < deadline:
                by = await _stopped(op)
                if by:
                    await stop(op, conn, plan_, by)
                    return Outcome("ended")
                if loop.time() - checked >= ROW_CHECK_S:  # ended elsewhere (a drain, an expiry...)
                    checked = loop.time()
                    if await _ended_elsewhere(op):
                        await cancel(op, conn, plan_)
                        return Outcome("ended")
                await asyncio.sleep(min(STOP_POLL_S, max(0.0, deadline - loop.time())))
            if await _access_ended(op):
                await cancel(op, conn, plan_)
                return Outcome("ended")
            seen = view
            view = wire.read(await conn.send("tasks/get", {"taskId": op.task_id}, new_request_id(),
                                             extensions=plan_.extensions), plan_.flavor, op.task_id)
            if (view.status, view.message) != (seen.status, seen.message):
                await _record(op, view)
    except wire.TaskWireError as exc:
        await broken(op, conn, plan_, exc)
        return Outcome("ended")


async def stop(op: Operation, conn: Any, plan_: Plan, by: str) -> None:
    """The person's Stop (or the headless timeout) while the task runs: ``tasks/cancel``, then the
    operation ends as a Stop does (``denied``, reason ``cancelled``)."""
    await cancel(op, conn, plan_)
    logger.info("operation %s stopped during its task (by: %s)", op.id, by)
    await finish_operation(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                  message=STOPPED_BY[by])


async def send_update(op: Operation, conn: Any, plan_: Plan, request_id: str, params: Mapping[str, Any]) -> None:
    """Deliver the person's answer to a v2 ``input_required`` task, once: ``tasks/update
    {taskId, inputResponses}`` under the retry's id (the retry the gate built, ``params``); the
    server acks ``{"resultType": "complete"}``.

    Raises:
        McpCallError: the request failed (the operation then fails with it)."""
    responses = params.get("inputResponses")
    await conn.send("tasks/update", {"taskId": op.task_id, "inputResponses": responses if isinstance(responses, dict)
                                     else {}}, request_id, extensions=plan_.extensions)


def created(raw: Any, plan_: Plan) -> wire.TaskView | None:
    """The task a ``tools/call`` result created (None: a plain result or an MRTR round).

    Raises:
        TaskWireError: a malformed ``CreateTaskResult``."""
    return wire.created(raw, plan_.flavor)
