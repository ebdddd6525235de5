"""A server page follows the server's listing in a real browser (Playwright + Debian Chromium
against the live ASGI app; fixtures from ``tests/browser.py``): a server that adds a tool
(``notifications/tools/list_changed`` on its ``subscriptions/listen`` stream, 2026-07-28) makes the
open page show it without the person reloading, the tool's text escaped."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

from mrtrweb.demo.server import serve_in_thread
from mrtrweb.mcp import McpConnection
from tests.browser import expect
from tests.growing_mcp import growing_server

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def growing():
    handle = serve_in_thread(server=growing_server())
    yield handle
    handle.stop()


async def _grow(url: str) -> None:
    """Someone else makes the server add a tool (its own connection, not the person's)."""
    async with McpConnection(url, timeout_s=10) as conn:
        await conn.send("tools/call", {"name": "grow", "arguments": {}}, "grow-1")


def test_open_server_page_shows_a_tool_the_server_added(app, growing):
    from mrtrweb.models import McpServer

    acme = app.seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant=acme.tenant, name="Growing", url=growing.url)
    page = app.sign_in("alice")
    page.goto(f"/mcp/servers/{server.pk}/")
    listing = page.locator("#server-listing")
    expect(listing.locator("a[data-tool='grow']")).to_be_visible()
    expect(listing).to_have_attribute("data-ws-state", "open")
    expect(page.locator(".negotiated-version")).to_have_text("2026-07-28")
    assert listing.locator("a[data-tool='grown_1']").count() == 0
    page.evaluate("() => { window.__sameDocument = true; }")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, _grow(growing.url)).result(timeout=30)

    expect(listing.locator("a[data-tool='grown_1']")).to_be_visible()
    expect(listing).to_have_attribute("data-rereads", "1")
    expect(page.locator(".listing-changed")).to_be_visible()
    assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    assert page.locator("#server-listing b").count() == 0  # the description's markup stays text
    expect(listing.locator("p.desc").last).to_have_text("<b>added</b> at run time")
    # and the added tool opens
    listing.locator("a[data-tool='grown_1']").click()
    expect(page.get_by_role("heading", name="Call grown_1")).to_be_visible()
