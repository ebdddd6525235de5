"""Production topology on real services: two ASGI worker processes sharing PostgreSQL (a private
database) and Redis (private key prefixes). Nothing lost, nothing sent twice. The bindings are in
the database (the default store) unless a test says otherwise."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ..topology import Cluster, PrivateDatabase, WebSession, free_port, status_in, wait_port

pytestmark = [pytest.mark.services]


@pytest.fixture(scope="module")
def db():
    database = PrivateDatabase()
    yield database
    database.drop()


@pytest.fixture(scope="module")
def cluster(db, demo_mcp):
    c = Cluster(db, demo_mcp.url)
    c.start("A")
    c.start("B")
    yield c
    c.stop_all()


@pytest.fixture
def alice(cluster):
    session = WebSession()
    session.login(cluster.url("A"), "alice", "alice-demo-pw")
    return session


def _retries(mcp, tool: str) -> int:
    return mcp.calls[(tool, True)]


def test_round_received_on_a_is_answered_in_a_browser_on_b(cluster, alice, demo_mcp):
    from playwright.sync_api import expect, sync_playwright

    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    a, b = cluster.url("A"), cluster.url("B")
    demo_mcp.log.clear()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context().new_page()
            page.goto(b + "/accounts/login/")
            page.fill("#id_username", "alice")
            page.fill("#id_password", "alice-demo-pw")
            page.click("button[type=submit]")
            page.wait_for_url("**/mcp/")
            # The call goes out from worker A; the server thinks for 3 s before asking.
            op_id = alice.start(a, cluster.server_id(), "wait_then_ask", {"seconds": "3"})
            page.goto(f"{b}/mcp/operations/{op_id}/")
            expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open", timeout=10_000)
            assert page.locator("form.card").count() == 0  # not there yet: it must be pushed
            card = page.locator("form.card")
            expect(card).to_be_visible(timeout=20_000)  # pushed from A's task through Redis to B's socket
            expect(card).to_contain_text("Go on?")
            card.get_by_role("button", name="Accept").click()
            review = page.locator("form.review")  # reviewed on B, nothing sent yet
            expect(review).to_be_visible(timeout=10_000)
            assert _retries(demo_mcp, "wait_then_ask") == 0
            review.get_by_role("button", name="Send").click()
            expect(page.locator(".result")).to_contain_text("Went on.", timeout=20_000)
        finally:
            browser.close()
    assert _retries(demo_mcp, "wait_then_ask") == 1
    rows = cluster.db.query("SELECT event FROM mrtrweb_auditevent WHERE operation_id = %s ORDER BY id", op_id)
    assert [r[0] for r in rows] == ["received", "shown", "submitted", "completed"]


def test_hundred_rounds_each_answered_twice_across_workers(cluster, alice, demo_mcp):
    a, b = cluster.url("A"), cluster.url("B")
    server = cluster.server_id()
    demo_mcp.log.clear()
    ops = [alice.start(a if i % 2 else b, server, "connect_account", {"provider": f"p{i}"}) for i in range(100)]
    cluster.wait_status(ops, "awaiting_input", timeout_s=120)

    def answer_pair(op_id: str) -> list[int]:
        gate = threading.Barrier(2)
        results: list[int] = []

        alice.page(a, op_id)  # the card is shown (consent receipt) before the two answers race
        status, token, body = alice.review(a, op_id, 1)  # reviewed once (nothing sent), then Send races
        assert status == 200 and token, (status, body[:300])

        def one(base: str) -> None:
            gate.wait()
            status, _ = alice.send(base, op_id, 1, token)
            results.append(status)

        threads = [threading.Thread(target=one, args=(base,)) for base in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(results)

    with ThreadPoolExecutor(max_workers=10) as pool:
        outcomes = list(pool.map(answer_pair, ops))
    cluster.wait_status(ops, "completed", timeout_s=120)
    assert all(o == [302, 409] for o in outcomes), [o for o in outcomes if o != [302, 409]][:5]
    assert _retries(demo_mcp, "connect_account") == 100  # exactly one retry per round
    assert demo_mcp.calls[("connect_account", False)] == 100
    submitted = cluster.db.query("SELECT count(*) FROM mrtrweb_auditevent WHERE event = 'submitted' "
                                 "AND operation_id::text = ANY(%s)", ops)[0][0]
    assert submitted == 100


def test_worker_killed_while_round_pending(cluster, alice, demo_mcp):
    a = cluster.url("A")
    demo_mcp.log.clear()
    op_id = alice.start(a, cluster.server_id(), "connect_account", {"provider": "kill-test"})
    cluster.wait_status(op_id, "awaiting_input")
    cluster.kill("A")
    try:
        b = cluster.url("B")
        assert status_in(alice.page(b, op_id)) == "awaiting_input"
        status, body = alice.answer(b, op_id, 1)
        assert status == 302, body[:300]
        cluster.wait_status(op_id, "completed")
        assert _retries(demo_mcp, "connect_account") == 1
    finally:
        cluster.start("A")


def test_worker_killed_during_a_call_marks_it_interrupted(cluster, alice, demo_mcp):
    a = cluster.url("A")
    op_id = alice.start(a, cluster.server_id(), "long_task", {"seconds": "30"})
    deadline = time.monotonic() + 20
    while not cluster.db.query("SELECT worker FROM mrtrweb_operation WHERE id = %s", op_id)[0][0]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cluster.kill("A")
    try:
        b = cluster.url("B")
        deadline = time.monotonic() + 30
        body = alice.page(b, op_id)
        while status_in(body) != "interrupted":
            assert time.monotonic() < deadline, status_in(body)
            time.sleep(0.5)
            body = alice.page(b, op_id)
        assert "The worker handling this call stopped" in body and "Run again" in body
        events = [r[0] for r in cluster.db.query(
            "SELECT event || ':' || code FROM mrtrweb_auditevent WHERE operation_id = %s ORDER BY id", op_id)]
        assert events == ["failed:worker_lost"]
    finally:
        cluster.start("A")


@pytest.fixture
def own_redis(tmp_path):
    """A separate Redis (append-only file in a temp dir) on another port: the shared one is untouched."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed")
    port = free_port()
    cmd = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--appendonly", "yes",
           "--appendfsync", "always", "--save", ""]

    class Handle:
        proc: subprocess.Popen | None = None

        def start(self) -> None:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(port)

        def stop(self) -> None:
            if self.proc is not None:
                self.proc.terminate()  # SIGTERM: Redis flushes its append-only file and exits
                self.proc.wait(timeout=10)
                self.proc = None

    handle = Handle()
    handle.url = f"redis://127.0.0.1:{port}/0"
    handle.start()
    yield handle
    handle.stop()


