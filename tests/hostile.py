"""Hostile MCP servers for tests, raw JSON-RPC endpoints (Streamable HTTP, JSON responses):

* :func:`serve` answers ``tools/call`` of tool NAME with ``RESULTS[NAME]`` verbatim, however
  malformed, and lists tools whose names and descriptions carry XSS payloads;
* :func:`serve_listing` is a well-formed server whose EVERY string (tool, prompt and resource
  template names, titles, descriptions, schema titles/descriptions/enum labels, annotations, an
  elicitation round, a URL-mode URL with U+202E, progress messages, results, errors) carries
  markup (``<meta refresh>``, ``<base>``, ``<form action>``, ``<a>``, ``<img onerror>``,
  ``<style>``, ``<svg onload>``) and control/bidi characters (:func:`hostile_text`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import mcp_types as types
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from mrtrweb.demo.server import serve_asgi_in_thread

XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
JS_URL = "javascript:window.__xss=3"

DISCOVER = types.DiscoverResult(
    supported_versions=["2026-07-28"],
    capabilities=types.ServerCapabilities(tools=types.ToolsCapability()),
    result_type="complete",
    ttl_ms=0,
    cache_scope="public",
).model_dump(by_alias=True, mode="json", exclude_none=True)


def form_round(schema: dict[str, Any], message: str = "Answer please", state: str | None = "s") -> dict[str, Any]:
    out: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": {"q": {"method": "elicitation/create",
                                "params": {"message": message, "requestedSchema": schema}}},
    }
    if state is not None:
        out["requestState"] = state
    return out


#: tool name -> (raw result, the operation's expected error code)
MALFORMED: dict[str, tuple[Any, str]] = {
    "wrong_case": ({"resultType": "Input_Required", "requestState": "s"}, "invalid_result_type"),
    # the SDK's transport refuses a JSON-RPC response whose result is not an object before we see it
    "not_object": ([1, 2], "transport_error"),
    "complete_with_requests": ({"resultType": "complete", "inputRequests": {}, "content": []}, "invalid_result_type"),
    "numeric_state": ({"resultType": "input_required", "requestState": 5}, "input_required_payload_empty"),
    "numeric_state_with_request": (
        dict(form_round({"type": "object", "properties": {}}), requestState=5), "invalid_requestState"),
    "array_requests": ({"resultType": "input_required", "inputRequests": [1], "requestState": "s"},
                       "invalid_named_input_request"),
    "empty": ({"resultType": "input_required"}, "input_required_payload_empty"),
    "huge_state": ({"resultType": "input_required", "requestState": "x" * (2 * 1024 * 1024)}, "invalid_requestState"),
    "nested_schema": (form_round({"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}),
                      "invalid_form_requestedSchema"),
    "javascript_url": ({"resultType": "input_required", "inputRequests": {"u": {
        "method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": JS_URL}}}},
        "unsafe_url_elicitation"),
    "garbage_url": ({"resultType": "input_required", "inputRequests": {"u": {
        "method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://[::1"}}}},
        "unsafe_url_elicitation"),
    "sampling": ({"resultType": "input_required", "inputRequests": {"s": {
        "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}}},
        "unapproved_deprecated_client_request"),
    "unknown_mode": ({"resultType": "input_required", "inputRequests": {"v": {
        "method": "elicitation/create", "params": {"mode": "voice", "message": "m"}}}}, "unknown_elicitation_mode"),
    "bad_final": ({"content": "not a list", "isError": "no"}, "invalid_result"),
}

XSS_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": XSS, "description": XSS, "default": XSS},
        "pick": {"type": "string", "title": "Pick", "oneOf": [{"const": "a", "title": XSS}, {"const": "b", "title": "B"}]},
        "legacy": {"type": "string", "enum": ["x", "y"], "enumNames": [XSS, "Y"]},
    },
}

RESULTS: dict[str, Any] = {name: result for name, (result, _code) in MALFORMED.items()}
RESULTS["xss_round"] = form_round(XSS_SCHEMA, message=XSS + " see https://evil.example/x and " + JS_URL)
RESULTS["xss_url"] = {"resultType": "input_required", "inputRequests": {"u": {
    "method": "elicitation/create",
    "params": {"mode": "url", "message": XSS, "url": "https://xn--80ak6aa92e.com/login?next=%3Cscript%3E"}}}}
RESULTS["same_state"] = form_round({"type": "object", "properties": {"ok": {"type": "boolean"}}}, state="fixed-state")
RESULTS["xss_final"] = {"content": [{"type": "text", "text": XSS}], "isError": False}


async def endpoint(request: Request) -> Response:
    try:
        message = await request.json()
    except ValueError:
        return PlainTextResponse("bad json", status_code=400)
    if "id" not in message:
        return Response(status_code=202)
    rid, method = message["id"], message.get("method")

    def ok(result: Any) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})

    if method == "server/discover":
        return ok(DISCOVER)
    if method == "tools/list":
        nested = {"type": "object", "properties": {"cfg": {"type": "object", "title": XSS}}}  # -> JSON editor
        tools = [{"name": name, "description": XSS, "inputSchema": nested} for name in RESULTS]
        tools.append({"name": "jsonrpc_error", "description": "errors", "inputSchema": {"type": "object"}})
        return ok({"tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
    if method == "tools/call":
        name = (message.get("params") or {}).get("name")
        if name == "jsonrpc_error":
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": XSS}})
        if name in RESULTS:
            return Response(json.dumps({"jsonrpc": "2.0", "id": rid, "result": RESULTS[name]}),
                            media_type="application/json")
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})


def serve():
    """Start the hostile server; returns a handle with ``.url``, ``.log`` and ``.stop()``."""
    app = Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])])
    return serve_asgi_in_thread(app)


# ------------------------------------------------------------------------------------------------
# A hostile LISTING server: every string it sends carries markup and control/bidi characters
# ------------------------------------------------------------------------------------------------

#: markup that would navigate, rebase links, post elsewhere, link out, load an image, restyle the
#: page or run script if any page parsed it as HTML (each aims at 127.0.0.1:1, where nothing listens)
MARKUP = ('<meta http-equiv="refresh" content="0;url=http://127.0.0.1:1/">'
          '<base href="http://127.0.0.1:1/">'
          '<form action="http://127.0.0.1:1/steal"><button>go</button></form>'
          '<a href="http://127.0.0.1:1/">link</a>'
          '<img src=x onerror="window.__xss=4">'
          '<style>body{display:none}</style>'
          '<svg onload="window.__xss=5"></svg>')
#: RLO, LRI, BEL, ESC (an ANSI colour sequence), NUL, NEL (C1), zero-width space
CONTROLS = "\u202e\u2066\x07\x1b[31m\x00\x85\u200b"
#: how :data:`CONTROLS` reads once made visible (``mrtrweb.text.display``)
CONTROLS_SHOWN = "⟨U+202E⟩⟨U+2066⟩⟨U+0007⟩⟨U+001B⟩[31m⟨U+0000⟩⟨U+0085⟩⟨U+200B⟩"


def hostile_text(label: str) -> str:
    """``label``, the markup and the control characters: ``"<label> <MARKUP> <CONTROLS>end"``."""
    return f"{label} {MARKUP} {CONTROLS}end"


#: labels of texts that reach the page from a stored result, where NUL was replaced by U+FFFD
#: when it was stored (:mod:`mrtrweb.text.results`: PostgreSQL cannot store NUL in JSON)
STORED_LABELS = {"Result", "Resource"}


def hostile_shown(label: str) -> str:
    """What a person must read for :func:`hostile_text` ``(label)``: the markup as text, each control
    character as its visible marker (NUL as U+FFFD in a stored result, see :data:`STORED_LABELS`)."""
    shown = f"{label} {MARKUP} {CONTROLS_SHOWN}end"
    return shown.replace("⟨U+0000⟩", "\ufffd") if label in STORED_LABELS else shown


#: names the server chooses: markup without "/" (so that they stay one URL path segment) and
#: BEL/ESC/RLO characters; the product must call them back unchanged
ASK_TOOL = "ask<img src=x onerror=window.__xss=6>\x07\x1b[1m\u202eksa"
URL_TOOL = "url\u202e<b>lru"
FAIL_TOOL = "fail\x07<i>"
SLOW_TOOL = "slow\x1b[2J"
NESTED_TOOL = "nested\u202e"
SAMPLE_TOOL = "sample\x07"
PROMPT = "prompt<img src=x onerror=window.__xss=7>\x07\u202etpmorp"
TEMPLATE = "hostile://reports/{team}?x=<img src=x onerror=window.__xss=8>\u202e"
#: the URL-mode URL: reads as https://evil.example/google.com where U+202E is obeyed; the Hebrew
#: path segment (strong right-to-left letters, no control character) would be drawn right to left
BIDI_URL = "https://evil.example/\u202emoc.elgoog/\u05d0\u05d1\u05d2?next=1"

LISTING_SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "title": hostile_text("Text"), "description": hostile_text("Text help"),
                 "default": "plain"},
        "pick": {"type": "string", "title": hostile_text("Pick"), "description": hostile_text("Pick help"),
                 "oneOf": [{"const": "a", "title": hostile_text("Option A")}, {"const": "b", "title": "B"}],
                 "default": "a"},
        "legacy": {"type": "string", "title": hostile_text("Legacy"), "enum": ["x", "y"],
                   "enumNames": [hostile_text("Name X"), "Y"], "default": "x"},
        "many": {"type": "array", "title": hostile_text("Many"), "description": hostile_text("Many help"),
                 "items": {"anyOf": [{"const": "p", "title": hostile_text("Item P")}, {"const": "q", "title": "Q"}]},
                 "default": ["p"]},
    },
}

LISTING_DISCOVER = types.DiscoverResult(
    supported_versions=["2026-07-28"],
    capabilities=types.ServerCapabilities(tools=types.ToolsCapability(), prompts=types.PromptsCapability(),
                                          resources=types.ResourcesCapability()),
    result_type="complete",
    ttl_ms=0,
    cache_scope="public",
).model_dump(by_alias=True, mode="json", exclude_none=True)

LISTED_TOOLS = [
    {"name": ASK_TOOL, "title": hostile_text("Ask title"), "description": hostile_text("Ask"),
     "inputSchema": LISTING_SCHEMA,
     "annotations": {"title": hostile_text("Annotation"), "destructiveHint": True}},
    {"name": URL_TOOL, "description": hostile_text("Url"), "inputSchema": {"type": "object"}},
    {"name": FAIL_TOOL, "description": hostile_text("Fail"), "inputSchema": {"type": "object"}},
    {"name": SLOW_TOOL, "description": hostile_text("Slow"), "inputSchema": {"type": "object"}},
    {"name": SAMPLE_TOOL, "description": hostile_text("Sample"), "inputSchema": {"type": "object"}},
    {"name": NESTED_TOOL, "description": hostile_text("Nested"),
     "inputSchema": {"type": "object", "description": hostile_text("Nested schema"),
                     "properties": {"cfg": {"type": "object", "title": hostile_text("Cfg"),
                                             "description": "first line\nsecond line"}}}},
]

#: the final result of every tool call: text, an image and a resource link (neither may be loaded or
#: linked), structured content
FINAL_RESULT = {
    "content": [
        {"type": "text", "text": hostile_text("Result")},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "resource_link", "uri": "http://127.0.0.1:1/leak", "name": hostile_text("Link")},
        {"type": "resource", "resource": {"uri": "http://127.0.0.1:1/r", "text": hostile_text("Embedded")}},
    ],
    "structuredContent": {"note": hostile_text("Structured")},
    "isError": False,
}

ELICITATION = {
    "resultType": "input_required",
    "requestState": "listing-state",
    "inputRequests": {"q": {"method": "elicitation/create", "params": {
        "message": hostile_text("Message"),
        "requestedSchema": LISTING_SCHEMA}}},
}

#: a sampling request (answered only where a tenant admin allowed sampling for the server)
SAMPLING_ROUND = {
    "resultType": "input_required",
    "requestState": "sampling-state",
    "inputRequests": {"s": {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": hostile_text("Sampled message")}},
                     {"role": "user", "content": {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}}],
        "systemPrompt": hostile_text("System prompt"), "maxTokens": 50,
        "modelPreferences": {"hints": [{"name": hostile_text("Hint")}], "costPriority": 0.5},
        "metadata": {"note": hostile_text("Metadata")}}}},
}

URL_ROUND = {
    "resultType": "input_required",
    "requestState": "url-state",
    "inputRequests": {"u": {"method": "elicitation/create", "params": {
        "mode": "url", "message": hostile_text("Open"), "url": BIDI_URL, "elicitationId": "e1"}}},
}

#: the slow tool's progress message (the product shows at most 200 characters of one)
PROGRESS_MESSAGE = f'Progress {CONTROLS} <img src=x onerror="window.__xss=9"><meta http-equiv="refresh" content="0;url=http://127.0.0.1:1/">'
#: seconds the slow tool streams its progress before its result
SLOW_S = 4.0


def _fresh(round_: dict[str, Any]) -> dict[str, Any]:
    """``round_`` with a requestState of its own (the same state in two operations is judged by
    another rule of the product, not under test here)."""
    return dict(round_, requestState=f"{round_['requestState']}-{uuid.uuid4()}")


def _listing_result(method: str, params: dict[str, Any]) -> Any:
    """The hostile listing server's result for ``method`` (``None``: method not found)."""
    if method == "server/discover":
        return LISTING_DISCOVER
    page = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    if method == "tools/list":
        return {"tools": LISTED_TOOLS, **page}
    if method == "prompts/list":
        return {"prompts": [{"name": PROMPT, "title": hostile_text("Prompt title"),
                             "description": hostile_text("Prompt"),
                             "arguments": [{"name": "who", "title": hostile_text("Who"),
                                            "description": hostile_text("Who help"), "required": True}]}],
                **page}
    if method == "resources/templates/list":
        return {"resourceTemplates": [{"uriTemplate": TEMPLATE, "name": hostile_text("Template name"),
                                       "description": hostile_text("Template")}], **page}
    if method == "resources/list":
        return {"resources": [], **page}
    answered = "inputResponses" in params
    if method == "tools/call":
        name = params.get("name")
        if name == ASK_TOOL:
            return FINAL_RESULT if answered else _fresh(ELICITATION)
        if name == URL_TOOL:
            return FINAL_RESULT if answered else _fresh(URL_ROUND)
        if name == SAMPLE_TOOL:
            return FINAL_RESULT if answered else _fresh(SAMPLING_ROUND)
        if name in (NESTED_TOOL, SLOW_TOOL):
            return FINAL_RESULT
    if method == "prompts/get" and params.get("name") == PROMPT:
        if not answered:
            return _fresh(ELICITATION)
        return {"description": hostile_text("Prompt result description"),
                "messages": [{"role": "user", "content": {"type": "text", "text": hostile_text("Prompt result")}}]}
    if method == "resources/read":
        return {"contents": [{"uri": params.get("uri", ""), "mimeType": "text/plain",
                              "text": hostile_text("Resource")},
                             {"uri": "http://127.0.0.1:1/blob", "mimeType": "image/png", "blob": "iVBORw0KGgo="}]}
    return None


