"""An MCP server with an MCP App of our own, for the tests of an app's own requests (issue 31
item 4): a raw JSON-RPC endpoint (Streamable HTTP, JSON responses, MCP 2026-07-28).

Tools (``_meta.ui.visibility`` as the specification has it; absent means ``["model", "app"]``):

``open_panel``
    The person's call; names the app ``ui://panel/app.html`` (read-only).
``lookup`` (app only, read-only)
    ``"looked up <q>"``; its ``inputSchema`` (:data:`LOOKUP_SCHEMA`) takes only ``q``, a string
    (``additionalProperties: false``).
``transfer`` (app only, NOT read-only; ``amount`` an integer)
    One form round asking a ``code`` (requestState ``"t-1"``); the retry echoing the state gets
    ``"Transfer done."`` -- never the answer itself, so the app's result holds no answer value.
``admin_only`` (model only)
    Never an app's.
``filler_00`` ... ``filler_49`` (app only, read-only)
    Fifty more app tools: with ``open_panel``, ``lookup`` and ``transfer`` the server offers 53
    tools to apps; ``filler_47`` to ``filler_49`` are beyond ``APPS_MAX_TOOLS`` (50).

Resources: ``ui://panel/app.html`` (the app, :data:`APP_HTML`), ``note://same`` (text).

The app is hand-written JSON-RPC over ``postMessage`` (the app side; the host side is the
official AppBridge): each button ``#b-<key>`` sends the request :data:`REQUESTS` names and writes
the reply (JSON) into ``#o-<key>``; ``#b-burst`` sends twelve ``lookup`` calls at once and writes
the replies as a JSON list into ``#o-burst``. ``#ready`` says ``ready`` after ``ui/initialize``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp import types

from mrtrweb.demo.server import serve_asgi_in_thread

DISCOVER = types.DiscoverResult(
    supported_versions=["2026-07-28"],
    capabilities=types.ServerCapabilities(tools=types.ToolsCapability(), resources=types.ResourcesCapability()),
    result_type="complete", ttl_ms=0, cache_scope="public",
).model_dump(by_alias=True, mode="json", exclude_none=True)

APP_URI = "ui://panel/app.html"
MIME = "text/html;profile=mcp-app"
#: an app's message that is markup: shown as text by the host, never as HTML
MARKUP = "<img src=x onerror=\"window.__pwned=1\"><b>bold</b>"
#: what the app's ``sampling`` request asks the model (markup: the host's card shows it as text)
SAMPLING_ASKS = "Summarise the panel <img src=x onerror=\"window.__pwned=2\">"
#: the answer the tests give to ``transfer``'s round (it must never reach the app)
CODE_FIELD = "code"

REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "lookup": ("tools/call", {"name": "lookup", "arguments": {"q": "x"}}),
    "transfer": ("tools/call", {"name": "transfer", "arguments": {"amount": 5}}),
    "admin": ("tools/call", {"name": "admin_only", "arguments": {}}),
    "other": ("tools/call", {"name": "confirm_step", "arguments": {}}),
    "filler_first": ("tools/call", {"name": "filler_00", "arguments": {}}),
    "filler_last": ("tools/call", {"name": "filler_49", "arguments": {}}),
    "note": ("resources/read", {"uri": "note://same"}),
    "other_note": ("resources/read", {"uri": "note://other"}),
    "link": ("ui/open-link", {"url": "https://example.com/docs?x=1"}),
    "bad_link": ("ui/open-link", {"url": "javascript:alert(1)"}),
    "download": ("ui/download-file", {"contents": [{"type": "resource", "resource": {
        "uri": "file:///report.txt", "mimeType": "text/plain", "text": "report body"}}]}),
    "link_download": ("ui/download-file", {"contents": [{"type": "resource_link", "uri": "https://example.com/x",
                                                          "name": "x"}]}),
    "message": ("ui/message", {"role": "user", "content": [{"type": "text", "text": "hi"}]}),
    "markup_message": ("ui/message", {"role": "user", "content": [{"type": "text", "text": MARKUP}]}),
    "context": ("ui/update-model-context", {"content": [{"type": "text", "text": "ctx"}]}),
    "sampling": ("sampling/createMessage", {"messages": [{"role": "user", "content": {
        "type": "text", "text": SAMPLING_ASKS}}], "systemPrompt": "Answer in one line.", "maxTokens": 50}),
    "sampling_empty": ("sampling/createMessage", {"messages": [], "maxTokens": 5}),
}

APP_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>panel</title></head><body>
<p id="ready">starting</p>
<div id="buttons"></div>
<button id="b-burst">burst</button><pre id="o-burst"></pre>
<script>
const REQUESTS = %s;
let next = 1;
const waiting = {};
function send(msg) { window.parent.postMessage(msg, "*"); }
function request(method, params) {
  const id = next++;
  send({ jsonrpc: "2.0", id: id, method: method, params: params });
  return new Promise((resolve) => { waiting[id] = resolve; });
}
window.addEventListener("message", (e) => {
  if (e.source !== window.parent) return;
  const m = e.data;
  if (m && m.id !== undefined && waiting[m.id]) { const r = waiting[m.id]; delete waiting[m.id]; r(m); }
});
const holder = document.getElementById("buttons");
for (const key of Object.keys(REQUESTS)) {
  const b = document.createElement("button");
  b.id = "b-" + key; b.textContent = key;
  const out = document.createElement("pre");
  out.id = "o-" + key;
  b.addEventListener("click", async () => {
    const reply = await request(REQUESTS[key][0], REQUESTS[key][1]);
    out.textContent = JSON.stringify(reply.error ? { error: reply.error } : { result: reply.result });
  });
  holder.appendChild(b); holder.appendChild(out);
}
document.getElementById("b-burst").addEventListener("click", async () => {
  const all = [];
  for (let i = 0; i < 12; i++) all.push(request("tools/call", { name: "lookup", arguments: { q: "b" + i } }));
  const replies = await Promise.all(all);
  document.getElementById("o-burst").textContent = JSON.stringify(replies.map((r) => r.error ? { error: r.error } : { ok: true }));
});
request("ui/initialize", { appInfo: { name: "panel", version: "1" }, appCapabilities: {}, protocolVersion: "2026-01-26" })
  .then(() => { send({ jsonrpc: "2.0", method: "ui/notifications/initialized", params: {} });
                document.getElementById("ready").textContent = "ready"; });
</script></body></html>""" % json.dumps({k: [m, p] for k, (m, p) in REQUESTS.items()})


