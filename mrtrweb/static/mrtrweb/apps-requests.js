// An MCP App's own requests to the host (issue 31 item 4, docs/apps.md), installed on the
// AppBridge of apps.js. The server decides everything (mrtrweb.appcalls): this module only carries
// a request to the site's endpoints (CSRF'd), shows what the server rendered (a confirmation, an
// app call's consent card, a link's interstitial, a download) OUTSIDE the app's frame, waits for
// the app's operation to end (told by the product's push, apps-live.js) and hands the app its final
// result, or a JSON-RPC error.
// Nothing it returns to the app holds a cookie, a CSRF token, a requestState or an answer: only
// the final result of the call, the CreateMessageResult of a sampling the person sent, or the
// product's sentence of a refusal.
import { operationChanges } from "./apps-live.js";

const ZERO = "00000000-0000-0000-0000-000000000000";

// JSON-RPC error codes the app reads (the reason is in error.data.reason, a stable word)
const REFUSED = -32001;        // refused by the product (its right, its rate, the person)
const INVALID_PARAMS = -32602; // the arguments do not fit the tool's inputSchema (reason bad_arguments)
const NOT_OFFERED = -32601;    // sampling where the page does not offer it; ui/message, ui/update-model-context
                               // where no conversation takes them

function rpcError(code, message, reason) {
  const error = new Error(message);
  error.code = code;
  error.data = { reason: reason };
  return error;
}