async def listing_endpoint(request: Request) -> Response:
    try:
        message = await request.json()
    except ValueError:
        return PlainTextResponse("bad json", status_code=400)
    if "id" not in message:
        return Response(status_code=202)
    rid, method = message["id"], message.get("method")
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    if method == "tools/call" and params.get("name") == FAIL_TOOL:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": hostile_text("Error")}})
    if method == "tools/call" and params.get("name") == SLOW_TOOL:
        token = ((params.get("_meta") or {}).get("progressToken"))
        return StreamingResponse(_slow_stream(rid, token), media_type="text/event-stream")
    result = _listing_result(str(method), params)
    if result is None:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})


async def _slow_stream(rid: Any, token: Any):
    """Server-sent events: a progress notification with a hostile message every half second for
    :data:`SLOW_S` (so that a page that connects late still sees one), then the final result."""
    for step in range(int(SLOW_S * 2)):
        if token is not None:
            note = {"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": step + 1, "total": int(SLOW_S * 2) + 1,
                               "message": PROGRESS_MESSAGE}}
            yield f"event: message\ndata: {json.dumps(note)}\n\n"
        await asyncio.sleep(0.5)
    yield f"event: message\ndata: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'result': FINAL_RESULT})}\n\n"


def serve_listing():
    """Start the hostile listing server; returns a handle with ``.url``, ``.log`` and ``.stop()``."""
    app = Starlette(routes=[Route("/mcp", listing_endpoint, methods=["POST"])])
    return serve_asgi_in_thread(app)
