// Live updates of one operation page: the server pushes the operation's panel, rendered
// server-side, over the per-user WebSocket. No HTML is built here from server data.
(function () {
  "use strict";
  var root = document.getElementById("operation");
  if (!root) return;
  var opId = root.getAttribute("data-operation");
  var live = document.getElementById("live");
  var retry = 500;
  var pushes = 0; // operation messages applied so far (a refresh started before one is stale)

  function focusCard() {
    var review = root.querySelector("form.review .review-title");
    if (review) {
      review.focus();
      if (live) live.textContent = "Review your answer before sending.";
      return;
    }
    var card = root.querySelector("form.card");
    if (card) {
      card.focus();
      if (live) live.textContent = "A server asks for your input.";
    }
  }

  function apply(html, status) {
    var hadCard = !!root.querySelector("form.card");
    var wasFocusedInside = root.contains(document.activeElement) && hadCard;
    // Keep a card the person is filling in, or the review of their answer (which only the
    // server's response to Send or Change replaces): replace only when the round changed.
    var reviewing = !!root.querySelector("form.review");
    if (hadCard && (wasFocusedInside || reviewing) && status === "awaiting_input") {
      var tpl = document.createElement("template");
      tpl.innerHTML = html;
      var incoming = tpl.content.querySelector("input[name=round]");
      var current = root.querySelector("input[name=round]");
      if (incoming && current && incoming.value === current.value) return;
    }
    root.innerHTML = html;
    root.setAttribute("data-status", status);
    if (status === "awaiting_input") focusCard();
    else if (live) live.textContent = "Status: " + status.replace("_", " ");
  }

  // Progress of a call in flight: numbers into a <progress>, the server's message as text only.
  function showProgress(msg) {
    var bar = root.querySelector("progress.call-progress");
    var text = root.querySelector(".progress-message");
    if (!bar) return;
    var value = Number(msg.progress), total = Number(msg.total);
    if (isFinite(total) && total > 0) { bar.max = total; bar.value = Math.min(value, total); }
    else { bar.removeAttribute("value"); }
    bar.hidden = false;
    if (text) text.textContent = String(msg.message || "");
  }

  function refresh() {
    var seen = pushes;
    fetch(root.getAttribute("data-panel-url"), {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        // A push that arrived meanwhile is newer than this response: keep it.
        if (html !== null && seen === pushes) {
          var tpl = document.createElement("template");
          tpl.innerHTML = html;
          var sec = tpl.content.querySelector("section.panel");
          apply(html, sec ? sec.getAttribute("data-status") : "");
        }
      })
      .catch(function () {});
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + location.host + root.getAttribute("data-ws"));
    ws.onopen = function () { retry = 500; root.setAttribute("data-ws-state", "open"); refresh(); };
    ws.onmessage = function (ev) {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      if (msg && msg.type === "operation" && msg.id === opId && typeof msg.html === "string") {
        pushes += 1;
        apply(msg.html, String(msg.status || ""));
      } else if (msg && msg.type === "operation" && msg.id === opId && msg.html === null) {
        refresh();  // a panel too large to push: fetched instead
      } else if (msg && msg.type === "progress" && msg.id === opId) {
        showProgress(msg);
      }
    };
    ws.onclose = function (ev) {
      if (ev.code === 4403 || ev.code === 4401) {
        // The person's access or this session ended somewhere: reload, so the page shows what is
        // left (or 404, or the sign-in page).
        root.setAttribute("data-ws-state", "revoked");
        location.reload();
        return;
      }
      root.setAttribute("data-ws-state", "closed");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }

  if (root.querySelector("form.card")) focusCard();
  connect();
})();
