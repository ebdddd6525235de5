"""A hostile MCP server for tests of names and sizes: a raw JSON-RPC endpoint (Streamable HTTP,
JSON responses) listing tools, prompts and resource templates whose names break naive URLs
(``a/b``, empty, ``?``, ``#``, ``%``, spaces, Unicode, ``..``, very long, differing only in case,
listed twice), and tools whose results or messages are huge.

Every call answers with the exact name (and arguments, URI) it received, so a test can check that
what was listed is what was called. ``/bad/mcp`` lists items whose names are not strings.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mrtrweb.demo.server import serve_asgi_in_thread

LONG_NAME = "long-" + "x" * 2995  # 3,000 characters: too long for a link, linked by its digest

#: tool names that break naive URLs; each is listed once and answered "called:<name>"
ODD_NAMES = [
    "a/b", "a?b=1&c=2", "a#frag", "100%", "%2F%2e%2e", "with space", " padded ", "ünï©ødé 名前 🚀",
    "..", ".", "../../admin", "a/../b", "Case", "case", "+plus", "&amp;", "back\\slash", "quote'\"",
    "", LONG_NAME, "nul\x00name", "tab\tnew\nline",
    "caf\u00e9", "cafe\u0301",  # the same word, NFC and NFD: two names
]
#: a tool whose call fails (JSON-RPC error): its page offers "Run again" (and "Change the arguments")
FAILING = "fail/again?#%"
#: listed twice: the first listing ("first") is the one shown and called
DUPLICATE = "dup"

PROMPT_NAMES = ["", "a/b", "..", "q?x#y", "Case", "case", LONG_NAME]
#: a prompt whose arguments are named like the page's own form fields
FIELD_CLASH = "field_clash"
TEMPLATES = ["odd://{x}/a b?c#d%", "odd://{csrfmiddlewaretoken}/{x}", "big://{n}"]
#: listed resources (read as they are listed)
RESOURCES = ["odd://a/../b?c#d%", "", "odd://Case", "odd://case", "odd:// space/ünï", "odd://" + "r" * 3000]

MB = 1024 * 1024
MANY_REQUESTS = 50
BIG_TEXT = "A" * (5 * MB)
BIG_MESSAGE = "M" * MB
FLAT = {"type": "object", "properties": {}}

DISCOVER = types.DiscoverResult(
    supported_versions=["2026-07-28"],
    capabilities=types.ServerCapabilities(tools=types.ToolsCapability(), prompts=types.PromptsCapability(),
                                          resources=types.ResourcesCapability()),
    result_type="complete",
    ttl_ms=0,
    cache_scope="public",
).model_dump(by_alias=True, mode="json", exclude_none=True)


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


#: tool name -> its result (besides the odd names)
RESULTS: dict[str, Any] = {
    "big_result": _text(BIG_TEXT),
    "many_blocks": {"content": [{"type": "text", "text": f"{i:05d}" + "b" * 95} for i in range(5000)]},
    # quotes grow when JSON-escaped: a cut copy must still fit the cap
    "big_structured": {"content": [], "structuredContent": {"s": '"\\' * MB}},
    # a server result that tries to look like the product's truncation mark
    # PostgreSQL cannot store NUL in text or jsonb: the operation must still end, its result shown
    "nul_result": _text("before\x00after \\u0000 literal"),
    # a NUL in the tool's name: its params are stored as JSON text, and its retry still matches
    "ask\x00nul": {"resultType": "input_required", "requestState": "s", "inputRequests": {"q": {
        "method": "elicitation/create",
        "params": {"message": "ok?", "requestedSchema": {"type": "object", "properties": {
            "ok": {"type": "boolean", "title": "OK?"}}}}}}},
    # one card, many requests, each with a long message: the card shares one budget
    "many_messages": {"resultType": "input_required", "requestState": "many", "inputRequests": {
        f"q{i}": {"method": "elicitation/create", "params": {"message": f"{i:02d}" + "m" * 100_000, "requestedSchema": {
            "type": "object", "properties": {"ok": {"type": "boolean"}}}}} for i in range(MANY_REQUESTS)}},
    # sampling (allowed for the server by a tenant admin): 500 messages of 5,000 characters (2.5 MB, under MAX_RESPONSE_BYTES)
    "big_sampling": {"resultType": "input_required", "requestState": "sampling", "inputRequests": {"s": {
        "method": "sampling/createMessage", "params": {"maxTokens": 5, "messages": [
            {"role": "user", "content": {"type": "text", "text": "S" * 5_000}}] * 500}}}},
    "marked": {"content": [{"type": "text", "text": "small"}],
               "mrtrweb_truncated": {"original_bytes": 99, "stored_bytes": 1}},
    "big_message": {"resultType": "input_required", "requestState": "s", "inputRequests": {"q": {
        "method": "elicitation/create",
        "params": {"message": BIG_MESSAGE, "requestedSchema": {"type": "object", "properties": {
            "ok": {"type": "boolean", "title": "OK?"}}}}}}},
}


def _tools() -> list[dict[str, Any]]:
    tools = [{"name": name, "description": f"odd tool {i}", "inputSchema": FLAT} for i, name in enumerate(ODD_NAMES)]
    tools += [{"name": name, "description": name, "inputSchema": FLAT} for name in RESULTS]
    tools.append({"name": FAILING, "description": "fails", "inputSchema": FLAT})
    tools.append({"name": "long_description", "description": "D" * MB, "inputSchema": FLAT})
    tools.append({"name": DUPLICATE, "description": "first", "inputSchema": FLAT})
    tools.append({"name": DUPLICATE, "description": "second",
                  "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}})
    return tools


def _prompts() -> list[dict[str, Any]]:
    prompts = [{"name": name, "description": "odd prompt", "arguments": [{"name": "v"}]} for name in PROMPT_NAMES]
    prompts.append({"name": FIELD_CLASH, "arguments": [{"name": "csrfmiddlewaretoken"}, {"name": "action"},
                                                        {"name": "name"}]})
    prompts.append({"name": "big_prompt", "arguments": []})
    prompts.append({"name": "long_prompt_description", "description": "P" * MB, "arguments": []})
    return prompts


def _prompt(name: str, arguments: Any) -> dict[str, Any]:
    text = BIG_TEXT if name == "big_prompt" else f"prompt:{name} args:{json.dumps(arguments, sort_keys=True)}"
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}]}


#: how many tools ``/many/mcp`` lists
MANY = 1200


def _listing(method: str, bad: bool, many: bool = False) -> dict[str, Any] | None:
    page = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    if method == "tools/list" and many:
        return {"tools": [{"name": f"t{i}", "description": "d" * 3000, "inputSchema": FLAT} for i in range(MANY)],
                **page}
    if method == "tools/list":
        tools = [{"name": 5, "inputSchema": FLAT}, {"name": "ok", "inputSchema": FLAT}] if bad else _tools()
        return {"tools": tools, **page}
    if method == "prompts/list":
        return {"prompts": [{"name": None}, {"name": "ok"}] if bad else _prompts(), **page}
    if method == "resources/list":
        resources = [{"uri": 9, "name": "r"}] if bad else [{"uri": u, "name": f"r{i}"} for i, u in enumerate(RESOURCES)]
        return {"resources": resources, **page}
    if method == "resources/templates/list":
        templates = [{"uriTemplate": 7, "name": "t"}] if bad else [{"uriTemplate": t, "name": t} for t in TEMPLATES]
        return {"resourceTemplates": templates, **page}
    return None


async def _endpoint(request: Request, bad: bool, many: bool = False) -> Response:
    try:
        message = await request.json()
    except ValueError:
        return PlainTextResponse("bad json", status_code=400)
    if "id" not in message:
        return Response(status_code=202)
    rid, method = message["id"], message.get("method")
    params = message.get("params") or {}

    def ok(result: Any) -> Response:
        return Response(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}), media_type="application/json")

    if method == "server/discover":
        return ok(DISCOVER)
    listed = _listing(method, bad, many)
    if listed is not None:
        return ok(listed)
    if method == "tools/call":
        name = params.get("name")
        if name == FAILING:
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "no"}})
        if name in RESULTS:
            if params.get("inputResponses"):
                return ok(_text(f"answered:{json.dumps(params['inputResponses'], sort_keys=True)}"))
            return ok(RESULTS[name])
        return ok(_text(f"called:{name}"))
    if method == "prompts/get":
        return ok(_prompt(params.get("name"), params.get("arguments")))
    if method == "resources/read":
        uri = params.get("uri")
        text = BIG_TEXT if isinstance(uri, str) and uri.startswith("big://") else f"read:{uri}"
        return ok({"contents": [{"uri": uri, "text": text}]})
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})


async def endpoint(request: Request) -> Response:
    return await _endpoint(request, bad=False)


async def bad_endpoint(request: Request) -> Response:
    return await _endpoint(request, bad=True)


async def many_endpoint(request: Request) -> Response:
    return await _endpoint(request, bad=False, many=True)


def serve():
    """Start the server; returns a handle with ``.url`` (``/mcp``), ``.log`` and ``.stop()``;
    ``handle.url.replace("/mcp", "/bad/mcp")`` lists names that are not strings, ``/many/mcp``
    :data:`MANY` tools with long descriptions."""
    app = Starlette(routes=[Route("/mcp", endpoint, methods=["POST"]), Route("/bad/mcp", bad_endpoint, methods=["POST"]),
                            Route("/many/mcp", many_endpoint, methods=["POST"])])
    return serve_asgi_in_thread(app)
