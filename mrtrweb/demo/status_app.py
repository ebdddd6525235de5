"""The demo server's MCP App (issue 31; docs/apps.md, "The demo's app"): ``service_status``
names the app ``ui://demo/service-status.html`` (``_meta.ui.resourceUri``, a resource of type
``text/html;profile=mcp-app``), which shows the call's result beside it; its **Check again** button
calls ``refresh_status`` (``_meta.ui.visibility: ["app"]``, read-only) through the host.

Tools (both read-only, answering text at once, no round):

``service_status(service="checkout")``
    The person's (or the model's) call: ``"<service>: 3 of 3 replicas healthy (check N, by
    service_status)."``; ``N`` counts this server process's checks.
``refresh_status(service)`` (app only)
    The same check, ``"... by refresh_status)."``: never offered to a person or a model.

The app is our own, a few lines of the app side of the protocol by hand (JSON-RPC over
``postMessage`` to its parent, as the product's test apps speak it): ``ui/initialize``, then
``ui/notifications/initialized``; it shows ``tool-input``'s service and ``tool-result``'s text
(as text, never as HTML), answers ``ui/resource-teardown``, reports its height
(``ui/notifications/size-changed``) and calls ``tools/call`` ``refresh_status`` on the button. It
declares no outside domain (the specification's restrictive CSP applies) and no permission.
"""

from __future__ import annotations

import itertools
import re

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

__all__ = ["APP_HTML", "APP_URI", "MIME", "add_status_app"]

APP_URI = "ui://demo/service-status.html"
MIME = "text/html;profile=mcp-app"

_READS = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)

APP_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Service status</title>
<style>
  :root { color-scheme: light dark; }
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; padding: 12px; }
  .card { border: 1px solid #8c959f; border-radius: 8px; padding: 12px 14px; }
  h1 { font-size: 1.05rem; margin: 0 0 8px; }
  h1 small { font-weight: normal; opacity: .7; }
  #result { font-size: 1.1rem; margin: 8px 0; }
  .muted { opacity: .7; font-size: .85rem; }
  button { font: inherit; padding: 4px 12px; }
</style></head>
<body><div class="card">
  <h1>Service status <small>&middot; the demo server's MCP App</small></h1>
  <p id="service" class="muted">Waiting for the call&hellip;</p>
  <p id="result" aria-live="polite">Waiting for the result&hellip;</p>
  <button id="refresh" type="button" disabled>Check again</button>
  <p class="muted">Check again asks the host to call <code>refresh_status</code>, a read-only tool only this app
  may call: the host checks the call, makes it as the app's, audits it, and hands back only its result.</p>
</div>
<script>
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const waiting = new Map();
  let nextId = 1;
  let service = "checkout";
  const post = (message) => window.parent.postMessage(message, "*");
  function request(method, params) {
    const id = nextId++;
    post({jsonrpc: "2.0", id: id, method: method, params: params});
    return new Promise((resolve) => waiting.set(id, resolve));
  }
  function resized() {
    post({jsonrpc: "2.0", method: "ui/notifications/size-changed",
          params: {height: document.documentElement.scrollHeight}});
  }
  function textOf(result) {
    const content = result && Array.isArray(result.content) ? result.content : [];
    return content.filter((c) => c && c.type === "text" && typeof c.text === "string").map((c) => c.text).join("\\n");
  }
  function show(result) {
    $("result").textContent = textOf(result) || "(the server answered no text)";
    resized();
  }
  window.addEventListener("message", (event) => {
    if (event.source !== window.parent) return;
    const m = event.data;
    if (!m || typeof m !== "object" || m.jsonrpc !== "2.0") return;
    if (m.id !== undefined && m.method === undefined) {
      const resolve = waiting.get(m.id);
      if (resolve) { waiting.delete(m.id); resolve(m); }
      return;
    }
    if (m.method === "ui/notifications/tool-input") {
      const args = (m.params && m.params.arguments) || {};
      if (typeof args.service === "string" && args.service) service = args.service;
      $("service").textContent = "Service: " + service;
    } else if (m.method === "ui/notifications/tool-result") {
      show(m.params);
      $("refresh").disabled = false;
    } else if (m.method === "ui/notifications/tool-cancelled") {
      $("result").textContent = "The call ended without a result.";
    } else if (m.method === "ui/resource-teardown" && m.id !== undefined) {
      post({jsonrpc: "2.0", id: m.id, result: {}});
    }
  });
  $("refresh").addEventListener("click", async () => {
    $("refresh").disabled = true;
    $("result").textContent = "Checking\\u2026";
    const reply = await request("tools/call", {name: "refresh_status", arguments: {service: service}});
    if (reply.error) $("result").textContent = "The host refused: " + String(reply.error.message || reply.error.code);
    else show(reply.result);
    $("refresh").disabled = false;
  });
  request("ui/initialize", {appInfo: {name: "mrtr-demo-service-status", version: "1.0.0"}, appCapabilities: {},
                            protocolVersion: "2026-01-26"})
    .then(() => { post({jsonrpc: "2.0", method: "ui/notifications/initialized", params: {}}); resized(); });
})();
</script></body></html>
"""


def add_status_app(mcp: MCPServer) -> None:
    """Add ``service_status``, the app-only ``refresh_status`` and the app's ``ui://`` resource."""
    checks = itertools.count(1)

    def status(service: str, by: str) -> str:
        name = re.sub(r"[^A-Za-z0-9_-]", "", service)[:40] or "checkout"
        return f"{name}: 3 of 3 replicas healthy (check {next(checks)}, by {by})."

    @mcp.resource(APP_URI, name="service-status-app", title="Service status (MCP App)", mime_type=MIME)
    def service_status_app() -> str:
        return APP_HTML

    @mcp.tool(structured_output=False, title="Service status (with an app)", annotations=_READS,
              meta={"ui": {"resourceUri": APP_URI}})
    async def service_status(service: str = "checkout") -> str:
        """How a service's replicas are doing; shown by the demo's MCP App where apps are on."""
        return status(service, "service_status")

    @mcp.tool(structured_output=False, title="Check a service again (app only)", annotations=_READS,
              meta={"ui": {"resourceUri": APP_URI, "visibility": ["app"]}})
    async def refresh_status(service: str = "checkout") -> str:
        """The same check, for the service-status app's Check again button (app only)."""
        return status(service, "refresh_status")
