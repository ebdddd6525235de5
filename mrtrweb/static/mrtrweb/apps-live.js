// Waiting for an operation to change, on the host page of an MCP App (issue 31, docs/apps.md):
// the product pushes every change of the person's operations over the per-user WebSocket
// ({"type": "operation", "id", "status", ...}, app-initiated ones included: their user is the
// page's person); operations.js, which holds the page's socket, re-announces each as the DOM event
// "mrtrweb:operation" {id, status}, and the socket's state as "mrtrweb:live" {state: "open" | "closed"}.
// The host then asks the site for what changed (an app call's outcome, the call's own outcome)
// only after a push: no polling while the socket is open. With the socket down (or never up: a
// WSGI server, a CSP that refuses it), it asks every FALLBACK_MS instead; with it open, it asks
// anyway after GUARD_MS without a push (the channel layer does not promise delivery), and at once
// when the socket opens again (pushes may have been missed while it was closed).
export const OPERATION_EVENT = "mrtrweb:operation";
export const LIVE_EVENT = "mrtrweb:live";
const FALLBACK_MS = 2000;
const GUARD_MS = 30000;

function liveOpen() {
  const root = document.getElementById("operation");
  return Boolean(root) && root.getAttribute("data-ws-state") === "open";
}

// Changes of operation `opId`, from now on: `next()` resolves (with the pushed {id, status}, or
// null) once it changed since the last `next()` -- at once when it already did -- or after the
// fallback/guard time; `stop()` ends the watch.
export function operationChanges(opId) {
  let changed = false;
  let latest = null;
  let wake = null;
  let timer = null;
  const poke = (detail) => {
    changed = true;
    if (detail) latest = detail;
    if (wake) wake();
  };
  const onPush = (event) => { if (event.detail && event.detail.id === String(opId)) poke(event.detail); };
  const onLive = (event) => {
    if (event.detail && event.detail.state === "open") poke(null);
    else if (wake) { clearTimeout(timer); timer = setTimeout(wake, FALLBACK_MS); } // down: ask soon
  };
  document.addEventListener(OPERATION_EVENT, onPush);
  document.addEventListener(LIVE_EVENT, onLive);
  return {
    next() {
      return new Promise((resolve) => {
        const finish = () => {
          clearTimeout(timer);
          wake = null;
          const detail = latest;
          latest = null;
          changed = false;
          resolve(detail);
        };
        if (changed) { finish(); return; }
        wake = finish;
        timer = setTimeout(finish, liveOpen() ? GUARD_MS : FALLBACK_MS);
      });
    },
    stop() {
      clearTimeout(timer);
      document.removeEventListener(OPERATION_EVENT, onPush);
      document.removeEventListener(LIVE_EVENT, onLive);
    },
  };
}
