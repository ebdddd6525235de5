// The MCP Apps host (issue 31, docs/apps.md) on an operation's page: the app of a running or
// completed tool call in a frame of the sandbox origin, driven by the official library's AppBridge
// (vendor/ext-apps, @modelcontextprotocol/ext-apps, pinned). No protocol is written here.
// Sent to the app: tool-input, then tool-result, or tool-cancelled when the call ends without a
// result; host-context-changed (theme, locale, display mode: apps-modes.js), resource-teardown
// before the frame is removed; the call's result is sent once the product's push says it changed
// (apps-live.js). The app's own requests (tools/call, resources/read, links,
// downloads; messages and context to the conversation of a call the model proposed; sampling
// drafted by the tenant's model and decided by the person; the rest refused) are apps-requests.js's (issue 31 item 4). With approval required,
// an app not approved is never handed over.
import { AppBridge, PostMessageTransport } from "./vendor/ext-apps/app-bridge.js";
import { operationChanges } from "./apps-live.js";
import { displayModes, MODES } from "./apps-modes.js";
import { hostCapabilities, installAppRequests } from "./apps-requests.js";

const MIN_HEIGHT = 80;
const MAX_HEIGHT = 1600;
const box = document.getElementById("mcp-app");

function say(text, cls) {
  const p = box.querySelector(".app-status");
  p.textContent = text;
  p.className = "app-status " + (cls || "muted");
}

async function post(url) {
  return fetch(url, { method: "POST", credentials: "same-origin",
                      headers: { "X-CSRFToken": box.dataset.csrf, "Accept": "application/json" } });
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function hostContext(mode) {
  const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  return { theme: dark ? "dark" : "light", locale: document.documentElement.lang || navigator.language,
           displayMode: mode || "inline", availableDisplayModes: MODES,
           containerDimensions: { maxHeight: MAX_HEIGHT } };
}

// The call's outcome, once it has one: {status: "completed", result} or {status: "cancelled", reason};
// null when the page may no longer ask (apps turned off, signed out): the app is told nothing more.
// Asked once now, then after each push about the call (apps-live.js; a slow poll with the socket down).
async function outcome(first) {
  let now = first;
  const root = document.getElementById("operation");
  const changes = operationChanges(root ? root.dataset.operation : "");
  try {
    while (now.status === "running") {
      const answer = await fetch(box.dataset.outcomeUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } });
      if (answer.ok) now = await answer.json();
      else if (answer.status >= 400 && answer.status < 500) return null;
      if (now.status === "running") await changes.next();
    }
  } finally {
    changes.stop();
  }
  return now;
}

// With approval required: this HTML (its digest) is not approved: nothing is handed to the sandbox
function waiting(body) {
  say(box.dataset.waiting);
  box.querySelector(".app-domains").textContent = body.domains.length
    ? box.dataset.reaches + " " + body.domains.join(", ") : box.dataset.reachesNothing;
  const link = box.querySelector(".app-approvals");
  if (body.approvals) { link.querySelector("a").href = body.approvals; link.hidden = false; }
}

// "This app is too large to show here (4.3 MB of HTML; ...at most 1 MB)": the sizes are the server's
// numbers, formatted here (never the server's text)
function tooLarge(bytes, limit) {
  const mb = (n) => (Number(n) / 1e6).toLocaleString(document.documentElement.lang || undefined,
                                                     { maximumFractionDigits: 1 });
  return box.dataset.tooLarge.replace("{size}", mb(bytes)).replace("{limit}", mb(limit));
}

// The app's one-time document (JSON: its path, domains, allow), or null (said why on the page)
async function documentOf(documentUrl) {
  for (let i = 0; i < 120; i++) {
    const answer = await fetch(documentUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } });
    const body = await answer.json();
    if (body.status === "ready") return body;
    if (body.status === "running") { await pause(500); continue; }
    if (body.status === "approval") waiting(body);
    else if (body.error === "too_large") say(tooLarge(body.bytes, body.limit), "error");
    else say(box.dataset.failed, "error");
    return null;
  }
  say(box.dataset.failed, "error");
  return null;
}

