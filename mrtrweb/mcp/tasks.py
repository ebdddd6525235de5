"""Task-augmented requests on the wire: the two shapes a server may speak.

``v1`` -- MCP 2025-11-25, ``basic/utilities/tasks`` (experimental): the server declares
``capabilities.tasks.requests.tools.call``; the client asks for a task with the ``task`` param
(``{"ttl": <ms>}``) and gets ``CreateTaskResult`` ``{"task": {taskId, status, statusMessage?,
pollInterval?, ttl, createdAt, lastUpdatedAt}}``; ``tasks/get`` answers the ``Task``;
``tasks/result`` the final result (blocking until the task is terminal; requests the server needs
answered while the task is ``input_required`` -- ``elicitation/create``... -- arrive on that
call's stream); ``tasks/cancel``.

``v2`` -- the tasks extension ``io.modelcontextprotocol/tasks`` (SEP-2663, on 2026-07-28): the
server declares it under ``capabilities.extensions``; the client opts in per request (the
extension in ``_meta["io.modelcontextprotocol/clientCapabilities"].extensions``) and the server
decides: a flat ``CreateTaskResult`` ``{"resultType": "task", taskId, status, statusMessage?,
pollIntervalMs?, ttlMs, createdAt, lastUpdatedAt}`` (no ``requestState``), or a plain result, or
an ``input_required`` MRTR round first (``tasks-mrtr-composition``). ``tasks/get`` answers a
``DetailedTask``: the ``Task`` fields plus ``result`` (``completed``), ``error`` (``failed``:
``{code, message}``) or ``inputRequests`` (``input_required``: keyed like an MRTR round, answered
by ``tasks/update {taskId, inputResponses}`` -- acked ``{"resultType": "complete"}``, no
``requestState`` on the tasks wire). ``tasks/result`` does not exist.

Everything here is pure: shapes in, :class:`TaskView` out, :class:`TaskWireError` (code
:data:`INVALID_TASK`) for what the server got wrong. A task id is server text: bounded
(:data:`MAX_TASK_ID_CHARS`) and printable, kept to be sent back, never shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Literal

#: the 2026-07-28 tasks extension's identifier (SEP-2663)
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
#: what a server's task may be (both shapes)
STATUSES: Final = frozenset({"working", "input_required", "completed", "failed", "cancelled"})
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
#: the longest task id kept (characters); a longer one is refused (:data:`INVALID_TASK`)
MAX_TASK_ID_CHARS: Final = 256
#: the longest status message kept (characters; cut, not refused)
MAX_STATUS_MESSAGE_CHARS: Final = 200
#: the ``ttl`` asked for on a 2025-11-25 task (milliseconds); the server may choose another
REQUESTED_TTL_MS: Final = 600_000
#: the product's error code for a task shape the server got wrong
INVALID_TASK: Final = "invalid_task"

Flavor = Literal["v1", "v2"]


class TaskWireError(ValueError):
    """The server's task answer is not a task this client can follow; ``reason`` says which field
    (never a value)."""

    code = INVALID_TASK

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class TaskView:
    """One reading of a task (``CreateTaskResult`` or ``tasks/get``).

    ``poll_ms``: the server's suggested interval (milliseconds) or None; ``result``: the inlined
    final result (v2 ``completed``); ``error``: ``{"code": int, "message": str}`` (v2 ``failed``);
    ``input_requests``: the open requests (v2 ``input_required``), an object or None."""

    task_id: str
    status: str
    message: str = ""
    poll_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def flavor(server_capabilities: Mapping[str, Any] | None) -> Flavor | None:
    """Which task shape the server declared for ``tools/call``: ``"v2"`` (the extension), ``"v1"``
    (``capabilities.tasks.requests.tools.call``), or None (no tasks)."""
    caps = server_capabilities if isinstance(server_capabilities, Mapping) else {}
    extensions = caps.get("extensions")
    if isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions:
        return "v2"
    node: Any = caps.get("tasks")
    for key in ("requests", "tools", "call"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return "v1" if isinstance(node, Mapping) else None


def task_params(params: Mapping[str, Any], flavor_: Flavor) -> dict[str, Any]:
    """The ``tools/call`` params asking for a task: v1 adds ``task: {"ttl": REQUESTED_TTL_MS}``;
    v2 leaves them as they are (the opt-in is the per-request extension, see
    ``McpConnection.send(extensions=...)``)."""
    out = dict(params)
    if flavor_ == "v1":
        out["task"] = {"ttl": REQUESTED_TTL_MS}
    return out


def _task_id(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TASK_ID_CHARS:
        raise TaskWireError(f"taskId must be a non-empty string of at most {MAX_TASK_ID_CHARS} characters")
    if not value.isprintable():
        raise TaskWireError("taskId carries control or invisible characters")
    return value


def _view(body: Mapping[str, Any], flavor_: Flavor) -> TaskView:
    task_id = _task_id(body.get("taskId"))
    status = body.get("status")
    if status not in STATUSES:
        raise TaskWireError("status is not one of " + ", ".join(sorted(STATUSES)))
    message = body.get("statusMessage")
    message = message[:MAX_STATUS_MESSAGE_CHARS] if isinstance(message, str) else ""
    poll = body.get("pollIntervalMs" if flavor_ == "v2" else "pollInterval")
    poll_ms = int(poll) if isinstance(poll, int | float) and not isinstance(poll, bool) and 0 < poll < 86_400_000 \
        else None
    result = error = requests = None
    if flavor_ == "v2":
        if status == "completed":
            result = body.get("result")
            if not isinstance(result, dict):
                raise TaskWireError("a completed task carries no result object")
        elif status == "failed":
            raw = body.get("error")
            code = raw.get("code") if isinstance(raw, Mapping) else None
            text = raw.get("message") if isinstance(raw, Mapping) else None
            error = {"code": code if isinstance(code, int) and not isinstance(code, bool) else None,
                     "message": text[:MAX_STATUS_MESSAGE_CHARS] if isinstance(text, str) else ""}
        elif status == "input_required":
            requests = body.get("inputRequests")
            if not isinstance(requests, dict) or not requests:
                raise TaskWireError("an input_required task carries no inputRequests object")
    return TaskView(task_id, status, message, poll_ms, result, error, requests)


def created(raw: Any, flavor_: Flavor) -> TaskView | None:
    """The task a ``tools/call`` result created, or None when the result is no ``CreateTaskResult``
    (a plain result or an MRTR round: judged as any result).

    Raises:
        TaskWireError: it claims to be one (v2 ``resultType: "task"``; v1 a ``task`` object and no
            ``content``) but its fields are wrong."""
    if not isinstance(raw, Mapping):
        return None
    if flavor_ == "v2":
        if raw.get("resultType") != "task":
            return None
        return _view(raw, flavor_)
    task = raw.get("task")
    if not isinstance(task, Mapping) or "content" in raw:
        return None
    return _view(task, flavor_)


def read(raw: Any, flavor_: Flavor, task_id: str) -> TaskView:
    """A ``tasks/get`` answer about ``task_id``.

    Raises:
        TaskWireError: not an object, another task's id, or wrong fields."""
    if not isinstance(raw, Mapping):
        raise TaskWireError("tasks/get did not answer an object")
    view = _view(raw, flavor_)
    if view.task_id != task_id:
        raise TaskWireError("tasks/get answered about another task")
    return view


def as_round(view: TaskView) -> dict[str, Any]:
    """A v2 ``input_required`` task's open requests as an MRTR round result (for the gate:
    ``inputRequests`` only -- the tasks wire has no ``requestState``)."""
    return {"resultType": "input_required", "inputRequests": view.input_requests or {}}
