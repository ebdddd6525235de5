// A server's settings page: while one authorization is chosen, the fields that belong only to the
// others are hidden (each such field's widget names its modes in data-auth-modes, set by
// mrtrweb.authz.forms.ServerAuthForm). Progressive enhancement: without this script every field
// shows and the form works the same; hidden fields are still submitted (the form ignores them).
(function () {
  "use strict";
  var form = document.querySelector("form.server-settings");
  if (!form) return;
  var select = form.querySelector("select[name$='auth_mode']");
  if (!select) return;
  var fields = form.querySelectorAll("[data-auth-modes]");
  function apply() {
    var mode = select.value;
    for (var i = 0; i < fields.length; i++) {
      var holder = fields[i].closest(".field") || fields[i];
      var modes = (fields[i].getAttribute("data-auth-modes") || "").split(" ");
      holder.hidden = modes.indexOf(mode) < 0;
    }
  }
  select.addEventListener("change", apply);
  apply();
})();
