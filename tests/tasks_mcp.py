"""A raw MCP 2026-07-28 server with the tasks extension (``io.modelcontextprotocol/tasks``,
SEP-2663), for tests: the wire of the conformance suite's ``tasks-*`` server scenarios
(``tasks-lifecycle``, ``tasks-mrtr-input``, ``tasks-mrtr-composition``,
``tasks-request-state-removal``, ``tasks-required-task-error``), Streamable HTTP with JSON
responses. The ``mcp`` 2.3 SDK has no server-side task support (only the ``Extension`` hooks), so
the few methods are written out here.

Tools (all but ``greet`` and ``optional_job`` with ``execution.taskSupport: "required"``; a
``tools/call`` of one from a request that did not declare the extension in
``_meta["io.modelcontextprotocol/clientCapabilities"].extensions`` is answered ``-32021``):

``slow_compute(seconds)``
    A task ``working`` for ``seconds`` (status message "step i of n"), then ``completed`` with
    "Computed for N s."; ``tasks/cancel`` makes it ``cancelled``.
``confirm_delete(filename)``
    A task that turns ``input_required`` after 0.3 s with one form request ``confirm`` (boolean);
    after ``tasks/update`` it works 0.3 s more, then completes "Deleted F." (accept + confirm) or
    "Kept F (<action>)."
``test_tool_with_task``
    MRTR first: an ``input_required`` round asking ``user_name`` (``requestState`` "compose-1");
    the retry creates a task (no ``requestState`` on it) completing with "Hello, <name>!".
``failing_job``
    A task that fails after 0.3 s: ``error`` ``{code: -32603, message}`` whose message carries
    markup and a bidi override.
``doomed_job``
    A task the server itself cancels after 0.3 s ("Cancelled: quota exceeded").
``garbled_job``
    A well-formed task whose ``tasks/get`` then answers an unknown status ("done").
``bad_task``
    A ``CreateTaskResult`` whose ``taskId`` carries a control character (malformed).
``optional_job``
    ``taskSupport: "optional"``: a plain call answers "plain"; a request declaring the extension
    would get a task (a client calling it plainly never does).
``greet(name)``
    Plain: "Hello, <name>!".

Every request is recorded in the handle's ``log`` (:class:`mrtrweb.demo.server.CallLog`); each
``tasks/*`` request's ``Mcp-Name`` header is kept in :data:`MCP_NAMES` (request id -> value).
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mrtrweb.demo.server import serve_asgi_in_thread

EXT = "io.modelcontextprotocol/tasks"
HOSTILE_FAILURE = 'disk <b>full</b>\u202e <script>alert(1)</script>'

DISCOVER = {"supportedVersions": ["2026-07-28"], "resultType": "complete", "ttlMs": 0, "cacheScope": "public",
            "capabilities": {"tools": {}, "extensions": {EXT: {}}}}


def _tool(name: str, support: str | None, props: dict[str, Any] | None = None) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "description": f"tasks {name}",
                            "inputSchema": {"type": "object", "properties": props or {}}}
    if support:
        tool["execution"] = {"taskSupport": support}
    return tool


TOOLS = [
    _tool("slow_compute", "required", {"seconds": {"type": "integer", "minimum": 0, "maximum": 60}}),
    _tool("confirm_delete", "required", {"filename": {"type": "string", "maxLength": 100}}),
    _tool("test_tool_with_task", "required"),
    _tool("failing_job", "required"),
    _tool("bad_task", "required"),
    _tool("doomed_job", "required"),
    _tool("garbled_job", "required"),
    _tool("optional_job", "optional"),
    _tool("greet", None, {"name": {"type": "string", "maxLength": 100}}),
]
REQUIRED = {t["name"] for t in TOOLS if t.get("execution", {}).get("taskSupport") == "required"}

#: request id -> the Mcp-Name header of a tasks/* request
MCP_NAMES: dict[Any, str | None] = {}
_lock = threading.Lock()
_tasks: dict[str, dict[str, Any]] = {}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _declares(params: dict[str, Any]) -> bool:
    caps = ((params.get("_meta") or {}).get("io.modelcontextprotocol/clientCapabilities") or {})
    return EXT in (caps.get("extensions") or {})


def _text(text: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": False}


def _create(tool: str, **state: Any) -> dict[str, Any]:
    task_id = "x\u0007y" if tool == "bad_task" else f"task-{uuid.uuid4()}"
    with _lock:
        _tasks[task_id] = {"tool": tool, "t0": time.monotonic(), "created": _now(), "cancelled": False, **state}
    return {"resultType": "task", "taskId": task_id, "status": "working", "statusMessage": "Started",
            "createdAt": _now(), "lastUpdatedAt": _now(), "ttlMs": 600000, "pollIntervalMs": 200}


def _detailed(task_id: str) -> dict[str, Any] | None:
    with _lock:
        task = _tasks.get(task_id)
        if task is None:
            return None
        task = dict(task)
    elapsed = time.monotonic() - task["t0"]
    out: dict[str, Any] = {"resultType": "complete", "taskId": task_id, "createdAt": task["created"],
                           "lastUpdatedAt": _now(), "ttlMs": 600000, "pollIntervalMs": 200}
    tool = task["tool"]
    if task["cancelled"]:
        return {**out, "status": "cancelled", "statusMessage": "Cancelled by the client"}
    if tool == "slow_compute":
        seconds = task["seconds"]
        if elapsed < seconds:
            return {**out, "status": "working", "statusMessage": f"step {int(elapsed) + 1} of {seconds}"}
        return {**out, "status": "completed", "result": _text(f"Computed for {seconds} s.")}
    if tool == "confirm_delete":
        name, answer = task["filename"], task.get("answer")
        if answer is None:
            if elapsed < 0.3:
                return {**out, "status": "working", "statusMessage": f"Checking {name}"}
            return {**out, "status": "input_required", "statusMessage": "Waiting for a confirmation",
                    "inputRequests": {"confirm": {"method": "elicitation/create", "params": {
                        "message": f"Delete {name}?", "requestedSchema": {
                            "type": "object", "properties": {"confirm": {"type": "boolean", "title": "Delete it?"}},
                            "required": ["confirm"]}}}}}
        if time.monotonic() - task["answered_at"] < 0.3:
            return {**out, "status": "working", "statusMessage": "Deleting"}
        if answer.get("action") == "accept" and (answer.get("content") or {}).get("confirm") is True:
            return {**out, "status": "completed", "result": _text(f"Deleted {name}.")}
        return {**out, "status": "completed", "result": _text(f"Kept {name} ({answer.get('action')}).")}
    if tool == "test_tool_with_task":
        if elapsed < 0.3:
            return {**out, "status": "working", "statusMessage": "Composing"}
        return {**out, "status": "completed", "result": _text(f"Hello, {task['user_name']}!")}
    if tool == "failing_job":
        if elapsed < 0.3:
            return {**out, "status": "working"}
        return {**out, "status": "failed", "error": {"code": -32603, "message": HOSTILE_FAILURE}}
    if tool == "optional_job":
        return {**out, "status": "completed", "result": _text("as a task")}
    if tool == "garbled_job":
        return {**out, "status": "done"}
    if tool == "doomed_job" and elapsed >= 0.3:
        return {**out, "status": "cancelled", "statusMessage": "Cancelled: quota\u0007 exceeded"}
    return {**out, "status": "working"}


def _call(params: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    name, args = params.get("name"), params.get("arguments") or {}
    if name == "greet":
        return _text(f"Hello, {args.get('name')}!"), None
    if name == "optional_job":
        return (_create("optional_job") if _declares(params) else _text("plain")), None
    if name not in REQUIRED:
        return None, {"code": -32602, "message": f"Unknown tool {name}"}
    if not _declares(params):
        return None, {"code": -32021, "message": f"{name} requires task augmentation",
                      "data": {"requiredCapabilities": {"extensions": {EXT: {}}}}}
    if name == "slow_compute":
        return _create(name, seconds=max(0, min(int(args.get("seconds") or 0), 60))), None
    if name == "confirm_delete":
        return _create(name, filename=str(args.get("filename") or "file")), None
    if name == "test_tool_with_task":
        responses = params.get("inputResponses")
        if not responses:
            return {"resultType": "input_required", "requestState": "compose-1", "inputRequests": {
                "user_name": {"method": "elicitation/create", "params": {"message": "Your name?", "requestedSchema": {
                    "type": "object", "properties": {"name": {"type": "string", "maxLength": 50}},
                    "required": ["name"]}}}}}, None
        if params.get("requestState") != "compose-1":
            return None, {"code": -32602, "message": "Invalid or expired requestState"}
        answer = responses.get("user_name") or {}
        return _create(name, user_name=(answer.get("content") or {}).get("name")), None
    return _create(name), None


async def endpoint(request: Request, declare: bool = True) -> Response:
    try:
        message = await request.json()
    except ValueError:
        return PlainTextResponse("bad json", status_code=400)
    if "id" not in message:
        return Response(status_code=202)
    rid, method, params = message["id"], message.get("method"), message.get("params") or {}

    def ok(result: Any) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})

    def err(error: dict[str, Any]) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": error})

    if method == "server/discover":
        return ok(DISCOVER if declare else {**DISCOVER, "capabilities": {"tools": {}}})
    if method == "tools/list":
        return ok({"tools": TOOLS, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
    if method == "tools/call":
        result, error = _call(params)
        return ok(result) if error is None else err(error)
    if method in ("tasks/get", "tasks/update", "tasks/cancel"):
        MCP_NAMES[rid] = request.headers.get("mcp-name")
        if not _declares(params):
            return err({"code": -32021, "message": "tasks extension not declared"})
        task_id = params.get("taskId")
        with _lock:
            task = _tasks.get(task_id) if isinstance(task_id, str) else None
            if task is not None and method == "tasks/cancel":
                task["cancelled"] = True
            if task is not None and method == "tasks/update":
                responses = params.get("inputResponses") or {}
                if "confirm" in responses and task.get("answer") is None:
                    task["answer"], task["answered_at"] = responses["confirm"], time.monotonic()
        if task is None:
            return err({"code": -32602, "message": "Unknown taskId"})
        return ok(_detailed(task_id) if method == "tasks/get" else {"resultType": "complete"})
    return err({"code": -32601, "message": "Method not found"})


def serve(*, declare: bool = True):
    """Start the server; returns a handle with ``.url``, ``.log`` and ``.stop()``. ``declare=False``:
    the same tools, but the server does not declare the tasks extension (its task-only tools can
    then not be called at all)."""
    async def route(request: Request) -> Response:
        return await endpoint(request, declare)

    return serve_asgi_in_thread(Starlette(routes=[Route("/mcp", route, methods=["POST"])]))


def task_of(tool: str) -> dict[str, Any] | None:
    """The (last) task a tool created here: its recorded state, or None."""
    with _lock:
        found = [dict(t, id=k) for k, t in _tasks.items() if t["tool"] == tool]
    return found[-1] if found else None
