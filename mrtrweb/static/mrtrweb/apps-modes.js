// Display modes of an MCP App (issue 31, docs/apps.md): "inline" (the default) and "fullscreen"
// within the page: the app's holder covers the window below the host's own bar ("Leave full
// screen", also Escape), which the app cannot cover or restyle. ui/request-display-mode is answered
// with the mode actually applied, as the specification asks: a mode this host does not offer
// ("pip", anything else) leaves the current one. Each change is a ui/notifications/host-context-changed
// (displayMode). No protocol is written here: the AppBridge's handler slot and setHostContext.
export const MODES = ["inline", "fullscreen"];

export function displayModes(bridge, holder, frame, context, inlineHeight) {
  let mode = "inline";
  const leave = holder.querySelector(".app-inline");
  function apply(wanted) {
    if (!MODES.includes(wanted) || wanted === mode) return mode;
    mode = wanted;
    holder.classList.toggle("fullscreen", mode === "fullscreen");
    leave.hidden = mode !== "fullscreen";
    frame.style.height = mode === "fullscreen" ? "" : inlineHeight() + "px";
    if (mode === "fullscreen") leave.focus();
    bridge.setHostContext(context(mode));
    return mode;
  }
  bridge.onrequestdisplaymode = async (params) => ({ mode: apply(params && params.mode) });
  leave.addEventListener("click", () => apply("inline"));
  document.addEventListener("keydown", (e) => { if (e.key === "Escape" && mode === "fullscreen") apply("inline"); });
  return { current: () => mode, leave: () => apply("inline") };
}
