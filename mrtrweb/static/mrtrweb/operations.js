// Live updates of one operation page: the server pushes the operation's panel, rendered
// server-side, over the per-user WebSocket. No HTML is built here from server data.
(function () {
  "use strict";
  var root = document.getElementById("operation");
  // the script runs: its "did not load" notice (operation.html) goes
  var missing = document.getElementById("live-script-missing");
  if (missing) missing.parentNode.removeChild(missing);
  if (!root) return;
  var opId = root.getAttribute("data-operation");
  var live = document.getElementById("live");
  // Shown while the socket is closed (a deploy, a Redis restart, a network blip): the texts come
  // from the template (translated), the countdown is set once per attempt (no per-second chatter
  // for screen readers).
  var notice = document.getElementById("live-notice");
  var noticeText = notice && notice.querySelector(".live-notice-text");
  var retryNow = notice && notice.querySelector(".live-notice-retry");
  var retry = 500;       // the next back-off step (ms): doubled per failed attempt, capped at 10 s
  var openedAt = 0;      // when the current socket opened (ms): the back-off restarts only after
                         // a socket that stayed open a while, not one closed right away again
  var timer = null;      // the pending reconnect
  var leaving = false;   // the page is being left: no reconnect, no notice
  var everOpened = false; // a socket of this page opened once: the server does serve WebSockets
  var failures = 0;      // sockets closed in a row without ever opening
  var OPEN_TIMEOUT_MS = 5000;
  var pushes = 0; // operation messages applied so far (a refresh started before one is stale)

  function say(attr, seconds) {
    if (!notice || !noticeText) return;
    noticeText.textContent = String(notice.getAttribute(attr) || "").replace("{s}", String(seconds));
    notice.hidden = false;
  }

  function resumed() {
    if (!notice || notice.hidden) return;
    notice.hidden = true;
    noticeText.textContent = "";
    if (live) live.textContent = String(notice.getAttribute("data-resumed") || "");
  }

  // what the live region says, in the page's language: the template renders it (operation.html)
  function said(attr) {
    return String((notice && notice.getAttribute(attr)) || "");
  }

  function focusCard() {
    var review = root.querySelector("form.review .review-title");
    if (review) {
      review.focus();
      if (live) live.textContent = said("data-review-ready");
      return;
    }
    var card = root.querySelector("form.card");
    if (card) {
      card.focus();
      if (live) live.textContent = said("data-card-ready");
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
    markResource();
    watchResource(socket);  // a read that just completed (pushed, or fetched by refresh)
    if (status === "awaiting_input") focusCard();
    else if (live) {
      // the panel's own status line, in the page's language ("Stopped by you · 1 round", not the stored code)
      var line = root.querySelector(".panel > .status");
      live.textContent = line ? line.textContent.replace(/\s+/g, " ").trim() : status.replace("_", " ");
    }
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
    // the numbers as the server sent them: "3 / 10", or "3" without a total
    var numbers = root.querySelector(".progress-numbers");
    if (numbers && isFinite(value)) {
      numbers.textContent = (isFinite(total) && total > 0) ? value + " / " + total : String(value);
      numbers.hidden = false;
    }
    if (text) text.textContent = String(msg.message || "");
    // a task-augmented call: its status (a known word) and the server's status message, as text
    var task = root.querySelector(".task-status");
    if (task && typeof msg.task_status === "string") {
      var state = task.querySelector(".task-state");
      if (state) state.textContent = msg.task_status;
      task.setAttribute("data-task-status", msg.task_status);
      task.hidden = false;
    }
  }

  // A server's log message during the call (mrtrweb.operations.serverlog): level, logger and data
  // as text, newest last, the last MAX_LOG_LINES kept.
  var MAX_LOG_LINES = 200;
  function showLog(msg) {
    var pane = document.getElementById("server-log");
    var list = pane && pane.querySelector("ol.server-log-lines");
    if (!list) return;
    if (Number(msg.held) > 0) {
      var held = document.createElement("li");
      held.className = "log-held muted";
      held.textContent = (pane.getAttribute("data-held") || "").replace("{n}", String(Number(msg.held)));
      list.appendChild(held);
    }
    if (msg.line === false) {  // the request ended: only how many were held back after the last line
      pane.hidden = false;
      return;
    }
    var line = document.createElement("li");
    line.className = "log-line";
    line.setAttribute("data-level", String(msg.level || "info"));
    var level = document.createElement("span");
    level.className = "log-level";
    level.textContent = String(msg.level || "info");
    line.appendChild(level);
    if (msg.logger) {
      var name = document.createElement("span");
      name.className = "log-logger";
      name.textContent = " " + String(msg.logger);
      line.appendChild(name);
    }
    var data = document.createElement("code");
    data.className = "log-data";
    data.textContent = String(msg.data || "");
    line.appendChild(document.createTextNode(" "));
    line.appendChild(data);
    list.appendChild(line);
    while (list.children.length > MAX_LOG_LINES) list.removeChild(list.firstChild);
    pane.hidden = false;
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

  // A read resource's page follows it (once per socket): the server tells this socket, with no
  // server text, when the resource was updated; the panel's notice then offers "Read again".
  var resourceFollowed = false, resourceUpdated = false;  // kept across panel replacements
  var socket = null;  // the open socket
  function markResource() {
    var box = root.querySelector("[data-watch-resource]");
    if (!box) return;
    if (resourceFollowed) box.setAttribute("data-following", "1");
    if (resourceUpdated) box.hidden = false;
  }

  function watchResource(ws) {
    if (!ws || ws.readyState !== WebSocket.OPEN || ws.watchingResource || !root.querySelector("[data-watch-resource]")) return;
    ws.watchingResource = true;
    ws.send(JSON.stringify({type: "resource.watch", operation: opId}));
  }

  // For the page's other scripts (an MCP App's host, apps-live.js): that one of the person's
  // operations changed ({id, status}: nothing else of the push), and whether the socket is open.
  function announce(msg) {
    var detail = {id: msg.id, status: String(msg.status || "")};
    setTimeout(function () {  // after this push is applied
      document.dispatchEvent(new CustomEvent("mrtrweb:operation", {detail: detail}));
    }, 0);
  }
  function liveState(state) {
    document.dispatchEvent(new CustomEvent("mrtrweb:live", {detail: {state: state}}));
  }

  function connect() {
    timer = null;
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws;
    try {
      ws = new WebSocket(scheme + location.host + root.getAttribute("data-ws"));
    } catch (e) {
      closed({code: 0});  // refused before any connection (the page's CSP connect-src): a failed open
      return;
    }
    // a socket neither open nor closed after a while never will be (a CSP that blocks it fires no
    // event in Chromium; a proxy may hold the handshake): counted as a failed open
    var opening = setTimeout(function () {
      if (ws.readyState === WebSocket.OPEN) return;
      ws.onclose = null;
      try { ws.close(); } catch (e) { /* closing a socket that never connected */ }
      closed({code: 0});
    }, OPEN_TIMEOUT_MS);
    ws.onopen = function () {
      clearTimeout(opening);
      openedAt = Date.now();
      everOpened = true;
      failures = 0;
      root.setAttribute("data-ws-state", "open");
      liveState("open");
      resumed();
      socket = ws;
      ws.send(JSON.stringify({type: "pending.watch"}));  // the navigation's "Waiting for you" (nav.js)
      watchResource(ws);
      refresh();  // what was pushed while the socket was closed
    };
    ws.onmessage = function (ev) {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      if (msg && msg.type === "operation" && typeof msg.id === "string") announce(msg);
      if (msg && msg.type === "operation" && msg.id === opId && typeof msg.html === "string") {
        pushes += 1;
        apply(msg.html, String(msg.status || ""));
      } else if (msg && msg.type === "operation" && msg.id === opId && msg.html === null) {
        refresh();  // a panel too large to push: fetched instead
      } else if (msg && msg.type === "progress" && msg.id === opId) {
        showProgress(msg);
      } else if (msg && msg.type === "resource.watching" && msg.operation === opId) {
        resourceFollowed = true;  // the server tells us
        markResource();
      } else if (msg && msg.type === "resource" && msg.operation === opId) {
        resourceUpdated = true;  // "A newer version is available — Read again"
        markResource();
      } else if (msg && msg.type === "log" && msg.id === opId) {
        showLog(msg);
      } else if (msg && msg.type === "pending" && window.mrtrwebPending) {
        window.mrtrwebPending(msg);
      }
    };
    ws.onclose = function (ev) {
      clearTimeout(opening);
      closed(ev);
    };
  }

  // a socket closed, or one that never opened
  function closed(ev) {
    if (ev.code === 4403 || ev.code === 4401) {
      // The person's access or this session ended somewhere: reload, so the page shows what is
      // left (or 404, or the sign-in page).
      root.setAttribute("data-ws-state", "revoked");
      location.reload();
      return;
    }
    root.setAttribute("data-ws-state", "closed");
    liveState("closed");
    if (!openedAt) failures += 1;
    if (openedAt && Date.now() - openedAt > 5000) retry = 500;
    openedAt = 0;
    if (leaving) return;
    // back off with jitter (half the step, plus up to the other half at random), so that the
    // pages of a whole worker do not all come back at the same instant
    var delay = Math.round(retry / 2 + Math.random() * retry / 2);
    retry = Math.min(retry * 2, 10000);
    // never opened, twice in a row: no WebSocket here at all (a WSGI server), not a blip
    if (!everOpened && failures >= 2) {
      root.setAttribute("data-ws-state", "unavailable");
      say("data-unavailable", 0);
    } else {
      say("data-paused", Math.max(1, Math.ceil(delay / 1000)));
    }
    timer = setTimeout(connect, delay);
  }

  if (retryNow) {
    retryNow.addEventListener("click", function () {
      if (timer === null) return;  // a connection is being opened already
      clearTimeout(timer);
      say("data-connecting", 0);
      connect();
    });
  }
  window.addEventListener("pagehide", function () { leaving = true; });
  window.addEventListener("pageshow", function (ev) {
    if (ev.persisted) { leaving = false; connect(); }  // back from the back/forward cache
  });

  if (root.querySelector("form.card")) focusCard();
  connect();
})();

// A long result is folded after a screenful (issue 28): "Show all" unfolds it (and "Show less"
// folds it again). Delegated, so a panel pushed in later works the same.
(function () {
  "use strict";
  document.addEventListener("click", function (ev) {
    var button = ev.target && ev.target.closest ? ev.target.closest("button.show-all") : null;
    if (!button) return;
    var result = document.getElementById(button.getAttribute("aria-controls"));
    if (!result) return;
    var folded = result.classList.toggle("folded");
    button.setAttribute("aria-expanded", folded ? "false" : "true");
    button.textContent = folded ? (button.getAttribute("data-show") || button.textContent)
                                : (button.getAttribute("data-less") || button.textContent);
  });
})();
