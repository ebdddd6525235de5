"""An open operation page during a PostgreSQL outage (issue 26, item 2), in real Chromium against
a real worker whose PostgreSQL is reached through a TCP proxy that is cut: a push arrives while the
socket's session cannot be read. Before issue 26 that read failure counted as a session that is
gone (4401): the page reloaded into the bare "Temporarily unavailable" page and stayed there. Now
the socket closes as for any outage (1011): the page keeps its card, says live updates are paused,
and comes back by itself once the database is back."""

from __future__ import annotations

import os
import time

import pytest

from ..faults import RedisServer, TcpProxy
from ..topology import Cluster, PrivateDatabase, WebSession

pytestmark = [pytest.mark.services, pytest.mark.browser]

#: how long PostgreSQL stays cut (seconds; ``MRTRWEB_TEST_OUTAGE_S`` for longer)
OUTAGE_S = float(os.environ.get("MRTRWEB_TEST_OUTAGE_S", "45"))

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect


@pytest.fixture(scope="module")
def worker(demo_mcp):
    db = PrivateDatabase()
    pg = TcpProxy("127.0.0.1", 5432)
    redis = RedisServer()
    proxied = db.url.replace("127.0.0.1:5432", f"127.0.0.1:{pg.port}")
    c = Cluster(db, demo_mcp.url, redis_url=redis.url(0), REDIS_CHANNELS_URL=redis.url(1), DATABASE_URL=proxied,
                MRTRWEB_DB_POOL_TIMEOUT_S="2", MRTRWEB_LOG_LEVEL="INFO")
    try:
        c.start("A")
        yield c, pg
    finally:
        c.stop_all()
        pg.restore()
        for thing in (redis, pg):
            thing.close()
        db.drop()


def test_a_page_keeps_its_card_through_a_database_outage(worker):
    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    cluster, pg = worker
    base = cluster.url("A")
    api = WebSession()  # alice elsewhere: a call whose progress is pushed to every socket of hers
    api.login(base, "alice", "alice-demo-pw")
    op_id = api.start(base, cluster.server_id(), "connect_account", {"provider": "outage"})
    cluster.wait_status(op_id, "awaiting_input")
    log_start = cluster.logs["A"].stat().st_size

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
            card = page.locator("#operation form")
            expect(root).to_have_attribute("data-ws-state", "open", timeout=10_000)
            expect(card.first).to_be_visible()
            expect(notice).to_be_hidden()

            api.start(base, cluster.server_id(), "long_task", {"seconds": "12"})  # a push every second
            time.sleep(1.5)
            pg.cut()
            t_cut = time.monotonic()
            # a push arrives, its session cannot be read: the socket pauses, the page stays
            expect(notice).to_be_visible(timeout=12_000)
            expect(page.get_by_role("status").filter(has_text="Live updates paused")).to_contain_text("Reconnecting")
            time.sleep(2.0)  # refused reconnects meanwhile: still the same page, card and all
            assert page.url.rstrip("/").endswith(op_id)
            assert "Temporarily unavailable" not in page.content()
            expect(card.first).to_be_visible()
            expect(page.locator("#operation [data-status]").first).to_have_attribute("data-status", "awaiting_input")

            # longer than every hold of the worker (the pool's 2 s wait for a connection, a lease
            # stale after three 1 s heartbeats) and than the 21-40 s after which pages were thrown out
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - t_cut)))
            pg.restore()
            print(f"PostgreSQL cut for {time.monotonic() - t_cut:.1f} s")
            expect(root).to_have_attribute("data-ws-state", "open", timeout=30_000)
            expect(notice).to_be_hidden()
            expect(card.first).to_be_visible()
            assert page.url.rstrip("/").endswith(op_id)
        finally:
            browser.close()
    with cluster.logs["A"].open("rb") as f:
        f.seek(log_start)
        log = f.read().decode("utf-8", "replace")
    assert "its session cannot be read now; the page keeps what it shows and reconnects" in log, log[-3000:]
    assert "session ended (session_gone)" not in log
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
