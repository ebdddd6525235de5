// The JSON box of a tool's arguments (mrtrweb/tool.html): as the person types (debounced), the text
// is parsed here; a JSON object is then posted to the tool's page with check_only=1 (CSRF token of
// the form), which checks it against the tool's input schema exactly as "Call tool" does and sends
// nothing (mrtrweb.views.calls._checked_only); its verdict is shown as text. "Call tool" checks again
// and stays the truth. Texts come translated from the status element's data attributes.
(function () {
  "use strict";
  var box = document.querySelector(".call-form textarea[name=arguments]");
  var status = document.querySelector(".call-form .json-check");
  if (!box || !status) return;
  var timer = null;

  function check() {
    var text = box.value;
    var value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      status.setAttribute("data-state", "bad");
      status.textContent = status.getAttribute("data-bad") + " " + String(e.message || "").slice(0, 200);
      return;
    }
    var ok = value !== null && typeof value === "object" && !Array.isArray(value);
    status.setAttribute("data-state", ok ? "ok" : "bad");
    status.textContent = status.getAttribute(ok ? "data-ok" : "data-not-object");
    if (ok) checkSchema(text);
  }

  var asked = 0;
  function checkSchema(text) {
    var form = box.form, token = form && form.querySelector("input[name=csrfmiddlewaretoken]");
    if (!form || !token || !window.fetch || !window.FormData) return;
    var mine = ++asked, body = new FormData();
    body.append("csrfmiddlewaretoken", token.value);
    body.append("arguments", text);
    body.append("check_only", "1");
    fetch(window.location.href, {method: "POST", body: body, credentials: "same-origin",
                                 headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (answer) {
        if (mine !== asked || !answer || answer.ok === null || answer.ok === undefined) return;
        status.setAttribute("data-state", answer.ok ? "ok" : "bad");
        status.textContent = answer.ok ? status.getAttribute("data-schema-ok")
          : status.getAttribute("data-schema-bad") + " " + String(answer.error || "").slice(0, 500);
      })
      .catch(function () {});
  }

  box.addEventListener("input", function () {
    if (timer) clearTimeout(timer);
    status.textContent = status.getAttribute("data-checking");
    timer = setTimeout(check, 300);
  });
  check();
})();