def _tool(name: str, *, visibility: list[str] | None = None, read_only: bool = False, app: bool = False,
          schema: dict[str, Any] | None = None) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "description": f"test {name}", "inputSchema": schema or {"type": "object"}}
    ui: dict[str, Any] = {}
    if visibility is not None:
        ui["visibility"] = visibility
    if app:
        ui["resourceUri"] = APP_URI
    if ui:
        tool["_meta"] = {"ui": ui}
    if read_only:
        tool["annotations"] = {"readOnlyHint": True}
    return tool


LOOKUP_SCHEMA = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 200}},
                 "additionalProperties": False}
TOOLS = [
    _tool("open_panel", read_only=True, app=True),
    _tool("lookup", visibility=["app"], read_only=True, schema=LOOKUP_SCHEMA),
    _tool("transfer", visibility=["app"], schema={"type": "object", "properties": {"amount": {"type": "integer"}}}),
    _tool("admin_only", visibility=["model"], read_only=True),
    *[_tool(f"filler_{i:02d}", visibility=["app"], read_only=True) for i in range(50)],
]
ROUND = {"code": {"method": "elicitation/create", "params": {
    "message": "The transfer needs your code word",
    "requestedSchema": {"type": "object", "properties": {CODE_FIELD: {"type": "string", "title": "Code word"}},
                        "required": [CODE_FIELD]}}}}


def _text(text: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": False}


async def endpoint(request: Request) -> Response:
    message = await request.json()
    if "id" not in message:
        return Response(status_code=202)
    rid, method, params = message["id"], message.get("method"), message.get("params") or {}

    def ok(result: Any) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})

    def error(code: int, text: str) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": text}})

    if method == "server/discover":
        return ok(DISCOVER)
    if method == "tools/list":
        return ok({"tools": TOOLS, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name == "open_panel":
            return ok(_text("panel opened"))
        if name == "lookup":
            return ok(_text(f"looked up {arguments.get('q')}"))
        if name == "transfer":
            if "requestState" not in params:
                return ok({"resultType": "input_required", "requestState": "t-1", "inputRequests": ROUND})
            if params["requestState"] != "t-1":
                return error(-32602, "Invalid requestState")
            answer = (params.get("inputResponses") or {}).get("code") or {}
            return ok(_text("Transfer done." if answer.get("action") == "accept" else "Transfer not done."))
        if isinstance(name, str) and name.startswith("filler_") or name == "admin_only":
            return ok(_text(f"{name} ran"))
        return error(-32602, f"Unknown tool {name}")
    if method == "resources/read":
        uri = params.get("uri")
        if uri == APP_URI:
            return ok({"contents": [{"uri": APP_URI, "mimeType": MIME, "text": APP_HTML}], "resultType": "complete"})
        if uri == "note://same":
            return ok({"contents": [{"uri": uri, "mimeType": "text/plain", "text": "a note of the same server"}],
                       "resultType": "complete"})
        return error(-32002, "Resource not found")
    return error(-32601, "Method not found")


def serve():
    """Start the server; returns a handle with ``.url``, ``.log`` and ``.stop()``."""
    return serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]))
