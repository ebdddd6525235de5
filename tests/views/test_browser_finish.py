"""Issue 28's last items in a real browser (Playwright + Debian Chromium against the live ASGI app;
fixtures from ``tests/browser.py``).

* Item 7: the sign-in page and a tool's call form at 390 px and 1100 px: no page wider than the
  window, each label above its input, each input as wide as its field; the person's own history
  paged (46 operations: five pages of 10, a page of bounded height).
* Item 4: a read resource's page follows the resource: when the server updates it, "A newer version
  is available — Read again" appears, and Read again reads it anew.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from tests.browser import OP_URL, expect, screenshot

pytestmark = [pytest.mark.browser]

#: the own history's page at 1100 px with 10 operations of one event each stays under this (46
#: operations on one page were 10,781 px)
MAX_HISTORY_PAGE_PX = 4000


def _fits(page, what: str) -> None:
    sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth, document.body.scrollWidth]")
    assert sizes[0] <= sizes[1] and sizes[2] <= sizes[1], f"{what} is wider than the window: {sizes}"


def _labels_above_full_width_inputs(page, form: str, what: str) -> int:
    """Each field of ``form`` (a ``div`` with a label and a text-like input or a select): its label
    above its input, the input as wide as the field and on screen. Returns how many were checked."""
    rows = page.evaluate("""(sel) => Array.from(document.querySelectorAll(sel + ' > div')).map((d) => {
        const input = d.querySelector('input:not([type=hidden]):not([type=checkbox]):not([type=radio]), select, textarea');
        const label = d.querySelector('label');
        if (!input || !label) return null;
        const l = label.getBoundingClientRect(), i = input.getBoundingClientRect(), b = d.getBoundingClientRect();
        return {label: l.bottom, top: i.top, width: i.width, field: b.width, left: i.left, right: i.right,
                window: window.innerWidth};
    }).filter((r) => r !== null)""", form)
    assert rows, f"{what}: no fields found"
    for row in rows:
        assert row["label"] <= row["top"] + 1, f"{what}: a label beside its input: {row}"
        assert row["width"] >= row["field"] - 1, f"{what}: an input narrower than its field: {row}"
        assert row["left"] >= 0 and row["right"] <= row["window"], f"{what}: an input off screen: {row}"
    return len(rows)


def _many_operations(user, server, count: int) -> None:
    from mrtrweb.audit import events as audit
    from mrtrweb.models import Operation

    for i in range(count):
        op = Operation.objects.create(user=user, tenant_id=server.tenant_id, server=server, method="tools/call",
                                      name=f"echo-{i}", params={"name": "echo", "arguments": {"text": str(i)}},
                                      status="completed", request_id=f"r{i}", latest_request_id=f"r{i}")
        audit.record(op, "completed", request_id=op.request_id)


def test_sign_in_and_call_forms_fit_and_the_own_history_is_paged(app):
    page = app.new_context().new_page()
    for width, height in ((390, 844), (1100, 1000)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto("/accounts/login/?next=/mcp/")
        expect(page.get_by_label("Username")).to_be_visible()
        _fits(page, f"the sign-in page at {width} px")
        assert _labels_above_full_width_inputs(page, "form.login", f"the sign-in form at {width} px") == 2

    alice = app.sign_in("alice")
    server = app.seeded["servers"]["acme"]
    for width, height in ((390, 844), (1100, 1000)):
        alice.set_viewport_size({"width": width, "height": height})
        alice.goto(f"/mcp/servers/{server.pk}/tools/deploy/")
        expect(alice.get_by_role("heading", name="Call deploy")).to_be_visible()
        _fits(alice, f"the deploy form at {width} px")
        assert _labels_above_full_width_inputs(alice, "form.call-form", f"the deploy form at {width} px") >= 2
    screenshot(alice, "call-form-1100.png")

    # the person's own history: 46 operations, 10 a page (the tenant history's page control)
    _many_operations(app.seeded["users"]["alice"], server, 46)
    alice.goto("/mcp/history/")
    expect(alice.locator("section.history-op")).to_have_count(10)
    expect(alice.locator("nav.pages [aria-current=page]")).to_have_text("Page 1 of 5")
    height = alice.evaluate("() => document.documentElement.scrollHeight")
    assert height <= MAX_HISTORY_PAGE_PX, height
    _fits(alice, "the own history at 1100 px")
    alice.locator("nav.pages a[rel=next]").click()
    expect(alice.locator("nav.pages [aria-current=page]")).to_have_text("Page 2 of 5")
    alice.goto("/mcp/history/?page=5")
    expect(alice.locator("section.history-op")).to_have_count(6)
    expect(alice.locator("h3 .op-name").first).to_have_text(re.compile(r"^echo-\d$"))  # the oldest, last page


@pytest.fixture(scope="module")
def board():
    from mrtrweb.demo.board import board_server
    from mrtrweb.demo.server import serve_in_thread

    handle = serve_in_thread(server=board_server())
    yield handle
    handle.stop()


def test_a_read_resource_page_offers_the_newer_version(signed_in, board):
    from mrtrweb.demo.board import BOARD_URI
    from mrtrweb.models import McpServer

    page = signed_in("Board", board.url)
    server = McpServer.objects.get(name="Board")
    page.goto(f"/mcp/servers/{server.pk}/resources/?uri={quote(BOARD_URI, safe='')}")
    page.get_by_role("button", name="Read resource").click()
    expect(page).to_have_url(OP_URL)
    expect(page.locator(".panel")).to_have_attribute("data-status", "completed")
    expect(page.locator(".result")).to_contain_text("Nothing posted yet.")
    notice = page.locator("[data-watch-resource]")
    expect(notice).to_have_attribute("data-following", "1")  # the server follows it for this page
    expect(notice).to_be_hidden()

    writer = page.context.new_page()
    writer.goto(f"/mcp/servers/{server.pk}/tools/update_board/")
    writer.locator("[name=arg-text]").fill("<b>Lunch</b> at noon")
    writer.get_by_role("button", name="Call tool").click()
    expect(writer.locator(".panel")).to_have_attribute("data-status", "completed")

    expect(notice).to_be_visible()  # pushed: no reload
    expect(notice).to_contain_text("A newer version is available")
    screenshot(page, "resource-updated.png")
    notice.get_by_role("button", name="Read again").click()
    expect(page.locator(".panel")).to_have_attribute("data-status", "completed")
    expect(page.locator(".result")).to_contain_text("Version 2: <b>Lunch</b> at noon")  # shown as text
