// The MCP Apps sandbox proxy (issue 31, docs/apps.md), served on the sandbox origin only, framed only
// by the site named in <body data-site> (the page's CSP says frame-ancestors <site>).
// Handshake (the specification's web-host design): post ui/notifications/sandbox-proxy-ready to the
// parent; on ui/notifications/sandbox-resource-ready load the app's one-time document (its CSP is an
// HTTP header of that document) in the inner frame; then relay messages both ways, nothing else
// (the app's: only JSON, at most MAX_MESSAGE_CHARS characters of it).
(function () {
  "use strict";
  var body = document.body;
  var site = body.getAttribute("data-site") || "";
  var prefix = body.getAttribute("data-document-prefix") || "";
  function refuse(why) {
    body.textContent = "This page runs only inside the site that embeds it.";
    throw new Error("sandbox proxy refused: " + why);
  }
  if (window.top === window.self) refuse("top-level");
  var ancestors = window.location.ancestorOrigins;
  if (ancestors && ancestors.length && ancestors[0] !== site) refuse("embedded by another origin");
  if (document.referrer && document.referrer.indexOf(site + "/") !== 0) refuse("referrer of another origin");
  try {
    // a real cross-origin parent cannot be read from here
    if (window.parent.location.href !== undefined) refuse("the parent is readable: not isolated");
  } catch (e) { /* expected */ }

  var inner = null;
  var PROXY_READY = "ui/notifications/sandbox-proxy-ready";
  var RESOURCE_READY = "ui/notifications/sandbox-resource-ready";
  // the largest message of the app relayed to the site (characters of its JSON); larger ones are dropped
  var MAX_MESSAGE_CHARS = 8 * 1024 * 1024;
  function bounded(data) {
    try { return JSON.stringify(data).length <= MAX_MESSAGE_CHARS; } catch (e) { return false; }
  }
  var PERMISSIONS = { camera: "camera", microphone: "microphone", geolocation: "geolocation", clipboardWrite: "clipboard-write" };

  function load(params) {
    if (inner) return; // one app per proxy
    var path = params && params["mrtrweb/document"];
    if (typeof path !== "string" || path.indexOf(prefix) !== 0 || !/^[A-Za-z0-9_-]{20,100}\/$/.test(path.slice(prefix.length))) {
      return; // only a document the site handed over, on this origin
    }
    inner = document.createElement("iframe");
    // no allow-same-origin: the app runs in an opaque origin of its own, never the sandbox origin
    // itself -- so no app reads what another server's app keeps in the browser (storage, cookies)
    // or reaches into this page
    inner.setAttribute("sandbox", "allow-scripts allow-forms");
    var allow = [];
    var granted = params["mrtrweb/allow"];
    if (typeof granted === "string") {
      granted.split(";").forEach(function (feature) {
        feature = feature.trim();
        for (var name in PERMISSIONS) if (PERMISSIONS[name] === feature) allow.push(feature);
      });
    }
    if (allow.length) inner.setAttribute("allow", allow.join("; "));
    inner.src = path;
    var loads = 0;
    inner.addEventListener("load", function () {
      // the app navigated its frame away from its document: what it now shows is not the app the
      // site handed over, and nothing more is relayed to it
      if (++loads > 1 && inner) { inner.remove(); inner = null; }
    });
    body.appendChild(inner);
  }

  window.addEventListener("message", function (event) {
    if (event.source === window.parent) {
      if (event.origin !== site) return; // forged: not the embedding site
      var data = event.data;
      if (data && data.method === RESOURCE_READY) { load(data.params); return; }
      // "*": the app's origin is opaque; the frame holds the one document handed over (see load)
      if (inner && inner.contentWindow) inner.contentWindow.postMessage(data, "*");
    } else if (inner && event.source === inner.contentWindow) {
      if (!bounded(event.data)) return; // dropped: past MAX_MESSAGE_CHARS, or not JSON at all
      window.parent.postMessage(event.data, site);
    }
  });
  window.parent.postMessage({ jsonrpc: "2.0", method: PROXY_READY, params: {} }, site);
})();
