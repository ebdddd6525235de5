"""The list_changed flood of ``tests/views/test_attack15.py`` seen from a real browser (Playwright +
Debian Chromium against the live ASGI app; fixtures from ``tests/browser.py``): a server that
says its tools changed 2,000 times in a burst makes the open server page re-read its listing a few
times, not hundreds, and the page still shows the final listing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
import time
from urllib.parse import urlsplit

import pytest

from mrtrweb.demo.server import serve_in_thread
from mrtrweb.mcp import McpConnection
from tests.attack15_servers import _flooding_server
from tests.browser import expect

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


def test_an_open_server_page_rereads_a_few_times_under_a_list_changed_flood(app, flooder, caplog):
    """How many re-reads a burst makes depends on how many coalescing windows it spans (a loaded
    machine reads 2,000 notifications slower): the test asserts what bounds them, not a count. The
    server side calls back (one log line, one push) at most once per :data:`COALESCE_S`; the page
    re-reads at most once per push it gets (one fetch at a time, pushes meanwhile make one more)."""
    from mrtrweb.mcp.list_changed import COALESCE_S
    from mrtrweb.models import McpServer

    acme = app.seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant=acme.tenant, name="Flooder", url=flooder.url)
    page = app.sign_in("alice")
    pushes: list[str] = []  # the listing pushes for this server the page's WebSocket received

    def on_frame(payload) -> None:
        try:
            msg = json.loads(payload)
        except (TypeError, ValueError):
            return
        if isinstance(msg, dict) and msg.get("type") == "listing" and msg.get("server") == server.pk:
            pushes.append(msg["kind"])

    page.on("websocket", lambda ws: ws.on("framereceived", on_frame))
    page.goto(f"/mcp/servers/{server.pk}/")
    listing = page.locator("#server-listing")
    expect(listing.locator("a[data-tool='flood']")).to_be_visible()
    expect(listing).to_have_attribute("data-ws-state", "open")
    with caplog.at_level(logging.INFO, logger="mrtrweb.mcp.connection"):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
            pool.submit(asyncio.run, _flood(flooder.url)).result(timeout=60)
        # told at once: a first re-read within the timeout
        expect(listing).to_have_attribute("data-rereads", re.compile(r"^[1-9][0-9]*$"), timeout=10000)
        time.sleep(3)  # the burst's last, coalesced push has come (the window is 1 s); not a bound below
        # read in this order, each count only grows: re-reads <= pushes read later <= callbacks read later
        rereads = int(listing.get_attribute("data-rereads") or "0")
        page.evaluate("1")  # the frames the browser got before are dispatched to on_frame by now
        pushed = len(pushes)
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(flooder.url))
        said = [r for r in caplog.records if r.getMessage().startswith(f"server {origin} says its tools changed")]
    assert 1 <= rereads <= pushed, f"{rereads} re-reads of the listing for {pushed} pushes"
    assert pushed <= len(said), f"{pushed} pushes for {len(said)} callbacks"
    assert set(pushes) == {"tools"}
    for before, after in zip(said, said[1:]):
        gap = after.created - before.created
        assert gap >= COALESCE_S - 0.01, f"two callbacks {gap:.3f} s apart (at least {COALESCE_S})"
    expect(listing.locator("a[data-tool='flood']")).to_be_visible()
