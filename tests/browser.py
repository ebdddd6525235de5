"""The real-browser tests' fixtures and helpers (a pytest plugin: ``tests/conftest.py`` lists it in
``pytest_plugins``): Debian Chromium driven by Playwright against the whole ASGI app under uvicorn
(:class:`tests.live_server.LiveAsgiServer`), and the real demo MCP server behind a valve.

* fixtures ``browser``, ``live`` and ``valved_mcp`` (one per test module), ``app`` (an :class:`App`:
  seeded tenants whose "Demo server" is the valved one), ``signed_in`` (alice signed in, with a
  server of her tenant added at a URL);
* :func:`screenshot` (under ``var/screenshots/``), :func:`op_status`, and the constants the tests
  share (:data:`OP_URL`, :data:`PASSWORDS`, :data:`TIMEOUT_MS`, :data:`TEXT_DONE_SCRIPT`...).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveAsgiServer, serve_valved_demo

try:
    from playwright import sync_api as playwright_sync
except ImportError:  # the browser fixture skips the test
    playwright_sync = None
    expect = None
else:
    expect = playwright_sync.expect
    expect.set_options(timeout=10_000)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--no-first-run"]
PASSWORDS = {"alice": "alice-demo-pw", "carol": "carol-demo-pw", "bob": "bob-demo-pw"}
#: the screenshots these tests write (fixed viewport, full page): under var/, never the tracked
#: docs/screenshots/ (``./dev screenshots`` runs the tests that write those the README and docs/ show,
#: and copies them there)
SCREENSHOTS = Path(__file__).resolve().parents[1] / "var" / "screenshots"
TIMEOUT_MS = 10_000
OP_URL = re.compile(r"/mcp/operations/([0-9a-f-]{36})/$")

# Test instrumentation injected into every page: after each Response.text() resolves, a task is
# queued that records the URL. Microtasks (the page's `.then(apply)`) run before any task, so when
# the URL is recorded the page has already applied that response.
TEXT_DONE_SCRIPT = """
(() => {
  const orig = Response.prototype.text;
  window.__textDone = [];
  Response.prototype.text = function () {
    const url = this.url;
    return orig.call(this).then((t) => { setTimeout(() => window.__textDone.push(url), 0); return t; });
  };
})();
"""


# ------------------------------------------------------------------------------------------------
# Fixtures
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per module. Playwright's sync API runs an event loop in this thread,
    so Django's async-safety check must be relaxed for the test's own ORM calls."""
    pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is not installed (./dev test installs it)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        pw = playwright_sync.sync_playwright().start()
        try:
            b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                yield b
            finally:
                b.close()
        finally:
            pw.stop()


@pytest.fixture(scope="module")
def live(django_db_setup):
    """The ASGI app under uvicorn on 127.0.0.1 (the test database exists before it serves)."""
    server = LiveAsgiServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def valved_mcp():
    handle, valve = serve_valved_demo()
    yield handle, valve
    valve.release_all()
    handle.stop()


