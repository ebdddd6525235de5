"""An honest MCP server for tests whose ``requestState`` is deterministic: a raw JSON-RPC endpoint
(Streamable HTTP, JSON responses, MCP 2026-07-28) whose tools mint the same state for every
caller -- legal, the state is opaque to the client -- and check it on the retry.

Tools (``TOOLS``):

``confirm_step``
    One form round (``ok``: boolean, default true) with ``requestState`` ``"step-1"``; the retry
    must echo it, then the result is ``"confirmed: <action> ok=<value>"``.
``busy_then_done``
    A ``requestState``-only round (``"busy-1"``), then ``"done"`` on the echoing retry.
``drop_database``
    The "drop database?" confirmation: a required boolean ``confirm`` **without** a default
    (state ``"drop-1"``). ``"Database dropped."`` only for ``accept`` with ``confirm: true``;
    ``"Not dropped (<action>)."`` otherwise.
``mixed_defaults``
    Required fields with a default (``region``) and without (``replicas``, ``tags``), an
    optional one without (``note``); answered like ``drop_database``.
``all_defaults``
    Every required field has a default: ``"accepted <content as JSON>"``.
``two_forms``
    One round, two form requests: ``a`` (every field defaulted) and ``b`` (a required field
    without default).
``odd_names``
    A required field whose name carries a bidi override and a BEL (no default).
``ping_pong`` (not honest)
    Form rounds whose states go ``"A"``, ``"B"``, then ``"A"`` again: the third round hands this
    operation back a state it already sent back.
``busy_forever`` (not honest)
    ``requestState``-only rounds, always with the same state ``"busy-1"``.

A retry whose ``requestState`` differs from the one minted is answered with JSON-RPC error
-32602. Every request is recorded in the handle's ``log`` (:class:`mrtrweb.demo.server.CallLog`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mrtrweb.demo.server import serve_asgi_in_thread
from tests.hostile import DISCOVER

ODD = "dro\u202ep\u0007"


def _form(message: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"method": "elicitation/create",
            "params": {"message": message,
                       "requestedSchema": {"type": "object", "properties": properties, "required": required}}}


#: tool name -> (the round's inputRequests or None for a state-only round, its requestState)
TOOLS: dict[str, tuple[dict[str, Any] | None, str]] = {
    "confirm_step": ({"q": _form("Confirm the step", {"ok": {"type": "boolean", "default": True}}, [])}, "step-1"),
    "busy_then_done": (None, "busy-1"),
    "drop_database": ({"confirm_drop": _form("Drop the production database?",
                                             {"confirm": {"type": "boolean", "title": "Drop it?"}},
                                             ["confirm"])}, "drop-1"),
    "mixed_defaults": ({"settings": _form("Settings", {
        "region": {"type": "string", "enum": ["eu", "us"], "default": "eu"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 0},
        "note": {"type": "string"},
    }, ["region", "replicas", "tags"])}, "mixed-1"),
    "all_defaults": ({"settings": _form("Settings", {
        "region": {"type": "string", "enum": ["eu", "us"], "default": "us"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
        "force": {"type": "boolean", "default": False},
        "note": {"type": "string"},
    }, ["region", "replicas", "force"])}, "all-1"),
    "two_forms": ({"a": _form("A", {"x": {"type": "string", "default": "x"}}, ["x"]),
                   "b": _form("B", {"y": {"type": "boolean"}}, ["y"])}, "two-1"),
    "odd_names": ({"q": _form("Odd", {ODD: {"type": "boolean"}}, [ODD])}, "odd-1"),
    "ping_pong": ({"q": _form("Again?", {"ok": {"type": "boolean", "default": True}}, [])}, "A"),
    "busy_forever": (None, "busy-1"),
}


#: the rounds of ``ping_pong``: state received on the retry -> the next state
PING_PONG = {"A": "B", "B": "A"}


def _final(tool: str, responses: dict[str, Any]) -> str:
    if tool == "busy_then_done":
        return "done"
    if tool == "confirm_step":
        q = responses.get("q") or {}
        return f"confirmed: {q.get('action')} ok={(q.get('content') or {}).get('ok')}"
    if tool == "all_defaults":
        s = responses.get("settings") or {}
        return f"{s.get('action')} {json.dumps(s.get('content'), sort_keys=True)}"
    (answer,) = responses.values() if len(responses) == 1 else [{}]
    if tool == "drop_database" and answer.get("action") == "accept" and (answer.get("content") or {}).get("confirm"):
        return "Database dropped."
    actions = ",".join(f"{k}={v.get('action')}" for k, v in sorted(responses.items()))
    return f"Not dropped ({actions})."


async def endpoint(request: Request) -> Response:
    try:
        message = await request.json()
    except ValueError:
        return PlainTextResponse("bad json", status_code=400)
    if "id" not in message:
        return Response(status_code=202)
    rid, method, params = message["id"], message.get("method"), message.get("params") or {}

    def ok(result: Any) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})

    if method == "server/discover":
        return ok(DISCOVER)
    if method == "tools/list":
        tools = [{"name": name, "description": f"honest {name}", "inputSchema": {"type": "object"}} for name in TOOLS]
        return ok({"tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
    if method == "tools/call" and params.get("name") in TOOLS:
        tool = params["name"]
        requests, state = TOOLS[tool]
        if "requestState" not in params:
            result: dict[str, Any] = {"resultType": "input_required", "requestState": state}
            if requests is not None:
                result["inputRequests"] = requests
            return ok(result)
        if tool == "ping_pong" and params["requestState"] in PING_PONG:
            return ok({"resultType": "input_required", "requestState": PING_PONG[params["requestState"]],
                       "inputRequests": requests})
        if tool == "busy_forever" and params["requestState"] == state:
            return ok({"resultType": "input_required", "requestState": state})
        if params["requestState"] != state:
            return JSONResponse({"jsonrpc": "2.0", "id": rid,
                                 "error": {"code": -32602, "message": "Invalid or expired requestState"}})
        text = _final(tool, params.get("inputResponses") or {})
        return ok({"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": False})
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})


def serve():
    """Start the honest server; returns a handle with ``.url``, ``.log`` and ``.stop()``."""
    return serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]))
