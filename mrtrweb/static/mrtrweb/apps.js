// The MCP Apps host (issue 31, docs/apps.md) on an operation's page: the app of a completed tool
// call in a frame of the sandbox origin, driven by the official library's AppBridge
// (vendor/ext-apps, @modelcontextprotocol/ext-apps, pinned). No protocol is written here.
// Sent to the app: tool-input, tool-result, host-context-changed (theme, locale), resource-teardown
// before the frame is removed. The app's own requests (tools/call, resources/read, links,
// downloads; the rest refused) are apps-requests.js's (issue 31 item 4).
import { AppBridge, PostMessageTransport } from "./vendor/ext-apps/app-bridge.js";
import { HOST_CAPABILITIES, installAppRequests } from "./apps-requests.js";

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

function hostContext() {
  const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  return { theme: dark ? "dark" : "light", locale: document.documentElement.lang || navigator.language,
           displayMode: "inline", availableDisplayModes: ["inline"],
           containerDimensions: { maxHeight: MAX_HEIGHT } };
}

async function start() {
  let begun = null;
  for (let i = 0; i < 120 && begun === null; i++) {
    const answer = await post(box.dataset.startUrl);
    if (answer.status === 409) { await pause(1000); continue; } // the call has not completed yet
    if (!answer.ok) { box.hidden = true; return; } // no app, or it cannot be read now: the result stays as text
    begun = await answer.json();
  }
  if (begun === null) return;
  box.hidden = false;
  say(box.dataset.loading);
  const documentUrl = box.dataset.documentUrl.replace("00000000-0000-0000-0000-000000000000", begun.read);
  let doc = null;
  for (let i = 0; i < 120 && doc === null; i++) {
    const answer = await fetch(documentUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } });
    const body = await answer.json();
    if (body.status === "ready") doc = body;
    else if (body.status === "running") await pause(500);
    else { say(box.dataset.failed, "error"); return; }
  }
  if (doc === null) { say(box.dataset.failed, "error"); return; }
  const domains = box.querySelector(".app-domains");
  domains.textContent = doc.domains.length ? box.dataset.reaches + " " + doc.domains.join(", ") : box.dataset.reachesNothing;
  const frame = document.createElement("iframe");
  frame.className = "app-frame";
  frame.title = box.dataset.frameTitle;
  frame.setAttribute("sandbox", "allow-scripts allow-same-origin allow-forms");
  frame.style.height = MIN_HEIGHT * 3 + "px";
  frame.src = box.dataset.proxyUrl;
  box.querySelector(".app-holder").appendChild(frame);

  const bridge = new AppBridge(null, { name: "mrtrweb", version: box.dataset.version || "0" }, HOST_CAPABILITIES,
                               { hostContext: hostContext() });
  installAppRequests(bridge, box);
  bridge.onsandboxready = () => {
    bridge.sendSandboxResourceReady({ html: "", "mrtrweb/document": doc.document, "mrtrweb/allow": doc.allow });
  };
  bridge.oninitialized = () => {
    say(box.dataset.shown);
    bridge.sendToolInput(begun.input);
    bridge.sendToolResult(begun.result);
  };
  bridge.onsizechange = ({ height }) => {
    if (typeof height === "number" && isFinite(height)) {
      frame.style.height = Math.max(MIN_HEIGHT, Math.min(MAX_HEIGHT, Math.ceil(height))) + "px";
    }
  };
  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
      bridge.setHostContext(hostContext());
    });
  }
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));

  const close = box.querySelector(".app-close");
  close.hidden = false;
  close.addEventListener("click", async () => {
    close.disabled = true;
    try { await Promise.race([bridge.teardownResource({}), pause(2000)]); } catch (e) { /* removed anyway */ }
    await bridge.close();
    frame.remove();
    say(box.dataset.closed);
    close.hidden = true;
  });
}

if (box) start().catch(() => { say(box.dataset.failed, "error"); });
