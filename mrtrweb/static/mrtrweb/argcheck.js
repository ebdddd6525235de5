// The JSON box of a tool's arguments (mrtrweb/tool.html): as the person types, a parse-only check
// (debounced) says whether the text is a JSON object. The server's check against the tool's schema
// at "Call tool" stays the truth; nothing is posted from here. Texts come translated from the
// status element's data attributes.
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
  }

  box.addEventListener("input", function () {
    if (timer) clearTimeout(timer);
    status.textContent = status.getAttribute("data-checking");
    timer = setTimeout(check, 300);
  });
  check();
})();
