"""A URL-required error (-32042) in a real browser: the card of its URL round opens nothing until
the person clicks; after the click, Accept, the review and Send, the original request is sent
again and its result is pushed to the page.

The page is a counting HTTPS server on loopback (the fixture ``counting_site`` of ``tests/consent/conftest.py``);
the MCP server is a real SDK ``MCPServer`` restricted to 2025-11-25 whose tool raises the SDK's
``UrlElicitationRequiredError`` once (:func:`tests.url_required_mcp.url_required_server`).
"""

from __future__ import annotations

import pytest

from tests.browser import OP_URL, op_status, expect
from tests.consent.counting_site import alice_trusting_the_counting_site
from tests.url_required_mcp import url_required_server

pytestmark = [pytest.mark.browser]


def test_url_required_card_then_the_request_again(app, counting_site):  # noqa: F811
    from mrtrweb.models import AuditEvent, McpServer

    url = f"https://localhost:{counting_site.server_address[1]}/sign-in?next=report"
    handle = url_required_server(url)
    try:
        server = McpServer.objects.create(tenant=app.seeded["servers"]["acme"].tenant, name="URL-required server",
                                          url=handle.url)
        page = alice_trusting_the_counting_site(app)
        page.goto(f"/mcp/servers/{server.pk}/tools/sign_in_first/")
        page.get_by_role("button", name="Call tool").click()
        expect(page).to_have_url(OP_URL)
        op_id = OP_URL.search(page.url).group(1)

        card = page.locator("#operation form.card")
        expect(card).to_be_visible()
        expect(card.locator(".server-message")).to_have_text("Sign in at the local page first.")
        expect(card.locator(".url-full")).to_have_text(url)
        expect(card.locator("mark.host")).to_have_text("localhost")
        expect(card.locator(".effect")).to_have_text(
            "URL-required server answered tools/call sign_in_first that this must be done first. When you are "
            "done, tools/call sign_in_first is sent to URL-required server again, unchanged; Decline or Cancel "
            "ends the operation and nothing is sent.")
        link = card.get_by_role("link", name="Open localhost in a new tab")
        expect(link).to_have_attribute("href", url)
        expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open")
        page.wait_for_timeout(1500)  # rendered, live, and left alone
        assert counting_site.connections == 0 and counting_site.hits() == []
        assert len(handle.log.tool_calls()) == 1

        with page.expect_popup() as popup_info:
            link.click()
        popup = popup_info.value
        expect(popup.locator("#done")).to_have_text("signed in")
        assert popup.evaluate("() => window.opener") is None  # noopener
        hits = counting_site.hits()
        assert [h["path"] for h in hits] == ["/sign-in?next=report"] and "referer" not in hits[0]["headers"]
        popup.close()
        assert len(handle.log.tool_calls()) == 1  # the click sent nothing to the MCP server

        with page.expect_navigation():
            card.get_by_role("button", name="Accept", exact=True).click()
        review = page.locator("#operation form.review")
        expect(review.locator(".review-url")).to_have_text("You confirm that you are done at localhost.")
        expect(review.locator(".effect")).to_have_text(
            "Send sends tools/call sign_in_first to URL-required server again, unchanged, under a new request id. "
            "It is sent once.")
        with page.expect_navigation():
            review.get_by_role("button", name="Send", exact=True).click()
        expect(page.locator(".result pre.block")).to_have_text("Signed in; here is your report.")
        assert op_status(op_id) == "completed"
        first, second = handle.log.tool_calls("sign_in_first")
        assert second.request_id != first.request_id and not second.is_retry
        assert list(AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")
                    .values_list("event", flat=True)) == ["received", "shown", "submitted", "completed"]
        assert len(counting_site.hits()) == 1  # nothing fetched it again
    finally:
        handle.stop()
