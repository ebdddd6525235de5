"""Support of the MCP Apps browser tests against the hostile app server (public names): a signed-in
page recording every message each frame receives, every request and every new page."""

from __future__ import annotations

from tests.browser import OP_URL
from tests.mcpapps import hostile_apps

# Recorded in every frame at document start: each message it receives (a huge one by its length
# only) and whom from: its parent ("parent"), a frame of its own ("child"), or another window.
RECORDER = """
window.addEventListener("message", (e) => {
  let text;
  try { text = JSON.stringify(e.data); } catch (err) { text = String(e.data); }
  if (text && text.length > 200000) text = "HUGE:" + text.length;
  const who = e.source === window.parent && window.parent !== window ? "parent"
    : (Array.from(window.frames).includes(e.source) ? "child" : "other");
  if (window.__record) window.__record(who, text);
}, true);
"""
DOC = "/mcp/apps/sandbox/doc/"


class Visit:
    """A signed-in page with the hostile server, recording every message each frame receives
    (``messages``: ``(frame url, from whom, JSON text)``), every request (``requests``) and every new page."""

    def __init__(self, signed_in, hostile, sandboxed, **fields):  # noqa: F811
        from mrtrweb.models import McpServer

        self.page = signed_in("Hostile", hostile.url, apps_enabled=True, **fields)
        self.server = McpServer.objects.get(name="Hostile")
        self.sandbox = sandboxed
        self.messages: list[tuple[str, str, str]] = []
        self.requests: list = []
        self.pages: list = []
        self.escapes: list[str] = []
        context = self.page.context
        context.expose_binding("__record", lambda source, who, text: self.messages.append((source["frame"].url, who, text)))
        context.add_init_script(RECORDER)
        context.on("request", lambda r: self.requests.append(r))
        context.on("page", lambda p: self.pages.append(p))
        self.console: list[str] = []
        context.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        for outside in (hostile_apps.ESCAPE, hostile_apps.UNDECLARED, "https://10.0.0.1"):
            context.route(f"{outside}/**", self._escaped)

    def _escaped(self, route):
        self.escapes.append(route.request.url)
        route.fulfill(status=200, body="escaped", headers={"Access-Control-Allow-Origin": "*"})

    def call(self, tool: str) -> str:
        self.page.goto(f"/mcp/servers/{self.server.pk}/tools/?name={tool}")
        self.page.get_by_role("button", name="Call tool").click()
        self.page.wait_for_url(OP_URL)
        return OP_URL.search(self.page.url).group(1)

    def app(self):
        """The app's frame (its one-time document on the sandbox origin)."""
        for _ in range(300):
            for frame in self.page.frames:
                if frame.url.startswith(self.sandbox + DOC):
                    return frame
            self.page.wait_for_timeout(50)
        raise AssertionError(f"no app frame: {[f.url for f in self.page.frames]}")

    def proxy(self):
        return next(f for f in self.page.frames if f.url.startswith(self.sandbox + "/mcp/apps/sandbox/?"))

    def results(self, frame=None, key: str = "done") -> dict:
        frame = frame or self.app()
        for _ in range(300):
            got = frame.evaluate("window.__results || null")
            if got and got.get(key) is not None:
                return got
            self.page.wait_for_timeout(50)
        raise AssertionError(f"the app did not finish: {frame.evaluate('window.__results || null')}; "
                             f"frames {[f.url for f in self.page.frames]}; console {self.console[-15:]}")

    def secrets(self) -> list[str]:
        values = [c["value"] for c in self.page.context.cookies() if c["name"] in ("sessionid", "csrftoken")]
        assert len(values) == 2
        return values

    def sent_to_frames(self) -> list[str]:
        """What every frame of the sandbox origin received (the host's messages among them)."""
        return [text for url, _, text in self.messages if url.startswith(self.sandbox)]

    def host_to_proxy(self) -> list[str]:
        """What the proxy received from its parent, the site's page: the host's messages."""
        return [text for url, who, text in self.messages
                if url.startswith(self.sandbox + "/mcp/apps/sandbox/?") and who == "parent"]
