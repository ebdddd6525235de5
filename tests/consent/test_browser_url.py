"""URL mode in a real browser: nothing is fetched from the URL before the person clicks it.

A tiny HTTPS server on loopback (stdlib ``http.server`` in a thread, a self-signed certificate made
for the test) counts every TCP connection and every request it gets. A real MCP server (the SDK's
``MCPServer`` over Streamable HTTP on loopback) answers ``tools/call open_local_page`` with a
URL-mode elicitation of that server's URL. The card is shown and left alone for two seconds: no
connection, no request (no prefetch, preconnect or metadata fetch). Then the person clicks the
link: exactly one request, for exactly that URL, without a ``Referer`` header, in a new page that
has no ``window.opener``; then Accept, the review, Send.
"""

from __future__ import annotations

import json

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestURLParams, InputRequiredResult

from tests.browser import OP_URL, op_status, expect
from tests.consent.counting_site import alice_trusting_the_counting_site

pytestmark = [pytest.mark.browser]


def _url_mcp(url: str):
    """A real ``MCPServer`` with one tool asking, in URL mode, to open ``url``."""
    from mrtrweb.demo.server import serve_in_thread

    mcp = MCPServer(name="url-counter", version="0.1.0", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def open_local_page(ctx: Context) -> str | InputRequiredResult:
        """Ask the person to open a page on this machine."""
        response = (ctx.input_responses or {}).get("open")
        if response is None:
            request = ElicitRequest(params=ElicitRequestURLParams(message="Open the local page to sign in.", url=url,
                                                                  elicitation_id="local-1"))
            return InputRequiredResult(input_requests={"open": request}, request_state=json.dumps({"t": "open"}))
        return f"Opened: {getattr(response, 'action', '?')}."

    return serve_in_thread(server=mcp)


def test_no_request_to_the_url_before_the_click(app, counting_site):
    from mrtrweb.models import McpServer

    url = f"https://localhost:{counting_site.server_address[1]}/connect?provider=local&x=1"
    handle = _url_mcp(url)
    try:
        server = McpServer.objects.create(tenant=app.seeded["servers"]["acme"].tenant, name="URL server",
                                          url=handle.url)
        page = alice_trusting_the_counting_site(app)
        page.goto(f"/mcp/servers/{server.pk}/tools/open_local_page/")
        page.get_by_role("button", name="Call tool").click()
        expect(page).to_have_url(OP_URL)
        op_id = OP_URL.search(page.url).group(1)

        card = page.locator("#operation form.card")
        expect(card).to_be_visible()
        expect(card.locator(".url-full")).to_have_text(url)
        expect(card.locator("mark.host")).to_have_text("localhost")
        link = card.get_by_role("link", name="Open localhost in a new tab")
        expect(link).to_have_attribute("href", url)
        expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open")
        page.wait_for_timeout(2000)  # rendered, live, and left alone
        assert counting_site.connections == 0 and counting_site.hits() == []  # not even a preconnect

        with page.expect_popup() as popup_info:
            link.click()
        popup = popup_info.value
        expect(popup.locator("#done")).to_have_text("signed in")
        assert popup.url == url
        assert popup.evaluate("() => window.opener") is None  # noopener
        hits = counting_site.hits()
        assert [h["path"] for h in hits] == ["/connect?provider=local&x=1"]
        assert "referer" not in hits[0]["headers"]  # noreferrer
        popup.close()
        assert handle.calls[("open_local_page", True)] == 0

        with page.expect_navigation():
            card.get_by_role("button", name="Accept", exact=True).click()
        review = page.locator("#operation form.review")
        expect(review.locator(".review-url")).to_have_text(
            "You confirm that you are done at localhost. The server receives “accept”, with no content.")
        with page.expect_navigation():
            review.get_by_role("button", name="Send", exact=True).click()
        expect(page.locator(".result pre.block")).to_have_text("Opened: accept.")
        assert handle.calls[("open_local_page", True)] == 1
        assert op_status(op_id) == "completed"
        assert len(counting_site.hits()) == 1  # nothing fetched it again
    finally:
        handle.stop()
