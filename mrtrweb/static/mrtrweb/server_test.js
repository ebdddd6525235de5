// The "Test" button of the Add and Edit pages of a server (issue 29; mrtrweb.serverconfig.probe_view):
// posts the form's URL and protocol (and the saved server's id, on Edit) with the page's CSRF token
// to the button's data-url, and puts the report the product rendered (server text escaped there)
// into #server-test-report. Nothing is saved; the button is disabled while the test runs.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.test-server[data-url]") : null;
    if (!button) return;
    event.preventDefault();
    var form = button.form;
    var out = document.getElementById("server-test-report");
    var data = new FormData();
    ["csrfmiddlewaretoken", "url", "protocol"].forEach(function (name) {
      var field = form.elements.namedItem(name);
      if (field) data.append(name, field.value);
    });
    if (button.getAttribute("data-server")) data.append("server", button.getAttribute("data-server"));
    button.disabled = true;
    if (out) { out.setAttribute("aria-busy", "true"); out.textContent = String(button.getAttribute("data-testing") || ""); }
    fetch(button.getAttribute("data-url"), {method: "POST", body: data, credentials: "same-origin",
                                             headers: {"Accept": "text/html"}})
      .then(function (response) { return response.text(); })
      .then(function (html) { if (out) out.innerHTML = html; })
      .catch(function () { if (out) out.textContent = String(button.getAttribute("data-failed") || ""); })
      .then(function () { button.disabled = false; if (out) out.removeAttribute("aria-busy"); });
  });
})();
