// Copy buttons of short ids (templatetags/mrtrweb_ids.py): each button is rendered hidden with the
// full value in data-copy; here it is shown and copies that value (navigator.clipboard, or a
// selected textarea and execCommand where the clipboard API is missing or refused). The live
// region says "Copied" (the text comes from the button's data-copied, translated server-side).
(function () {
  "use strict";
  var live = document.getElementById("live");

  function fallback(value) {
    var area = document.createElement("textarea");
    area.value = value;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.top = "-1000px";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    return ok;
  }

  function copied(button, ok) {
    button.setAttribute("data-state", ok ? "copied" : "failed");
    if (live) live.textContent = String(button.getAttribute(ok ? "data-copied" : "data-failed") || "");
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.copy[data-copy]") : null;
    if (!button) return;
    var value = button.getAttribute("data-copy") || "";
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(value).then(function () { copied(button, true); },
        function () { copied(button, fallback(value)); });
    } else {
      copied(button, fallback(value));
    }
  });

  var buttons = document.querySelectorAll("button.copy[data-copy]");
  for (var i = 0; i < buttons.length; i++) buttons[i].hidden = false;
})();
