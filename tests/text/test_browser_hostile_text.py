"""Server text is text in a real browser (issue 12, items 2 and 7): Chromium against the live app
(fixtures from ``tests/browser.py``), CSP enforced, and the hostile LISTING server
(``tests/hostile.py``, :func:`hostile.serve_listing`), whose every string carries
``<meta http-equiv=refresh>``, ``<base href>``, ``<form action>``, ``<a href>``, ``<img onerror>``,
``<style>``, ``<svg onload>`` and RLO/LRI/BEL/ESC/NUL/NEL/ZWSP.

On every page a person opens -- the server page, each tool page, the prompt and resource pages,
the consent card, the review, the result, a failure, a pushed progress message, the histories --
the test asserts: no navigation happened and nothing was requested from the markup's targets; no
element was injected (no ``meta[http-equiv]``, ``base``, foreign ``form``/``a``, ``img``,
``svg``, ``style``); no script ran; the page is not restyled; the text is shown literally, its
control and bidi characters visible as ``⟨U+202E⟩``; and the URL-mode URL is drawn left to right in
the order of its characters (neither its U+202E nor its Hebrew letters reorder it).
"""

from __future__ import annotations

import re
import urllib.parse

import pytest
from django.urls import reverse

from mrtrweb.text import names, display
from tests.browser import OP_URL, PASSWORDS, TIMEOUT_MS, expect

from .. import hostile

pytestmark = [pytest.mark.browser]

#: a request for anything the hostile markup names (``127.0.0.1:1``, or ``x`` of ``<img src=x>``)
FOREIGN = re.compile(r"^https?://127\.0\.0\.1:1/|/x$")

INJECTED_JS = """() => ({
  meta: document.querySelectorAll('meta[http-equiv]').length,
  base: document.querySelectorAll('base').length,
  form: document.querySelectorAll('form[action*="127.0.0.1:1"]').length,
  a: document.querySelectorAll('a[href*="127.0.0.1:1"]').length,
  img: document.querySelectorAll('img').length,
  svg: document.querySelectorAll('svg').length,
  style: document.querySelectorAll('style').length,
  go: [...document.querySelectorAll('button')].filter((b) => b.textContent === 'go').length,
  xss: window.__xss === undefined ? null : window.__xss,
  hidden: getComputedStyle(document.body).display === 'none',
})"""
CLEAN = {"meta": 0, "base": 0, "form": 0, "a": 0, "img": 0, "svg": 0, "style": 0, "go": 0, "xss": None,
         "hidden": False}
#: a raw control, bidi or invisible character in the page's text or title
RAW_HIDDEN_JS = r"""() => {
  const re = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufeff]/;
  const text = document.body.textContent + document.title;
  const m = text.match(re);
  return m ? 'U+' + m[0].charCodeAt(0).toString(16) + ' near ' + JSON.stringify(text.slice(Math.max(0, m.index - 60), m.index + 20)) : null;
}"""


class Watch:
    """The requests and main-frame navigations of one page since :meth:`mark`."""

    def __init__(self, page) -> None:
        self.page = page
        self.requests: list[str] = []
        self.navigations: list[str] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("framenavigated", lambda f: self.navigations.append(f.url) if f == page.main_frame else None)

    def mark(self) -> None:
        self.requests.clear()
        self.navigations.clear()


