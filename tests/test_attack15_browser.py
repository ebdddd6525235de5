"""The list_changed flood of ``tests/test_attack15.py`` seen from a real browser (Playwright +
Debian Chromium against the live ASGI app; fixtures from ``tests/test_browser.py``): a server that
says its tools changed 2,000 times in a burst makes the open server page re-read its listing a few
times, not hundreds, and the page still shows the final listing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time

import pytest

from mrtrweb.demo.server import serve_in_thread
from mrtrweb.mcp import McpConnection
from tests.attack15_servers import _flooding_server
from tests.test_browser import app, browser, expect, live, valved_mcp  # noqa: F401 -- fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def flooder():
    handle = serve_in_thread(server=_flooding_server())
    yield handle
    handle.stop()


async def _flood(url: str) -> None:
    """Someone else makes the server flood (its own connection, not the person's)."""
    async with McpConnection(url, timeout_s=30) as conn:
        await conn.send("tools/call", {"name": "flood", "arguments": {}}, "flood-1")


def test_an_open_server_page_rereads_a_few_times_under_a_list_changed_flood(app, flooder):
    from mrtrweb.models import McpServer

    acme = app.seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant=acme.tenant, name="Flooder", url=flooder.url)
    page = app.sign_in("alice")
    page.goto(f"/mcp/servers/{server.pk}/")
    listing = page.locator("#server-listing")
    expect(listing.locator("a[data-tool='flood']")).to_be_visible()
    expect(listing).to_have_attribute("data-ws-state", "open")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, _flood(flooder.url)).result(timeout=60)
    # told at once: a first re-read within the timeout (a loaded machine may run the burst's second,
    # coalesced push before Playwright polls, so the count may already be 2 when it looks)
    expect(listing).to_have_attribute("data-rereads", re.compile(r"^[1-9][0-9]*$"), timeout=10000)
    time.sleep(3)  # any push still coming has come (the coalescing window is 1 s)
    rereads = int(listing.get_attribute("data-rereads") or "0")
    assert 1 <= rereads <= 3, f"{rereads} re-reads of the listing for one burst"
    expect(listing.locator("a[data-tool='flood']")).to_be_visible()
