// Times in the viewer's own zone: every <time class="when" datetime="…Z"> the server rendered in UTC
// ("2026-12-02 04:22:43 UTC", see templatetags/mrtrweb_time.py) is rewritten as the same instant in
// the browser's zone, naming it ("2026-12-02 05:22:43 CET"); its title keeps the UTC text. Content
// pushed later (an operation's panel) is rewritten as it arrives. Only digits and the zone name
// Intl gives are written; nothing is read from the page but the datetime attribute.
(function () {
  "use strict";
  if (typeof Intl === "undefined" || !Intl.DateTimeFormat) return;
  var format;
  try {
    format = new Intl.DateTimeFormat(navigator.language || undefined, {
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
      second: "2-digit", hourCycle: "h23", timeZoneName: "short", numberingSystem: "latn"
    });  // the viewer's language names the zone; the digits stay Latin in the ISO-like shape
  } catch (e) {
    return;
  }

  function text(date, style) {
    var parts = {};
    format.formatToParts(date).forEach(function (p) { parts[p.type] = p.value; });
    if (!parts.year || !parts.timeZoneName) return null;
    var hour = parts.hour === "24" ? "00" : parts.hour;
    var clock = hour + ":" + parts.minute + ":" + parts.second + " " + parts.timeZoneName;
    return style === "time" ? clock : parts.year + "-" + parts.month + "-" + parts.day + " " + clock;
  }

  function localize(root) {
    var times = root.querySelectorAll ? root.querySelectorAll("time.when[datetime]") : [];
    for (var i = 0; i < times.length; i++) {
      var el = times[i];
      if (el.getAttribute("data-local") === "1") continue;
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) continue;
      var shown = text(date, el.getAttribute("data-when"));
      if (!shown) continue;
      el.textContent = shown;
      el.setAttribute("data-local", "1");
    }
  }

  function start() {
    localize(document);
    if (typeof MutationObserver === "undefined") return;
    new MutationObserver(function (changes) {
      for (var i = 0; i < changes.length; i++) {
        for (var j = 0; j < changes[i].addedNodes.length; j++) {
          var node = changes[i].addedNodes[j];
          if (node.nodeType !== 1) continue;
          if (node.matches && node.matches("time.when[datetime]")) localize(node.parentNode || document);
          else localize(node);
        }
      }
    }).observe(document.body, { childList: true, subtree: true });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
