"""The navigation's "Waiting for you" and the person's pages at 390 px, in a real browser
(Playwright + Debian Chromium against the live ASGI app; fixtures from ``tests/browser.py``).

* A round that arrives while the person is on another page of the app shows in the navigation of
  that page by push (no reload), links to the round, announces it politely, and leaves when
  answered; another person's page never counts it.
* At 390 px wide, no person page scrolls sideways, even with a server whose name and origin are
  long unbroken tokens and a round whose message is one; the card's buttons stay on screen.
"""

from __future__ import annotations

import json
import re

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from tests.browser import OP_URL, screenshot, op_status, expect

pytestmark = [pytest.mark.browser]

#: a long unbroken token as a server may send it (a message, a result, a name)
LONG_TOKEN = "Approve-" + "x7Q2" * 60 + "-now"
LONG_NAME = "Server" + "N" * 110  # 116 characters, no space (McpServer.name holds 120)
LONG_HOST = "a" + "-very-long-host-label" * 2 + ".example.invalid"  # never contacted
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "Agree", "default": False}}}


def _long_mcp():
    from mrtrweb.demo.server import serve_in_thread

    mcp = MCPServer(name="long-server", version="0.1.0", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def long_message(ctx: Context) -> str | InputRequiredResult:
        """Ask with a message that is one long token; return one too."""
        response = (ctx.input_responses or {}).get("q")
        if response is None:
            request = ElicitRequest(params=ElicitRequestFormParams(message=LONG_TOKEN, requested_schema=SCHEMA))
            return InputRequiredResult(input_requests={"q": request}, request_state=json.dumps({"t": "q"}))
        return "Done:" + LONG_TOKEN + "/" + LONG_TOKEN

    return serve_in_thread(server=mcp)


@pytest.fixture(scope="module")
def long_mcp():
    handle = _long_mcp()
    yield handle
    handle.stop()


def _count(page):
    return page.locator("#nav-pending .nav-pending-count")


def test_a_round_elsewhere_is_pushed_to_the_navigation_of_every_page(app):
    alice = app.sign_in("alice")
    bob = app.sign_in("bob")
    bob_frames = app.record_frames(bob)
    bob.reload()
    for page in (alice, bob):
        expect(page.locator("#nav-pending")).to_have_attribute("data-ws-state", "open")
        expect(_count(page)).to_have_text("0")
    app.mark_document(alice)

    # her server page too (its own socket, server.js, passes the count on)
    listing = alice.context.new_page()
    listing.goto(f"/mcp/servers/{app.seeded['servers']['acme'].pk}/")
    expect(listing.locator("#server-listing")).to_have_attribute("data-ws-state", "open")

    # a second page of alice's starts a call; her index page stays where it is
    other = alice.context.new_page()
    other.goto("/mcp/")
    hold = app.valve.hold("deploy")
    op_id = app.call_tool(other, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    hold.wait_arrived()
    hold.release()
    expect(app.card(other)).to_be_visible()

    expect(_count(alice)).to_have_text("1")  # pushed, no reload
    app.assert_same_document(alice)
    expect(alice.locator("#live")).to_have_text("A server asks for your input: a new round is waiting for you.")
    alice.locator("#nav-pending summary").click()
    link = alice.locator("#nav-pending .nav-pending-rounds li a")
    expect(link).to_have_count(1)
    expect(link).to_have_text("deploy")
    expect(link).to_have_attribute("href", f"/mcp/operations/{op_id}/")
    entry = alice.locator(f"#nav-pending .nav-pending-rounds li[data-operation='{op_id}']")
    expect(entry.locator(".muted")).to_have_text(" Demo server")
    expect(entry.locator(".expires time")).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT"))
    expect(entry.locator(".expires time")).not_to_have_text("")
    # the same form as every time of the app: localized by times.js (the zone named), UTC in its title
    expect(entry.locator(".expires time")).to_have_attribute("data-local", "1")
    expect(entry.locator(".expires time")).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$"))
    expect(entry.locator(".expires time")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+"))
    expect(other.locator("#nav-pending .nav-pending-count")).to_have_text("1")  # the operation page's own nav
    expect(_count(listing)).to_have_text("1")
    screenshot(alice, "nav-pending.png")

    # the waiting page lists it with its expiry and a link
    waiting = alice.context.new_page()
    waiting.goto("/mcp/waiting/")
    expect(waiting.locator(".waiting-rounds a")).to_have_attribute("href", f"/mcp/operations/{op_id}/")
    expect(_count(waiting)).to_have_text("1")  # rendered server-side
    waiting.close()

    # answered (declined) on the other page: the count drops on both
    app.submit(other, "Decline")
    expect(_count(alice)).to_have_text("0")
    expect(link).to_have_count(0)
    expect(other.locator("#nav-pending .nav-pending-count")).to_have_text("0")
    expect(_count(listing)).to_have_text("0")
    app.assert_same_document(alice)
    assert op_status(op_id) != "awaiting_input"

    # bob never saw alice's round counted
    expect(_count(bob)).to_have_text("0")
    pending = [f for f in bob_frames if f.get("type") == "pending"]
    assert pending and all(f["count"] == 0 and f["rounds"] == [] for f in pending), pending


def _no_sideways_scroll(page, what: str) -> None:
    sizes = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth,"
                          " document.body.scrollWidth]")
    assert sizes[0] <= sizes[1] and sizes[2] <= sizes[1], f"{what} overflows at 390 px: {sizes}"


def _within_viewport(page, locator, what: str) -> None:
    width = page.evaluate("() => window.innerWidth")
    for i in range(locator.count()):
        box = locator.nth(i).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, f"{what} #{i}: {box}"


def test_person_pages_fit_390_px_with_long_server_text(app, long_mcp):
    from mrtrweb.models import McpServer

    tenant = app.seeded["servers"]["acme"].tenant
    server = McpServer.objects.create(tenant=tenant, name=LONG_NAME, url=long_mcp.url)
    McpServer.objects.create(tenant=tenant, name="Far" + "F" * 80, url=f"https://{LONG_HOST}:8443/mcp/" + "p" * 80)
    page = app.sign_in("alice")

    def at(width: int) -> None:
        page.set_viewport_size({"width": width, "height": 844 if width == 390 else 1000})

    at(390)
    # earlier operations, so the table has rows (one with a long name)
    hold = app.valve.hold("deploy")
    app.call_tool(page, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    hold.release()
    page.goto("/mcp/")
    expect(page.locator("table.ops tbody tr")).not_to_have_count(0)
    _no_sideways_scroll(page, "the index")
    screenshot(page, "index-390.png")

    page.goto(f"/mcp/servers/{server.pk}/")
    expect(page.locator("a[data-tool='long_message']")).to_be_visible()
    _no_sideways_scroll(page, "the server page")
    page.goto(f"/mcp/servers/{server.pk}/tools/long_message/")
    expect(page.get_by_role("heading", name="Call long_message")).to_be_visible()
    _no_sideways_scroll(page, "the tool page")
    screenshot(page, "tool-390.png")

    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".server-message")).to_have_text(LONG_TOKEN)
    _no_sideways_scroll(page, "the operation page with its card")
    _within_viewport(page, card.locator("button"), "a card button")
    _within_viewport(page, card, "the card")
    screenshot(page, "card-390.png")

    app.submit(page, "Accept")
    review = app.expect_review(page)
    _no_sideways_scroll(page, "the review")
    _within_viewport(page, review.locator("button"), "a review button")
    app.submit(page, "Send")
    expect(page.locator(".panel")).to_have_attribute("data-status", "completed")
    expect(page.locator(".result")).to_contain_text("Done:")
    _no_sideways_scroll(page, "the operation page with its result")
    screenshot(page, "operation-390.png")

    for url in ("/mcp/", "/mcp/waiting/", "/mcp/connections/", f"/mcp/servers/{server.pk}/",
                f"/mcp/servers/{server.pk}/settings/"):  # a tenant admin's settings: long options and URIs
        page.goto(url)
        _no_sideways_scroll(page, url)
    # the navigation's list open at 390 px (the deploy above still waits): in the flow, on screen
    page.goto("/mcp/")
    expect(page.locator("#nav-pending")).to_have_attribute("data-ws-state", "open")
    page.locator("#nav-pending summary").click()
    expect(page.locator("#nav-pending .nav-pending-rounds li")).not_to_have_count(0)
    _no_sideways_scroll(page, "the open navigation list")
    _within_viewport(page, page.locator("#nav-pending .nav-pending-menu a"), "a waiting round's link")
    far = McpServer.objects.get(name__startswith="FarF")
    page.goto(f"/mcp/servers/{far.pk}/")  # its long origin, and the error of a server not reached
    _no_sideways_scroll(page, "a server page with a long origin")
    expect(page.locator("#server-listing .error")).to_be_visible()
    screenshot(page, "server-390.png")

    at(1100)  # the wide layout keeps its table
    page.goto("/mcp/")
    _no_sideways_scroll(page, "the index at 1100 px")
    assert page.locator("table.ops thead").is_visible()

    signed_out = app.new_context().new_page()
    signed_out.set_viewport_size({"width": 390, "height": 844})
    signed_out.goto("/accounts/login/?next=/mcp/")
    expect(signed_out.get_by_label("Username")).to_be_visible()
    _no_sideways_scroll(signed_out, "the login page")
    fields = signed_out.locator("form.login input:not([type=hidden]), form.login button")
    _within_viewport(signed_out, fields, "a login field")
