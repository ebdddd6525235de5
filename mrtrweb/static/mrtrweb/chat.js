// A conversation page (issue 32): the model's reply streams in as text over the per-user
// WebSocket; when the conversation changes the page re-reads its messages, rendered server-side
// (Markdown sanitised there); the consent card of a call the person approved is the operation's
// own panel, pushed as on the operation page, answered here. No HTML is built from model or
// server data in this script: streamed text is set as textContent, panels are the server's rendering.
(function () {
  "use strict";
  var root = document.getElementById("chat");
  if (!root) return;
  var convId = root.getAttribute("data-conversation");
  var logUrl = root.getAttribute("data-log-url");
  var streaming = document.querySelector(".chat-streaming");
  var streamText = streaming && streaming.querySelector(".chat-stream-text");
  var live = document.getElementById("live");
  var socket = null, retry = 500, refreshing = null, again = false;
  var FALLBACK_MS = parseInt(root.getAttribute("data-fallback-ms") || "", 10) || 10000;  // the slow re-read while the socket is down
  var fallback = null;

  function said(attr) { return String(root.getAttribute(attr) || ""); }

  // a step the server may have lost (its worker killed) is looked at once more when it would count
  // as interrupted (the log's data-stale-in, seconds), so that Try again shows without a reload
  var staleTimer = null;
  function watchStale() {
    if (staleTimer) { clearTimeout(staleTimer); staleTimer = null; }
    var log = root.querySelector(".chat-log");
    var secs = log ? parseInt(log.getAttribute("data-stale-in") || "", 10) : NaN;
    if (secs >= 0) staleTimer = setTimeout(function () { staleTimer = null; refresh(); }, (secs + 1) * 1000);
  }

  // the person is answering a card: the messages are re-read once they leave it, not before (and
  // not on a timer meanwhile)
  var deferred = false;
  function answering() {
    return root.querySelector(".chat-panel form.card :focus, .chat-panel form.review :focus");
  }
  root.addEventListener("focusout", function () {
    if (!deferred) return;
    setTimeout(function () {  // where the focus went is known after the event
      if (deferred && !answering()) { deferred = false; refresh(); }
    }, 0);
  });

  function refresh() {
    if (refreshing) { again = true; return; }
    if (answering()) { deferred = true; return; }
    refreshing = fetch(logUrl, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        if (answering()) { deferred = true; return; }  // focused meanwhile: later
        root.innerHTML = html;
        var state = root.querySelector(".chat-log");
        root.setAttribute("data-state", state ? state.getAttribute("data-state") : "");
        watchStale();
        var title = state && state.getAttribute("data-title"), heading = document.querySelector(".chat-title");
        if (title && heading && heading.textContent !== title) heading.textContent = title;  // named after the first message
        if (streaming && root.getAttribute("data-state") !== "thinking") {
          streaming.hidden = true;
          if (streamText) streamText.textContent = "";
        }
        var card = root.querySelector(".chat-panel form.card");
        if (card && live) live.textContent = said("data-card-ready");
      })
      .catch(function () {})
      .then(function () {
        refreshing = null;
        if (again) { again = false; setTimeout(refresh, 200); }
      });
  }

  function panelFor(id) {
    var holders = root.querySelectorAll(".chat-operation");
    for (var i = 0; i < holders.length; i++) {
      if (holders[i].getAttribute("data-operation") === id) return holders[i];
    }
    return null;
  }

  // ``own``: the answer to the person's own submit (always shown); a push keeps a card the person
  // is filling in, or a review, unless the round changed
  function applyPanel(holder, html, own) {
    var target = holder.querySelector(".chat-panel");
    if (!target) return;
    var focused = !own && target.contains(document.activeElement) && target.querySelector("form.card, form.review");
    if (focused) {
      var tpl = document.createElement("template");
      tpl.innerHTML = html;
      var incoming = tpl.content.querySelector("input[name=round]");
      var current = target.querySelector("input[name=round]");
      if (incoming && current && incoming.value === current.value) return;
    }
    target.innerHTML = html;
    var review = target.querySelector("form.review .review-title");
    var card = target.querySelector("form.card");
    if (review) review.focus();
    else if (card) { card.focus(); if (live) live.textContent = said("data-card-ready"); }
  }

  function onOperation(msg) {
    var holder = panelFor(String(msg.id));
    if (!holder) return;
    if (typeof msg.html === "string") applyPanel(holder, msg.html);
    else fetch(holder.getAttribute("data-panel-url"), {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) applyPanel(holder, html); });
  }

  // A card's Accept / Decline / Cancel, the review's Send / Change and Stop post as on the
  // operation page; the operation page the answer leads to is read and its panel shown here.
  root.addEventListener("submit", function (e) {
    var form = e.target;
    var holder = form.closest && form.closest(".chat-operation");
    if (!holder) return;
    // only the round's answers (the card, the review) and Stop stay here; Run again and the like
    // start something else: the browser goes to its page
    var action = String(form.getAttribute("action") || "");
    if (!/\/(answer|stop)\/$/.test(action) ||
        action.indexOf("/operations/" + holder.getAttribute("data-operation") + "/") === -1) return;
    e.preventDefault();
    var data = new FormData(form, e.submitter || undefined);
    fetch(form.getAttribute("action") || location.href, {method: "POST", body: data, credentials: "same-origin"})
      .then(function (r) { return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var panel = doc.getElementById("operation");
        var html = panel ? panel.innerHTML : (doc.querySelector(".panel") ? doc.body.innerHTML : null);
        if (html !== null) applyPanel(holder, html, true);
        else refresh();
      })
      .catch(function () { refresh(); });
  });

  // Send stays on this page (its socket open, so the reply streams in); without this script the
  // form posts and the page reloads, and the reply is there once it is done.
  var sendForm = document.querySelector("form.chat-send");
  if (sendForm) sendForm.addEventListener("submit", function (e) {
    if (!socket || socket.readyState !== 1) return;
    e.preventDefault();
    var box = sendForm.querySelector("textarea");
    var error = document.querySelector(".chat-send-error");
    fetch(sendForm.getAttribute("action"), {method: "POST", body: new FormData(sendForm), credentials: "same-origin"})
      .then(function (r) { return r.text().then(function (t) { return [r.ok, t]; }); })
      .then(function (got) {
        if (got[0]) {
          if (box) box.value = "";
          if (error) { error.textContent = ""; error.hidden = true; }
          if (streamText) streamText.textContent = "";
          refresh();
          return;
        }
        var doc = new DOMParser().parseFromString(got[1], "text/html");
        var said = doc.querySelector(".chat-send-error");
        if (error) { error.textContent = said ? said.textContent : ""; error.hidden = !said; }
      })
      .catch(function () { sendForm.submit(); });
  });

  // while the socket is down and the conversation is busy (thinking, waiting), re-read slowly
  function fallbackTick() {
    fallback = null;
    if (socket && socket.readyState === 1) return;
    var state = root.getAttribute("data-state");
    if (state === "thinking" || state === "waiting") refresh();
    fallback = setTimeout(fallbackTick, FALLBACK_MS);
  }

  function connect() {
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + root.getAttribute("data-ws");
    try {
      socket = new WebSocket(url);
    } catch (err) {  // refused before any connection (a CSP's connect-src): the slow re-read only
      root.setAttribute("data-ws-state", "unavailable");
      if (!fallback) fallback = setTimeout(fallbackTick, FALLBACK_MS);
      return;
    }
    socket.onopen = function () {
      retry = 500;
      root.setAttribute("data-ws-state", "open");
      if (fallback) { clearTimeout(fallback); fallback = null; }
      refresh();  // what changed before the socket opened
    };
    socket.onmessage = function (event) {
      var msg;
      try { msg = JSON.parse(event.data); } catch (err) { return; }
      if (!msg || typeof msg !== "object") return;
      if (msg.type === "chat.delta" && msg.conversation === convId && streaming && streamText) {
        streaming.hidden = false;
        streamText.textContent += String(msg.text || "");
      } else if (msg.type === "chat.update" && msg.conversation === convId) {
        refresh();
      } else if (msg.type === "operation") {
        onOperation(msg);
      }
    };
    socket.onclose = function (event) {
      root.setAttribute("data-ws-state", "closed");
      if (!fallback) fallback = setTimeout(fallbackTick, FALLBACK_MS);
      if (event.code === 4401 || event.code === 4403) return;
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }
  watchStale();
  connect();
})();