async function start() {
  let begun = null;
  for (let i = 0; i < 120 && begun === null; i++) {
    const answer = await post(box.dataset.startUrl);
    if (answer.status === 503) { await pause(1000); continue; } // the tools could not be listed now
    if (!answer.ok) { box.hidden = true; return; } // no app, or the call ended without a result: text
    begun = await answer.json();
  }
  if (begun === null) return;
  box.hidden = false;
  say(box.dataset.loading);
  const documentUrl = box.dataset.documentUrl.replace("00000000-0000-0000-0000-000000000000", begun.read);
  let doc = await documentOf(documentUrl);
  if (doc === null) return;
  const domains = box.querySelector(".app-domains");
  domains.textContent = doc.domains.length ? box.dataset.reaches + " " + doc.domains.join(", ") : box.dataset.reachesNothing;
  if (doc.domains.length) { // it reaches outside domains: the person reads them, then loads it
    const load = box.querySelector(".app-load");
    load.hidden = false;
    say(box.dataset.confirm);
    await new Promise((resolve) => load.addEventListener("click", resolve, { once: true }));
    load.hidden = true;
    say(box.dataset.loading);
    doc = await documentOf(documentUrl); // a fresh one-time document: the first one may have expired
    if (doc === null) return;
  }
  const frame = document.createElement("iframe");
  frame.className = "app-frame";
  frame.title = box.dataset.frameTitle;
  frame.setAttribute("sandbox", "allow-scripts allow-same-origin allow-forms");
  let height = MIN_HEIGHT * 3;
  frame.style.height = height + "px";
  frame.src = box.dataset.proxyUrl;
  box.querySelector(".app-holder").appendChild(frame);

  const bridge = new AppBridge(null, { name: "mrtrweb", version: box.dataset.version || "0" }, hostCapabilities(box),
                               { hostContext: hostContext() });
  installAppRequests(bridge, box);
  let handed = false;
  bridge.onsandboxready = () => { // once: a later "proxy ready" (the app can forge one) gets nothing
    if (handed) return;
    handed = true;
    bridge.sendSandboxResourceReady({ html: "", "mrtrweb/document": doc.document, "mrtrweb/allow": doc.allow });
  };
  const modes = displayModes(bridge, box.querySelector(".app-holder"), frame, hostContext, () => height);
  let informed = false;
  bridge.oninitialized = async () => {
    if (informed) return; // a second "initialized" from the app changes nothing
    informed = true;
    bridge.sendToolInput(begun.input);
    say(begun.status === "running" ? box.dataset.running : box.dataset.shown);
    const ended = await outcome(begun);
    if (ended === null || !frame.isConnected) return; // closed meanwhile, or no longer ours to ask
    if (ended.status === "completed") { bridge.sendToolResult(ended.result); say(box.dataset.shown); }
    else { bridge.sendToolCancelled({ reason: ended.reason }); say(box.dataset.cancelled); }
  };
  bridge.onsizechange = (params) => {
    const wanted = params && params.height;
    if (typeof wanted === "number" && isFinite(wanted)) { // bounded; width is the page's
      height = Math.max(MIN_HEIGHT, Math.min(MAX_HEIGHT, Math.ceil(wanted)));
      if (modes.current() === "inline") frame.style.height = height + "px";
    }
  };
  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
      bridge.setHostContext(hostContext(modes.current()));
    });
  }
  // the host posts only to the sandbox origin: should the app navigate the proxy's frame elsewhere,
  // nothing more reaches it (the library's transport itself posts to "*")
  const sandboxOrigin = new URL(box.dataset.proxyUrl).origin;
  const toProxy = { postMessage: (message) => frame.contentWindow.postMessage(message, sandboxOrigin) };
  await bridge.connect(new PostMessageTransport(toProxy, frame.contentWindow));

  const close = box.querySelector(".app-close");
  close.hidden = false;
  close.addEventListener("click", async () => {
    close.disabled = true;
    modes.leave();
    try { await Promise.race([bridge.teardownResource({}), pause(2000)]); } catch (e) { /* removed anyway */ }
    await bridge.close();
    frame.remove();
    say(box.dataset.closed);
    close.hidden = true;
  });
}

if (box) start().catch(() => { say(box.dataset.failed, "error"); });
