// "Waiting for you" in the navigation of every page: how many of the person's rounds await their
// answer (rendered server-side) kept current over the per-user WebSocket, with a link to each
// waiting round. The socket asks for it ({"type": "pending.watch"}) and is sent the count and the
// list whenever one of the person's operations enters or leaves "awaiting input". On the
// operation and server pages the page's own socket carries it (operations.js, server.js call
// window.mrtrwebPending). Everything pushed is inserted as text: no HTML is built from it.
(function () {
  "use strict";
  var nav = document.getElementById("nav-pending");
  if (!nav) return;
  var countEl = nav.querySelector(".nav-pending-count");
  var list = nav.querySelector(".nav-pending-rounds");
  var live = document.getElementById("live");
  var known = null;  // ids of the rounds last pushed (null before the first push: nothing is "new")
  // the operation this page shows, if any: its own round is announced by its card (operations.js)
  var here = document.getElementById("operation");
  here = here ? here.getAttribute("data-operation") : null;

  // A time in the viewer's zone, the zone named ("14:05 CET"); the ISO text when it cannot be read.
  // A round's expiry as the other times of the app: UTC text ("2026-12-02 04:22:43 UTC", also its
  // title) in a <time class="when">, which times.js rewrites into the viewer's zone as it arrives.
  function utcText(iso) {
    var d = new Date(iso);
    if (!iso || isNaN(d.getTime())) return "";
    return d.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  // Only a path of this site is a link target (never another origin, never a script URL).
  // a link of this site only: a path, resolved against this page's origin and still on it (a
  // "/\t/host" the URL parser would read as "//host" is refused too)
  function samePath(url) {
    url = String(url || "");
    if (url.charAt(0) !== "/") return "";
    try {
      var parsed = new URL(url, window.location.origin);
      return parsed.origin === window.location.origin ? parsed.pathname + parsed.search : "";
    } catch (e) {
      return "";
    }
  }

  function apply(msg) {
    if (!msg || msg.type !== "pending") return;
    var count = Number(msg.count);
    if (!isFinite(count) || count < 0) return;
    count = Math.floor(count);
    countEl.textContent = String(count);
    nav.setAttribute("data-count", String(count));
    if (count > 0) nav.classList.add("has-waiting"); else nav.classList.remove("has-waiting");
    var rounds = Array.isArray(msg.rounds) ? msg.rounds : [];
    while (list.firstChild) list.removeChild(list.firstChild);
    var ids = {}, fresh = false;
    rounds.forEach(function (r) {
      if (!r || typeof r.id !== "string") return;
      ids[r.id] = true;
      if (known && !known[r.id] && r.id !== here) fresh = true;
      var li = document.createElement("li");
      li.setAttribute("data-operation", r.id);
      var a = document.createElement("a");
      a.href = samePath(r.url);
      a.textContent = String(r.tool || "");
      li.appendChild(a);
      var server = document.createElement("span");
      server.className = "muted";
      server.textContent = " " + String(r.server || "");
      li.appendChild(server);
      if (r.expires && utcText(String(r.expires))) {
        var exp = document.createElement("span");
        exp.className = "expires";
        exp.textContent = " " + String(list.getAttribute("data-expires") || "") + " ";
        var t = document.createElement("time");
        var utc = utcText(String(r.expires));
        t.className = "when";
        t.setAttribute("datetime", new Date(String(r.expires)).toISOString());
        t.setAttribute("data-when", "datetime");
        t.setAttribute("title", utc);
        t.textContent = utc;
        exp.appendChild(t);
        li.appendChild(exp);
      }
      list.appendChild(li);
    });
    if (known && fresh && live) live.textContent = String(nav.getAttribute("data-announce-one") || "");
    known = ids;
  }
  window.mrtrwebPending = apply;

  // the operation and server pages' scripts own the page's socket and pass "pending" on
  if (document.getElementById("operation") || document.getElementById("server-listing")) return;

  var retry = 1000;      // reconnect back-off (ms), doubled per failed attempt, capped at 30 s
  var leaving = false;
  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + location.host + nav.getAttribute("data-ws"));
    ws.onopen = function () {
      retry = 1000;
      nav.setAttribute("data-ws-state", "open");
      ws.send(JSON.stringify({type: "pending.watch"}));
    };
    ws.onmessage = function (ev) {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      apply(msg);
    };
    ws.onclose = function (ev) {
      nav.setAttribute("data-ws-state", "closed");
      // signed out: nothing more to show. Access ended somewhere (4403): the rounds left are
      // re-read when the socket is back; the server-rendered count stays meanwhile.
      if (leaving || ev.code === 4401) return;
      var delay = Math.round(retry / 2 + Math.random() * retry / 2);
      retry = Math.min(retry * 2, 30000);
      setTimeout(connect, delay);
    };
  }
  window.addEventListener("pagehide", function () { leaving = true; });
  window.addEventListener("pageshow", function (ev) {
    if (ev.persisted) { leaving = false; connect(); }  // back from the back/forward cache
  });
  connect();
})();
