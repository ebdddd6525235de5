// Suggestions as the person types in a prompt's or resource template's form (issue 28,
// mrtrweb.views.completions): 300 ms after the last keystroke in a field, the form's values go to
// the suggestions endpoint (a POST with the page's CSRF token: typed values never in a URL); the answer fills the field's <datalist>, each option's value set as a
// DOM property (never parsed as HTML). A suggestion is only a suggestion: what is sent is checked
// on the server as any typed value. No answer, an error or a refusal: no suggestions.
(function () {
  "use strict";
  var DEBOUNCE_MS = 300;
  var MAX_OPTIONS = 100;
  var form = document.querySelector("form[data-complete]");
  if (!form || !window.fetch) return;
  var base = form.getAttribute("data-complete");
  var fields = form.querySelectorAll("input[type=text][name^='arg-'], input:not([type])[name^='arg-']");
  Array.prototype.forEach.call(fields, function (input, index) {
    var list = document.createElement("datalist");
    list.id = "complete-" + index;
    form.appendChild(list);
    input.setAttribute("list", list.id);
    input.setAttribute("autocomplete", "off");
    var timer = null, asked = 0;
    function ask() {
      timer = null;
      var mine = ++asked;
      // what was typed goes in the body of a CSRF-checked POST, never in the URL (access logs)
      var query = "&field=" + encodeURIComponent(input.name);
      var body = new URLSearchParams();
      Array.prototype.forEach.call(fields, function (other) {
        if (other.value || other === input) body.append(other.name, other.value);
      });
      var token = form.querySelector("input[name=csrfmiddlewaretoken]");
      fetch(base + query, {method: "POST", credentials: "same-origin", body: body,
                           headers: {"Accept": "application/json", "X-CSRFToken": token ? token.value : ""}})
        .then(function (r) { return r.ok ? r.json() : {values: []}; })
        .then(function (answer) {
          if (mine !== asked) return;  // a later ask is on its way: its answer counts
          while (list.firstChild) list.removeChild(list.firstChild);
          var values = answer && Array.isArray(answer.values) ? answer.values.slice(0, MAX_OPTIONS) : [];
          values.forEach(function (value) {
            if (typeof value !== "string") return;
            var option = document.createElement("option");
            option.value = value;
            list.appendChild(option);
          });
          form.setAttribute("data-suggestions", String(list.children.length));
        })
        .catch(function () {});
    }
    input.addEventListener("input", function () {
      if (timer) clearTimeout(timer);
      timer = setTimeout(ask, DEBOUNCE_MS);
    });
  });
})();