export function installAppRequests(bridge, box) {
  const csrf = box.dataset.csrf;
  const requestsUrl = box.dataset.requestsUrl;
  const callUrl = (id) => box.dataset.callUrl.replace(ZERO, id);
  const panelUrl = (id) => box.dataset.panelUrl.replace(ZERO, id);
  const area = box.querySelector(".app-requests");
  const text = (name) => box.dataset[name] || "";

  async function ask(body) {
    const answer = await fetch(requestsUrl, {
      method: "POST", credentials: "same-origin",
      headers: { "X-CSRFToken": csrf, "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(body),
    });
    let data = null;
    try { data = await answer.json(); } catch (e) { data = null; }
    if (!answer.ok || data === null) {
      const code = data && [INVALID_PARAMS, NOT_OFFERED].includes(data.rpc) ? data.rpc : REFUSED; // the server's
      throw rpcError(code, (data && data.message) || text("refused"), (data && data.error) || "refused");
    }
    return data;
  }

  // a card the server rendered, shown outside the frame; returns its element
  function show(html, kind) {
    const holder = document.createElement("div");
    holder.className = "app-request-holder";
    holder.dataset.kind = kind;
    holder.innerHTML = html; // rendered and escaped by the server (mrtrweb/_app_request.html, _panel.html)
    area.appendChild(holder);
    area.hidden = false;
    holder.querySelectorAll(".app-dismiss").forEach((b) => b.addEventListener("click", () => holder.remove()));
    return holder;
  }

  // The person's Confirm or Decline of a call that is not read-only: the started operation's id
  function confirmation(html) {
    return new Promise((resolve, reject) => {
      const holder = show(html, "confirm");
      const form = holder.querySelector("form.app-decision");
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const decision = event.submitter ? event.submitter.value : "decline";
        form.querySelectorAll("button").forEach((b) => { b.disabled = true; });
        try {
          const answer = await fetch(form.getAttribute("action"), {
            method: "POST", credentials: "same-origin",
            headers: { "X-CSRFToken": csrf, "Accept": "application/json" },
            body: new URLSearchParams({ decision: decision }),
          });
          const data = await answer.json();
          holder.remove();
          if (answer.ok && data.status === "started") resolve(data.operation);
          else reject(rpcError(REFUSED, data.message || text("refused"), data.error || "refused"));
        } catch (e) {
          holder.remove();
          reject(rpcError(REFUSED, text("refused"), "unavailable"));
        }
      });
    });
  }

  // The person's decision on an app's sampling request (mrtrweb.appcalls.sampling): the card holds
  // the request (rendered and escaped by the server); nothing has gone to the model. "Draft with the
  // model" asks the server to draft (only then the model sees the request): the card is replaced by
  // the request and the draft, editable, with Send / Refuse. "Write the reply myself" sends the
  // person's text (no model asked); Refuse refuses. The app receives the CreateMessageResult the
  // server answers, or a JSON-RPC error; a decision the server does not take (a bad reply, a model
  // that failed to draft) keeps the card, saying why.
  const STILL_WAITS = ["bad_reply", "model_failed", "bad_request"];
  function samplingDecision(html) {
    return new Promise((resolve, reject) => {
      const holder = show(html, "sampling");
      function bind() {
        const form = holder.querySelector("form.app-sampling");
        const said = document.createElement("p");
        said.className = "app-sampling-error error";
        said.hidden = true;
        form.appendChild(said);
        form.addEventListener("submit", async (event) => {
          event.preventDefault();
          const decision = event.submitter ? event.submitter.value : "refuse";
          const box = form.querySelector("textarea[name=reply]");
          const token = form.querySelector("input[name=token]").value;
          form.querySelectorAll("button").forEach((b) => { b.disabled = true; });
          let answer = null;
          let data = null;
          try {
            answer = await fetch(form.getAttribute("action"), {
              method: "POST", credentials: "same-origin",
              headers: { "X-CSRFToken": csrf, "Accept": "application/json" },
              body: new URLSearchParams({ token: token, decision: decision, reply: box ? box.value : "" }),
            });
            data = await answer.json();
          } catch (e) {
            data = null;
          }
          if (answer && answer.ok && data && data.status === "sampled") {
            holder.remove();
            resolve(data.result);
          } else if (answer && answer.ok && data && data.status === "drafted") { // the draft, for the person
            holder.innerHTML = data.card; // rendered and escaped by the server
            bind();
          } else if (data && STILL_WAITS.includes(data.error)) { // the card still waits: said, decided again
            said.textContent = data.message;
            said.hidden = false;
            form.querySelectorAll("button").forEach((b) => { b.disabled = false; });
          } else {
            holder.remove();
            reject(rpcError(REFUSED, (data && data.message) || text("refused"), (data && data.error) || "unavailable"));
          }
        });
      }
      bind();
    });
  }

  // An app call's round: the operation's own consent card (its panel, rendered by the server) on
  // this page; the person answers it here. The page's forms post as they would on the call's own
  // page; what comes back is that page, of which the panel is kept.
  function roundCard(opId) {
    const holder = show("", "round");
    holder.setAttribute("data-operation", opId);
    const heading = document.createElement("p");
    heading.className = "app-round-heading";
    heading.textContent = text("roundHeading");
    const panel = document.createElement("div");
    panel.className = "app-round-panel";
    holder.append(heading, panel);
    holder.addEventListener("submit", async (event) => {
      const form = event.target;
      if (!form || !form.matches || !form.matches("form")) return;
      event.preventDefault();
      const data = new FormData(form);
      if (event.submitter && event.submitter.name) data.append(event.submitter.name, event.submitter.value);
      const answer = await fetch(form.getAttribute("action"), { method: "POST", credentials: "same-origin", body: data });
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const shown = page.getElementById("operation");
      if (shown) panel.innerHTML = shown.innerHTML;
    });
    return holder;
  }

  async function refreshCard(holder, opId) {
    const answer = await fetch(panelUrl(opId), { credentials: "same-origin" });
    if (!answer.ok) return;
    const html = await answer.text();
    const panel = holder.querySelector(".app-round-panel");
    if (!panel.querySelector("form.review")) panel.innerHTML = html; // keep a review being read
  }

  // Wait for an app's operation to end: its final result, or a JSON-RPC error. Its state is read
  // once at first, then again after each push about it (apps-live.js; a slow poll with the socket down).
  async function waitFor(opId) {
    const changes = operationChanges(opId);
    let holder = null;
    let shownRound = -1;
    try {
      for (;;) {
        const answer = await fetch(callUrl(opId), { credentials: "same-origin", headers: { "Accept": "application/json" } });
        const data = await answer.json();
        if (data.status === "completed") return data.result;
        if (data.status === "awaiting_input") {
          if (holder === null) holder = roundCard(opId);
          if (data.round !== shownRound) { shownRound = data.round; await refreshCard(holder, opId); }
        } else if (data.status !== "running") {
          throw rpcError(REFUSED, data.message || text("refused"), data.error || data.status || "failed");
        }
        await changes.next();
      }
    } finally {
      changes.stop();
      if (holder !== null) holder.remove();
    }
  }

  bridge.oncalltool = async (params) => {
    const data = await ask({ method: "tools/call", name: params && params.name, arguments: (params && params.arguments) || {} });
    const opId = data.status === "confirm" ? await confirmation(data.card) : data.operation;
    return await waitFor(opId);
  };
  bridge.onreadresource = async (params) => {
    const data = await ask({ method: "resources/read", uri: params && params.uri });
    return await waitFor(data.operation);
  };
  bridge.onopenlink = async (params) => {
    const data = await ask({ method: "ui/open-link", url: params && params.url });
    show(data.card, "link"); // the person clicks, or not
    return {};
  };
  bridge.ondownloadfile = async (params) => {
    const data = await ask({ method: "ui/download-file", contents: params && params.contents });
    show(data.card, "download"); // the person clicks, or not
    return {};
  };
  const notOffered = (method) => async () => {
    throw rpcError(NOT_OFFERED, method + ": " + text("noModel"), "no_model");
  };
  if (offersToConversation(box)) {
    bridge.onmessage = async (params) => {
      try {
        await handOver("message", params);
      } catch (e) {
        return { isError: true }; // the specification's answer: the host did not deliver it
      }
      return {};
    };
    bridge.onupdatemodelcontext = async (params) => {
      await handOver("context", params); // a refusal: a JSON-RPC error (-32001, its reason)
      return {};
    };
  } else {
    bridge.onmessage = notOffered("ui/message");
    bridge.onupdatemodelcontext = notOffered("ui/update-model-context");
  }
  if (offersSampling(box)) {
    bridge.oncreatesamplingmessage = async (params) => {
      const data = await ask({ method: "sampling/createMessage", params: params || {} });
      return await samplingDecision(data.card);
    };
  } else {
    bridge.oncreatesamplingmessage = notOffered("sampling/createMessage");
  }

  // ui/message, ui/update-model-context on the page of a call the model proposed: the text is handed
  // to the conversation as an offer the person accepts or discards there (mrtrweb.chat.app_offers,
  // CSRF'd, this page's own operation); the app gets an acknowledgement only, never the conversation.
  async function handOver(kind, params) {
    const blocks = (params && Array.isArray(params.content)) ? params.content : [];
    const parts = blocks.filter((b) => b && b.type === "text" && typeof b.text === "string").map((b) => b.text);
    if (kind === "context" && params && params.structuredContent && typeof params.structuredContent === "object") {
      parts.push(JSON.stringify(params.structuredContent));
    }
    const handed = parts.join("\n\n");
    if (!handed.trim()) throw rpcError(REFUSED, text("refused"), "bad_offer");
    const answer = await fetch(box.dataset.offerUrl, {
      method: "POST", credentials: "same-origin",
      headers: { "X-CSRFToken": csrf, "Accept": "application/json" },
      body: new URLSearchParams({ operation: box.dataset.operation, kind: kind, text: handed }),
    });
    let data = null;
    try { data = await answer.json(); } catch (e) { data = null; }
    if (!answer.ok || !data || !data.ok) throw rpcError(REFUSED, text("refused"), (data && data.code) || "refused");
    // shown to the person by the host, as text (never the app's markup)
    const holder = show("", "offer");
    const said = document.createElement("p");
    said.textContent = text(kind === "message" ? "handedMessage" : "handedContext");
    const quoted = document.createElement("pre");
    quoted.className = "app-offer-text";
    quoted.textContent = handed;
    const actions = document.createElement("p");
    const open = document.createElement("a");
    open.className = "app-open-conversation";
    open.href = box.dataset.conversationUrl + "#offer-" + encodeURIComponent(String(data.offer));
    open.textContent = text("openConversation");
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "link app-dismiss";
    dismiss.textContent = text("dismiss");
    dismiss.addEventListener("click", () => holder.remove());
    actions.append(open, " ", dismiss);
    holder.append(said, quoted, actions);
  }
}

// the page offers ui/message and ui/update-model-context when it names its conversation (a call the
// model proposed, the tenant has a model: mrtrweb.views.operation._app_conversation)
function offersToConversation(box) {
  return Boolean(box.dataset.offerUrl && box.dataset.operation && box.dataset.conversationUrl);
}

// the page offers sampling when the tenant has a model and its server may sample
// (mrtrweb.appcalls.sampling.offered, which decides again on each request)
function offersSampling(box) {
  return box.dataset.sampling === "offered";
}

// what the host offers the app (ui/initialize's hostCapabilities)
export function hostCapabilities(box) {
  const offered = { serverTools: {}, serverResources: {}, openLinks: {}, downloadFile: {} };
  if (offersToConversation(box)) {
    offered.message = { text: {} };
    offered.updateModelContext = { text: {}, structuredContent: {} };
  }
  if (offersSampling(box)) offered.sampling = {};
  return offered;
}
