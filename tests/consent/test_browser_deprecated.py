"""Sampling, the explicit exception, in a real browser (Playwright + Debian Chromium against the live
ASGI app and the valved demo MCP server, fixtures from ``tests/browser.py``): the tenant admin
allows sampling on the server's settings page, calls ``summarize_with_sampling``, reads the
request on the card, is refused until she ticks the approval box, writes the reply, and sees the
result."""

from __future__ import annotations

import pytest

from tests.browser import screenshot, op_status, expect

pytestmark = [pytest.mark.browser]


def test_admin_allows_sampling_then_approves_a_request_with_a_written_reply(app):
    page = app.sign_in("alice")
    server = app.seeded["servers"]["acme"]

    # The tenant admin allows sampling for this server on its settings page.
    page.goto(f"/mcp/servers/{server.pk}/settings/")
    page.get_by_label("allow sampling (deprecated)").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()
    expect(page.locator("p.notice")).to_have_text("Saved.")

    page.goto("/mcp/")
    op_id = app.call_tool(page, "summarize_with_sampling", fill={"text": "<b>Quarterly</b> numbers went up"})
    card = app.card(page)
    expect(card).to_be_visible()
    request = card.locator("fieldset[data-kind='sampling']")
    expect(request.locator("legend")).to_have_text("Model sampling (a deprecated capability)")
    expect(request.locator(".message-text")).to_have_text("Summarize: <b>Quarterly</b> numbers went up")  # as text
    expect(request.locator(".system-prompt")).to_have_text("You are a concise summarizer. Answer in one sentence.")
    expect(request.locator(".max-tokens")).to_have_text("200")
    expect(request.locator(".model-hint")).to_have_text("claude-sonnet")
    assert page.locator(".message-text b").count() == 0  # never rendered as HTML

    # Accept without the approval: refused on the card, nothing sent.
    card.get_by_label("Your reply (sent to the server as the assistant's message)").fill("Numbers rose this quarter.")
    app.submit(page, "Accept")
    expect(page.locator(".panel > .error")).to_have_text("Some answers need attention.")
    expect(card.locator(".field-error")).to_contain_text("I approve this sampling request")
    assert app.mcp.calls[("summarize_with_sampling", True)] == 0

    card.get_by_label("I approve this sampling request").check()
    card.get_by_label("Your reply (sent to the server as the assistant's message)").fill("Numbers rose this quarter.")
    screenshot(page, "sampling-card.png")
    app.submit(page, "Accept")
    review = app.expect_review(page)  # the reply as it will be sent; nothing sent yet
    expect(review.locator(".reply-model")).to_have_text("human")
    expect(review.locator(".reply-text")).to_have_text("Numbers rose this quarter.")
    assert app.mcp.calls[("summarize_with_sampling", True)] == 0
    app.submit(page, "Send")
    expect(page.locator(".result pre.block")).to_have_text("Summary (human): Numbers rose this quarter.")
    expect(page.locator(".status")).to_contain_text("Completed")
    assert app.mcp.calls[("summarize_with_sampling", True)] == 1
    assert op_status(op_id) == "completed"