def test_redis_down_fails_closed_then_recovers_with_the_cache_store(db, demo_mcp, own_redis):
    """With ``BINDING_STORE = "cache"`` the bindings are in Redis: Redis down -> the answer is
    refused 503 (nothing sent), answerable once it is back. With the database store (the default)
    Redis down does not stop an answer: tests/runtime/test_redis_restart.py."""
    c = Cluster(db, demo_mcp.url, redis_url=own_redis.url, MRTRWEB_BINDING_STORE="cache")
    try:
        base = c.start("C")
        user = WebSession()
        user.login(base, "alice", "alice-demo-pw")
        demo_mcp.log.clear()
        op_id = user.start(base, c.server_id(), "connect_account", {"provider": "redis-down"})
        c.wait_status(op_id, "awaiting_input")
        user.page(base, op_id)  # alice sees the card

        own_redis.stop()
        status, body = user.answer(base, op_id, 1)
        assert status == 503 and "round store is unavailable" in body and "nothing was sent" in body.lower()
        time.sleep(0.5)
        assert _retries(demo_mcp, "connect_account") == 0
        assert c.status(op_id) == "awaiting_input"
        log = c.logs["C"].read_text()
        assert "binding store" in log and "failed" in log  # the reason is logged

        own_redis.start()
        status, body = user.answer(base, op_id, 1)
        assert status == 302, body[:400]
        c.wait_status(op_id, "completed")
        assert _retries(demo_mcp, "connect_account") == 1
    finally:
        c.stop_all()


def test_postgres_down_fails_closed_then_recovers(demo_mcp, own_postgres):
    class Db(PrivateDatabase):
        def __init__(self, url: str) -> None:  # the private server's own database
            self.name, self.url = "postgres", url

    db = Db(own_postgres.url)
    c = Cluster(db, demo_mcp.url, MRTRWEB_DB_POOL_TIMEOUT_S="2")
    try:
        base = c.start("P")
        user = WebSession()
        user.login(base, "alice", "alice-demo-pw")
        demo_mcp.log.clear()
        op_id = user.start(base, c.server_id(), "connect_account", {"provider": "pg-down"})
        c.wait_status(op_id, "awaiting_input")
        user.page(base, op_id)  # alice sees the card

        own_postgres.stop()
        status, body = user.answer(base, op_id, 1)
        assert status == 503 and "database is unreachable" in body and "Nothing was sent" in body
        assert _retries(demo_mcp, "connect_account") == 0
        assert "database unavailable" in c.logs["P"].read_text()  # the reason is logged

        own_postgres.start()
        deadline = time.monotonic() + 30
        while True:  # a pooled connection broken by the restart may fail one request, closed
            status, body = user.answer(base, op_id, 1)
            if status != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert status == 302, body[:400]
        c.wait_status(op_id, "completed")
        assert _retries(demo_mcp, "connect_account") == 1
    finally:
        c.stop_all()
