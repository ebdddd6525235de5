"""The operation page during a channel-layer outage, in a real browser against a real worker process
(issue 14, item 4): the socket is closed by the worker (1011), the page says "Live updates paused
... reconnecting" in a status region, backs off, comes back on its own once Redis is back, hides
the notice, says so, and the next change arrives by push (not by a reload or a fetch)."""

from __future__ import annotations

import time

import pytest

from ..faults import RedisServer
from ..topology import Cluster, PrivateDatabase, WebSession

pytestmark = [pytest.mark.services, pytest.mark.browser]

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect


@pytest.fixture(scope="module")
def worker(demo_mcp):
    db = PrivateDatabase()
    channels = RedisServer()
    c = Cluster(db, demo_mcp.url, REDIS_CHANNELS_URL=channels.url())
    try:
        c.start("A")
        yield c, channels
    finally:
        c.stop_all()
        channels.close()
        db.drop()


def test_the_page_says_it_reconnects_and_a_push_arrives_after(worker, demo_mcp):
    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    cluster, channels = worker
    base = cluster.url("A")
    api = WebSession()  # alice in another browser: answers the round while the page watches
    api.login(base, "alice", "alice-demo-pw")
    op_id = api.start(base, cluster.server_id(), "connect_account", {"provider": "notice"})
    cluster.wait_status(op_id, "awaiting_input")

    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context().new_page()
            page.goto(base + "/accounts/login/")
            page.fill("#id_username", "alice")
            page.fill("#id_password", "alice-demo-pw")
            page.click("button[type=submit]")
            page.wait_for_url("**/mcp/")
            page.goto(f"{base}/mcp/operations/{op_id}/")
            root = page.locator("#operation")
            notice = page.locator("#live-notice")
            expect(root).to_have_attribute("data-ws-state", "open", timeout=10_000)
            expect(notice).to_be_hidden()

            channels.stop()  # the worker closes the socket (1011); reconnects are refused meanwhile
            expect(notice).to_be_visible(timeout=10_000)
            status = page.get_by_role("status").filter(has_text="Live updates paused")
            expect(status).to_contain_text("Reconnecting in")
            expect(root).to_have_attribute("data-ws-state", "closed")
            time.sleep(2.0)  # a few refused attempts: the page keeps backing off, the notice stays
            expect(notice).to_be_visible()

            channels.start()  # back, empty
            expect(root).to_have_attribute("data-ws-state", "open", timeout=20_000)
            expect(notice).to_be_hidden()
            expect(page.locator("#live")).to_have_text("Live updates resumed.")

            # the next change comes by push: no reload, no panel fetch
            fetched: list[str] = []
            page.on("request", lambda r: fetched.append(r.url))
            page.evaluate("window.__sameDocument = true")
            status_code, body = api.answer(base, op_id, 1)
            assert status_code == 302, body[:300]
            expect(root).to_have_attribute("data-status", "completed", timeout=20_000)
            expect(root).to_contain_text("Account at notice connected.")
            assert page.evaluate("window.__sameDocument") is True
            assert not [u for u in fetched if "/panel/" in u or u.endswith(f"/operations/{op_id}/")], fetched
        finally:
            browser.close()
    log = cluster.logs["A"].read_text()
    assert "connection closed (code 1011): the channel layer is unavailable" in log
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
