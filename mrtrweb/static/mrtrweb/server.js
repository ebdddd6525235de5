// A server page that follows the server's listing: when the server says its tools, prompts or
// resources changed (notifications/*/list_changed, pushed over the per-user WebSocket as
// {"type": "listing", "server": N, "kind": ...}, no server text), the page fetches itself again
// and puts the server-rendered listing in place. No HTML is built here from server data.
(function () {
  "use strict";
  var root = document.getElementById("server-listing");
  if (!root) return;
  var serverId = Number(root.getAttribute("data-server"));
  var notice = document.querySelector(".listing-changed");
  var retry = 1000;      // reconnect back-off (ms), doubled per failed attempt, capped at 30 s
  var leaving = false;
  var fetching = false, again = false;  // one re-read at a time; a push meanwhile asks for one more

  // The filter box: hides the listed items whose text (name, title, description, badges, as the
  // page shows them) does not contain what the person typed; kept across re-reads.
  var filterBox = document.getElementById("listing-filter");
  var filterCount = document.querySelector(".filter-count");
  function applyFilter() {
    if (!filterBox) return;
    var q = filterBox.value.trim().toLowerCase();
    var items = root.querySelectorAll("li.listed");
    var shown = 0;
    for (var i = 0; i < items.length; i++) {
      var hit = !q || items[i].textContent.toLowerCase().indexOf(q) !== -1;
      items[i].hidden = !hit;
      if (hit) shown++;
    }
    if (filterCount) filterCount.textContent = q ? shown + " / " + items.length : "";
  }
  if (filterBox) filterBox.addEventListener("input", applyFilter);

  function reread() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(location.href, {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("server-listing");
        if (!fresh) return;
        root.innerHTML = fresh.innerHTML;
        applyFilter();
        var count = Number(root.getAttribute("data-rereads") || "0") + 1;
        root.setAttribute("data-rereads", String(count));
        if (notice) notice.hidden = false;
      })
      .catch(function () {})
      .then(function () {
        fetching = false;
        if (again) { again = false; reread(); }
      });
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + location.host + root.getAttribute("data-ws"));
    ws.onopen = function () {
      retry = 1000;
      root.setAttribute("data-ws-state", "open");
      ws.send(JSON.stringify({type: "pending.watch"}));  // the navigation's "Waiting for you" (nav.js)
    };
    ws.onmessage = function (ev) {
      var msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      if (msg && msg.type === "listing" && msg.server === serverId) reread();
      else if (msg && msg.type === "pending" && window.mrtrwebPending) window.mrtrwebPending(msg);
    };
    ws.onclose = function (ev) {
      root.setAttribute("data-ws-state", "closed");
      if (leaving || ev.code === 4401 || ev.code === 4403) return;  // signed out / access ended
      var delay = Math.round(retry / 2 + Math.random() * retry / 2);
      retry = Math.min(retry * 2, 30000);
      setTimeout(connect, delay);
    };
  }

  window.addEventListener("pagehide", function () { leaving = true; });
  connect();
})();
