"""A legacy (2025-11-25) server in a real browser (Playwright + Debian Chromium against the live ASGI
app, fixtures from ``tests/browser.py``): the server asks its question *during* the call; the
card is pushed while the server holds the call open; the person answers it on the card; the answer
goes back on the held call and the tool's result is pushed to the page."""

from __future__ import annotations

import re

import pytest

from tests.browser import OP_URL, App, screenshot, op_status, expect

pytestmark = [pytest.mark.browser]

LEGACY_NAME = "Demo (legacy 2025-11-25)"


@pytest.fixture(scope="module")
def legacy_mcp():
    from mrtrweb.demo.legacy import serve_legacy_in_thread

    handle = serve_legacy_in_thread()
    yield handle
    handle.stop()


@pytest.fixture
def app(seeded, browser, live, legacy_mcp):  # noqa: F811 -- this module's app: the legacy server seeded too
    from mrtrweb.models import McpServer

    server = seeded["servers"]["acme"]
    McpServer.objects.create(tenant=server.tenant, name=LEGACY_NAME, url=legacy_mcp.url)
    legacy_mcp.log.clear()
    a = App(browser, live, legacy_mcp, None, seeded)
    try:
        yield a
    finally:
        a.close()


def _accept(app: App, page) -> None:
    """THE one place that accepts a card: Accept, the review, Send."""
    app.accept(page)


def test_legacy_form_elicitation_through_the_card(app):
    page = app.sign_in("alice")
    page.get_by_role("link", name=LEGACY_NAME).click()
    expect(page.get_by_role("heading", name=LEGACY_NAME)).to_be_visible()
    page.locator("a[data-tool='legacy_deploy']").click()
    page.locator("[name='arg-env']").fill("production")
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)

    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".server-name")).to_have_text(LEGACY_NAME)
    expect(card.locator(".op-name")).to_have_text("legacy_deploy")
    expect(card.locator(".server-message")).to_have_text("Deploy to production? (legacy server, call held open)")
    expect(card.get_by_label("Replicas")).to_have_value("1")  # the schema's default, pre-filled
    assert app.mcp.log.responses() == []  # the server's request is held, unanswered
    # the answer-before deadline, pushed with the card, is shown in the viewer's zone (times.js)
    deadline = page.locator(".legacy-notice time.when")
    expect(deadline).to_have_attribute("data-local", "1")
    expect(deadline).to_have_text(re.compile(r"^\d\d:\d\d:\d\d \S+$"))
    expect(deadline).to_have_attribute("title", re.compile(r" UTC$"))
    screenshot(page, "legacy-card.png")

    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-2001")
    card.get_by_label("Replicas").fill("2")
    _accept(app, page)

    expect(page).to_have_url(re.compile(f"/mcp/operations/{op_id}/$"))
    expect(page.locator(".result pre.block")).to_have_text("Deployed 2 replica(s) to production (ticket CHG-2001).")
    expect(page.locator(".status")).to_contain_text("Completed")
    screenshot(page, "legacy-result.png")
    [response] = app.mcp.log.responses()
    assert response.result == {"action": "accept", "content": {"confirm": True, "ticket": "CHG-2001", "replicas": 2}}
    assert len(app.mcp.log.tool_calls("legacy_deploy")) == 1
    assert op_status(op_id) == "completed"