class App:
    """One test's view of the system: users sign in in their own browser contexts."""

    def __init__(self, browser, live: LiveAsgiServer, mcp, valve, seeded: dict[str, Any]) -> None:
        self.browser = browser
        self.live = live
        self.mcp = mcp
        self.valve = valve
        self.seeded = seeded
        self.contexts: list[Any] = []

    # -- people ----------------------------------------------------------------------------------

    def new_context(self):
        context = self.browser.new_context(base_url=self.live.url, viewport={"width": 1100, "height": 1400})
        context.set_default_timeout(TIMEOUT_MS)
        context.add_init_script(TEXT_DONE_SCRIPT)
        self.contexts.append(context)
        return context

    def sign_in(self, username: str):
        """A new browser context for ``username``, signed in through the login form."""
        page = self.new_context().new_page()
        page.goto("/accounts/login/?next=/mcp/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORDS[username])
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("header .who")).to_have_text(f"Signed in as {username}")
        expect(page.get_by_role("heading", name="Your MCP servers")).to_be_visible()
        return page

    def open_tool(self, page, tool: str) -> None:
        page.get_by_role("link", name="Demo server").click()
        expect(page.get_by_role("heading", name="Demo server")).to_be_visible()
        page.locator(f"a[data-tool='{tool}']").click()
        expect(page.get_by_role("heading", name=f"Call {tool}")).to_be_visible()

    def call_tool(self, page, tool: str, fill: dict[str, str] | None = None, select: dict[str, str] | None = None) -> str:
        """Open ``tool`` from the index page, fill its form, submit; returns the operation id."""
        self.open_tool(page, tool)
        for name, value in (fill or {}).items():
            page.locator(f"[name='arg-{name}']").fill(value)
        for name, value in (select or {}).items():
            page.locator(f"[name='arg-{name}']").select_option(value)
        page.get_by_role("button", name="Call tool").click()
        expect(page).to_have_url(OP_URL)
        return OP_URL.search(page.url).group(1)

    # -- waiting -----------------------------------------------------------------------------------

    @staticmethod
    def wait_live(page) -> None:
        """Wait until the operation page's WebSocket is open and its catch-up refresh is applied."""
        expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open")
        page.wait_for_function("() => window.__textDone.some((u) => u.endsWith('/panel/'))")

    @staticmethod
    def mark_document(page) -> None:
        page.evaluate("() => { window.__sameDocument = true; }")

    @staticmethod
    def assert_same_document(page) -> None:
        assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"

    @staticmethod
    def record_frames(page) -> list[dict[str, Any]]:
        """Every JSON message the page receives on its WebSockets (register before navigating)."""
        frames: list[dict[str, Any]] = []

        def on_ws(ws) -> None:
            def on_frame(payload) -> None:
                try:
                    frames.append(json.loads(payload))
                except (TypeError, ValueError):
                    frames.append({"raw": payload})
            ws.on("framereceived", on_frame)

        page.on("websocket", on_ws)
        return frames

    @staticmethod
    def card(page):
        return page.locator("#operation form.card")

    def submit(self, page, button: str = "Accept") -> None:
        """Click a card button; the form posts and the browser lands on the operation page."""
        with page.expect_navigation():
            self.card(page).get_by_role("button", name=button, exact=True).click()

    @staticmethod
    def expect_review(page):
        """The review of the answer is shown (nothing sent yet) and has the focus."""
        review = page.locator("#operation form.review")
        expect(review).to_be_visible()
        expect(review.locator(".review-title")).to_be_focused()
        expect(page.locator("#live")).to_have_text("Review your answer before sending.")
        return review

    def accept(self, page) -> None:
        """Accept the card as a person does: Accept, read the review, Send."""
        self.submit(page, "Accept")
        self.expect_review(page)
        self.submit(page, "Send")

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def app(seeded, browser, live, valved_mcp):
    """Seeded tenants whose "Demo server" points at the valved demo MCP server."""
    from mrtrweb.models import McpServer

    handle, valve = valved_mcp
    McpServer.objects.update(url=handle.url)
    handle.log.clear()
    a = App(browser, live, handle, valve, seeded)
    try:
        yield a
    finally:
        valve.release_all()
        a.close()


@pytest.fixture
def signed_in(seeded, browser, live):
    """A function ``add(name, url, **fields) -> page``: the server in alice's tenant (acme), and
    alice signed in."""
    from mrtrweb.models import McpServer

    contexts = []

    def add(name: str, url: str, **fields):
        McpServer.objects.create(tenant=seeded["servers"]["acme"].tenant, name=name, url=url, **fields)
        context = browser.new_context(base_url=live.url, viewport={"width": 1100, "height": 1600})
        contexts.append(context)
        context.set_default_timeout(15_000)  # a third-party server in a venv or node
        p = context.new_page()
        p.goto("/accounts/login/?next=/mcp/")
        p.get_by_label("Username").fill("alice")
        p.get_by_label("Password").fill("alice-demo-pw")
        p.get_by_role("button", name="Sign in").click()
        expect(p.locator("header .who")).to_have_text("Signed in as alice")
        return p

    yield add
    for context in contexts:
        context.close()


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def op_status(op_id: str) -> str:
    from mrtrweb.models import Operation

    return Operation.objects.get(pk=op_id).status


DEPLOY_RESULT = ("Deployed 3 replica(s) to production (ticket CHG-1042; region us-east-1; window 3h; "
                 "contact ops@example.test; notify email, slack).")