def _sign_in(app, username: str):
    context = app.browser.new_context(base_url=app.live.url, viewport={"width": 1100, "height": 1400})
    context.set_default_timeout(TIMEOUT_MS)
    app.contexts.append(context)
    page = context.new_page()
    page.goto("/accounts/login/?next=/mcp/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORDS[username])
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header .who")).to_have_text(f"Signed in as {username}")
    return page


def assert_clean(page, watch: Watch, where: str, *labels: str) -> None:
    """The page as it is now (after a moment for a refresh or an image load to happen): not
    navigated, nothing fetched from the markup, nothing injected or run, the labels' hostile text
    shown literally with its control characters visible, no raw control character in its text."""
    url = page.url
    page.wait_for_timeout(400)
    assert page.url == url, f"{where}: navigated to {page.url}"
    assert [n for n in watch.navigations if n != url] == [], f"{where}: navigations {watch.navigations}"
    foreign = [r for r in watch.requests if FOREIGN.search(r)]
    assert foreign == [], f"{where}: requested {foreign}"
    assert page.evaluate(INJECTED_JS) == CLEAN, where
    assert page.evaluate(RAW_HIDDEN_JS) is None, where
    text = page.evaluate("() => document.body.textContent")
    for label in labels:
        assert hostile.hostile_shown(label) in text, f"{where}: {label!r} is not shown literally"


def _goto(page, watch: Watch, path: str) -> None:
    watch.mark()
    page.goto(path)


def _char_lefts(page, selector: str) -> list[float]:
    """The left edge (px) of each character of the element's text, in the text's (logical) order."""
    return page.evaluate("""(sel) => {
        const node = document.querySelector(sel).firstChild;
        const out = [];
        for (let i = 0; i < node.length; i++) {
            const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
            const box = r.getBoundingClientRect();
            if (box.width > 0) out.push(box.left);
        }
        return out;
    }""", selector)


@pytest.fixture(scope="module")
def listing_mcp():
    handle = hostile.serve_listing()
    yield handle
    handle.stop()


@pytest.fixture
def listing(app, listing_mcp):
    from mrtrweb.models import McpServer

    acme = app.seeded["servers"]["acme"].tenant
    server = McpServer.objects.create(tenant=acme, name="Listing", url=listing_mcp.url)
    listing_mcp.log.clear()
    return server


def test_every_page_shows_hostile_server_text_as_text(app, listing, listing_mcp):
    page = _sign_in(app, "alice")  # CSP enforced, as a person's browser
    watch = Watch(page)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    card = page.locator("#operation form.card")

    # The server page: names, descriptions of tools, prompts and resource templates.
    _goto(page, watch, f"/mcp/servers/{listing.pk}/")
    expect(page.get_by_role("heading", name="Listing")).to_be_visible()
    assert_clean(page, watch, "server page", "Ask", "Url", "Fail", "Slow", "Nested", "Prompt", "Template")
    assert display.shown(hostile.ASK_TOOL) in page.locator("ul.tools").inner_text()

    # Each tool page: the flat form's labels, help texts and option labels; the JSON editor's page.
    for tool, labels in ((hostile.ASK_TOOL, ("Ask", "Text", "Text help", "Pick", "Pick help", "Option A", "Legacy",
                                            "Name X", "Many", "Many help", "Item P")),
                         (hostile.URL_TOOL, ("Url",)), (hostile.FAIL_TOOL, ("Fail",)), (hostile.SLOW_TOOL, ("Slow",)),
                         (hostile.NESTED_TOOL, ("Nested",))):
        _goto(page, watch, names.call_url("tool", listing.pk, tool))
        expect(page.get_by_role("button", name="Call tool")).to_be_visible()
        assert_clean(page, watch, f"tool page {tool!r}", *labels)
        assert display.shown(tool) in page.locator("h1").inner_text()
        assert display.shown(tool) in page.title()

    # The prompt and resource pages.
    _goto(page, watch, names.call_url("prompt", listing.pk, hostile.PROMPT))
    expect(page.get_by_role("button", name="Get prompt")).to_be_visible()
    assert_clean(page, watch, "prompt page", "Prompt", "Who", "Who help")
    _goto(page, watch, f"/mcp/servers/{listing.pk}/resources/?" + urllib.parse.urlencode({"template": hostile.TEMPLATE}))
    expect(page.get_by_role("button", name="Read resource")).to_be_visible()
    assert_clean(page, watch, "resource page", "Template")

    # The form tool: its card (message, titles, descriptions, oneOf titles, enumNames), the review,
    # the result (text; an image, a resource link and an embedded resource as JSON text).
    _goto(page, watch, names.call_url("tool", listing.pk, hostile.ASK_TOOL))
    watch.mark()
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    expect(card).to_be_visible()
    assert_clean(page, watch, "consent card", "Message", "Text", "Text help", "Pick", "Option A", "Name X", "Many",
                 "Item P")
    assert display.shown(hostile.ASK_TOOL) in card.locator(".op-name").inner_text()
    watch.mark()
    with page.expect_navigation():
        card.get_by_role("button", name="Accept", exact=True).click()
    review = page.locator("#operation form.review")
    expect(review).to_be_visible()
    assert_clean(page, watch, "review", "Message", "Text", "Option A", "Name X", "Item P")
    watch.mark()
    with page.expect_navigation():
        review.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator(".status")).to_contain_text("Completed")
    assert_clean(page, watch, "result", "Result")
    # the product's own links only (the downloads, Change the arguments): never one a server named
    hrefs = page.locator(".result a").evaluate_all("links => links.map((a) => a.getAttribute('href'))")
    assert hrefs and all(h.startswith(("/mcp/operations/", "/mcp/servers/")) for h in hrefs), hrefs
    assert "http://127.0.0.1:1/leak" in page.locator(".result").inner_text()  # the link, as text
    assert [r.tool for r in listing_mcp.log.tool_calls()].count(hostile.ASK_TOOL) == 2  # its exact name, twice

    # The URL-mode card: the URL with U+202E visible, drawn left to right in stored order (its
    # Hebrew letters too), a warning, the only link the product makes from server text.
    _goto(page, watch, names.call_url("tool", listing.pk, hostile.URL_TOOL))
    watch.mark()
    page.get_by_role("button", name="Call tool").click()
    expect(card).to_be_visible()
    expect(card.locator(".url-full code")).to_have_text(display.ascii_url(hostile.BIDI_URL))
    url_text = card.locator(".url-unicode code")
    expect(url_text).to_have_text(display.shown(hostile.BIDI_URL))
    lefts = _char_lefts(page, "#operation .url-unicode bdo")
    assert len(lefts) == len(display.shown(hostile.BIDI_URL))
    assert lefts == sorted(lefts), "the URL-mode URL is visually reordered"
    expect(card.locator(".warning", has_text="invisible or direction-changing characters")).to_be_visible()
    assert_clean(page, watch, "URL-mode card", "Open")
    assert card.locator("a").count() == 1
    expect(card.locator("a.open-url")).to_have_attribute("href", display.href(hostile.BIDI_URL))

    # A JSON-RPC error whose message is hostile.
    _goto(page, watch, names.call_url("tool", listing.pk, hostile.FAIL_TOOL))
    watch.mark()
    page.get_by_role("button", name="Call tool").click()
    expect(page.locator(".panel")).to_have_attribute("data-status", "failed")
    assert_clean(page, watch, "failure")

    # A pushed progress message (set as text by operations.js), then the pushed result.
    _goto(page, watch, names.call_url("tool", listing.pk, hostile.SLOW_TOOL))
    watch.mark()
    page.get_by_role("button", name="Call tool").click()
    expect(page.locator(".progress-message")).to_have_text(display.shown(hostile.PROGRESS_MESSAGE))
    assert_clean(page, watch, "progress")
    expect(page.locator(".status")).to_contain_text("Completed", timeout=15_000)
    assert_clean(page, watch, "pushed result", "Result")

    # The prompt's round.
    _goto(page, watch, names.call_url("prompt", listing.pk, hostile.PROMPT))
    page.locator("[name='arg-who']").fill("me")
    watch.mark()
    page.get_by_role("button", name="Get prompt").click()
    expect(card).to_be_visible()
    assert_clean(page, watch, "prompt card", "Message", "Text help")

    # The histories.
    for where, path in (("own history", "/mcp/history/"), ("tenant history", "/mcp/tenants/acme/history/"),
                        ("index", "/mcp/")):
        _goto(page, watch, path)
        assert_clean(page, watch, where)
        assert display.shown(hostile.ASK_TOOL) in page.locator("main").inner_text(), where
    _goto(page, watch, "/mcp/history/")
    page.locator("h3 a", has_text=display.shown(hostile.ASK_TOOL)).first.click()
    expect(page.get_by_role("heading", name=re.compile("Timeline of"))).to_be_visible()
    watch.mark()
    assert_clean(page, watch, "timeline")

    assert errors == [], errors
