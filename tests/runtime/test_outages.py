"""Service outages against real processes (issue 14, items 4 and 5): one uvicorn worker on
production settings whose PostgreSQL is reached through a TCP proxy that can be cut, whose cache
Redis and channel-layer Redis are two private redis-servers that can be stopped or restarted empty.

* readiness flips to 503 within a couple of seconds of each service going away and back to 200
  when it returns; liveness stays 200 throughout;
* a channel-layer restart closes a WebSocket cleanly (code 1011, one log line, no traceback, no
  "Exception in ASGI application"), and a socket opened after it gets pushes again;
* with Redis (cache and channel layer) down, and with PostgreSQL cut, every page a person or an
  admin uses answers without a 500 and the worker logs no traceback: what needs the service
  refuses with a clear 503, the rest works.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import urllib.error
import urllib.request

import pytest
import websockets.sync.client as ws_client
from websockets.exceptions import ConnectionClosed

from ..faults import RedisServer, TcpProxy
from ..topology import Cluster, Log, PrivateDatabase, WebSession, status_in

pytestmark = [pytest.mark.services]


@pytest.fixture(scope="module")
def services():
    db = PrivateDatabase()
    pg = TcpProxy("127.0.0.1", 5432)
    cache, channels = RedisServer(), RedisServer()
    yield db, pg, cache, channels
    for thing in (cache, channels, pg):
        thing.close()
    db.drop()


@pytest.fixture(scope="module")
def worker(services, demo_mcp):
    db, pg, cache, channels = services
    proxied = db.url.replace("127.0.0.1:5432", f"127.0.0.1:{pg.port}")
    c = Cluster(db, demo_mcp.url, redis_url=cache.url(), REDIS_CHANNELS_URL=channels.url(), DATABASE_URL=proxied,
                MRTRWEB_DB_POOL_TIMEOUT_S="2", MRTRWEB_LOG_LEVEL="INFO")
    c.start("A")
    yield c
    c.stop_all()


@pytest.fixture
def up(services):
    """Every service up before and after the test."""
    _, pg, cache, channels = services

    def restore() -> None:
        pg.restore()
        cache.start()
        channels.start()

    restore()
    yield
    restore()


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _wait_ready(base: str, want: int, within_s: float) -> float:
    """Poll /readyz until it answers ``want``; seconds it took (AssertionError past ``within_s``)."""
    t0 = time.monotonic()
    while True:
        status, body = _get(base + "/readyz")
        if status == want:
            assert body == (b'{"status": "ready"}' if want == 200 else b'{"status": "unavailable"}'), body
            return time.monotonic() - t0
        assert time.monotonic() - t0 < within_s, f"/readyz still {status} after {within_s}s (want {want})"
        time.sleep(0.2)


class LivenessWatch:
    """Probes /healthz every 0.2 s in a thread; ``statuses`` holds what each probe got."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.statuses: list[object] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.statuses.append(_get(self.base + "/healthz", timeout=2.0))
            except Exception as exc:  # noqa: BLE001 -- recorded: the assertion shows it
                self.statuses.append(repr(exc))
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_readiness_flips_with_each_service_and_liveness_stays(worker, services, up):
    _, pg, cache, channels = services
    base = worker.url("A")
    _wait_ready(base, 200, 10)
    log = Log(worker)
    watch = LivenessWatch(base)
    took = {}
    try:
        for name, down, back in (("database", pg.cut, pg.restore), ("cache", cache.stop, cache.start),
                                 ("channel layer", channels.stop, channels.start),
                                 ("cache restarted empty", cache.stop, cache.start)):
            down()
            took[name] = _wait_ready(base, 503, 4)
            hold = time.monotonic() + 1.0
            while time.monotonic() < hold:  # and it stays so while the service is away
                assert _get(base + "/readyz")[0] == 503, name
                time.sleep(0.1)
            back()
            _wait_ready(base, 200, 15)
    finally:
        watch.stop()
    assert all(t < 3.0 for t in took.values()), took  # noticed within a couple of seconds
    assert len(watch.statuses) > 10 and set(map(str, watch.statuses)) == {str((200, b'{"status": "live"}'))}, \
        [s for s in watch.statuses if s != (200, b'{"status": "live"}')][:5]
    text = log.text()
    for what in ("not ready: database failed (", "not ready: cache failed (", "not ready: channel layer failed ("):
        assert what in text, text[-3000:]
    # a line when what fails changes (and one when ready again), never one per probe
    assert text.count("not ready:") == 4 and text.count("ready again") == 4, text
    log.assert_clean()


def _cookie(session: WebSession) -> str:
    return "; ".join(f"{c.name}={c.value}" for c in session.jar)


def _socket(base: str, session: WebSession):
    return ws_client.connect(base.replace("http://", "ws://") + "/ws/mrtrweb/", origin=base,
                             additional_headers={"Cookie": _cookie(session)}, open_timeout=10)


def _assert_socket_refused(base: str, session: WebSession) -> None:
    """Opening a socket now fails at the handshake (the worker closes it before accepting: 403)."""
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as refused:
        with _socket(base, session):
            pass
    assert refused.value.response.status_code == 403


def _closed_code(sock, within_s: float) -> int:
    """Read until the server closes the socket; its close code."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            sock.recv(timeout=max(0.1, deadline - time.monotonic()))
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd is not None else -1
        except TimeoutError:
            raise AssertionError(f"the socket was not closed within {within_s}s") from None


@pytest.mark.parametrize("how", ["flushed", "instant-restart", "down-1s"])
def test_channel_layer_restart_closes_sockets_cleanly_and_pushes_resume(worker, services, up, demo_mcp, how):
    """Redis of the channel layer restarted EMPTY or flushed (every group membership gone): every
    socket of the worker is closed with 1011 -- also when no socket's read fails (a flush, a
    restart redis-py's retries hide: the layer watch notices its lost marker) -- and a socket opened
    after it is in its groups again and gets pushes."""
    _, _, _, channels = services
    base = worker.url("A")
    alice = WebSession()
    alice.login(base, "alice", "alice-demo-pw")
    log = Log(worker)
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(_socket(base, alice)) for _ in range(10)]
        for s in sockets:
            s.send(json.dumps({"type": "ping"}))
            assert json.loads(s.recv(timeout=5)) == {"type": "pong"}

        t0 = time.monotonic()
        if how == "flushed":  # no connection drops: only the layer watch can tell
            import redis

            redis.Redis.from_url(channels.url()).flushall()
        else:
            channels.restart(down_s=1.0 if how == "down-1s" else 0.0)
        codes = [_closed_code(s, 15) for s in sockets]
        took = time.monotonic() - t0
    assert codes == [1011] * 10, codes
    assert took < 10, took  # within the watch's period and a little

    # a socket opened after the restart joins its groups again and gets pushes
    deadline = time.monotonic() + 15
    while True:
        try:
            fresh = _socket(base, alice)
            break
        except Exception:  # noqa: BLE001 -- refused (1011) while the layer comes back
            assert time.monotonic() < deadline
            time.sleep(0.5)
    with fresh:
        op_id = alice.start(base, worker.server_id(), "connect_account", {"provider": f"after-{how}"})
        deadline = time.monotonic() + 20
        while True:
            msg = json.loads(fresh.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("type") == "operation" and msg.get("id") == op_id and msg.get("status") == "awaiting_input":
                break
        assert msg["html"] and "form" in msg["html"]
    text = log.text()
    # one line for the event (the watch's, or the socket that saw it and closed the others), no traceback
    assert re.search(r"the channel layer is (restarted or emptied \(its groups are gone\)|unavailable \(\w+\)): closing \d+ WebSocket", text) \
        or "connection closed (code 1011): the channel layer is unavailable" in text, text[-3000:]
    assert text.count("closing") + text.count("connection closed (code 1011)") <= 3, text
    log.assert_clean()


ADMIN_PAGES = ("/admin/", "/admin/mrtrweb/operation/", "/admin/mrtrweb/tenant/", "/admin/mrtrweb/mcpserver/",
               "/admin/mrtrweb/auditevent/", "/admin/auth/user/")


def _pages(base: str, server_id: int, op_id: str) -> list[str]:
    return [f"{base}/mcp/", f"{base}/mcp/servers/{server_id}/", f"{base}/mcp/servers/{server_id}/tools/echo/",
            f"{base}/mcp/operations/{op_id}/", f"{base}/mcp/operations/{op_id}/panel/", f"{base}/mcp/history/",
            f"{base}/mcp/connections/", f"{base}/accounts/login/"]


def _fresh_sign_in(base: str, username: str, password: str) -> tuple[int, str, str]:
    """A sign-in from a new browser: the form (its CSRF cookie), then the POST."""
    session = WebSession()
    assert session.request(base + "/accounts/login/")[0] == 200
    return session.request(base + "/accounts/login/", {"username": username, "password": password})


def test_redis_down_no_500_anywhere(worker, services, up, demo_mcp):
    """Cache and channel layer both down: pages, start, answer and sign-out work (bindings live in
    the database); a sign-in or a Stop of a running call refuses with a clear 503."""
    _, _, cache, channels = services
    base = worker.url("A")
    server = worker.server_id()
    alice, admin = WebSession(), WebSession()
    alice.login(base, "alice", "alice-demo-pw")
    admin.login(base, "admin", "admin-demo-pw")
    waiting = alice.start(base, server, "connect_account", {"provider": "before"})
    worker.wait_status(waiting, "awaiting_input")
    log = Log(worker)
    cache.stop()
    channels.stop()

    seen: dict[str, int] = {}
    for url in _pages(base, server, waiting):
        seen[url] = alice.request(url)[0]
    for page in ADMIN_PAGES:
        seen[page] = admin.request(base + page)[0]
    assert all(code == 200 for code in seen.values()), seen
    _assert_socket_refused(base, alice)  # its push group cannot be joined: refused, the page retries

    # a new sign-in: its attempts cannot be counted -> a clear 503, nothing checked
    status, _, body = _fresh_sign_in(base, "carol", "carol-demo-pw")
    assert status == 503 and "Signing in is not possible right now" in body, (status, body[:300])

    # the waiting round is answered (the binding store is the database) and completes
    status, body = alice.answer(base, waiting, 1)
    assert status == 302, body[:300]
    worker.wait_status(waiting, "completed")

    # start a call, stop it: the stop cannot reach the worker driving it -> a clear 503, the call goes on
    running = alice.start(base, server, "long_task", {"seconds": "6"})
    worker.wait_status(running, "running")
    status, _, body = alice.request(f"{base}/mcp/operations/{running}/stop/", {})
    assert status == 503 and "The stop could not be passed on" in body, (status, body[:300])
    worker.wait_status(running, "completed", timeout_s=30)
    assert status_in(alice.page(base, running)) == "completed"

    # a round stopped while it waits needs no cache: denied, nothing sent
    stopped = alice.start(base, server, "connect_account", {"provider": "stopped"})
    worker.wait_status(stopped, "awaiting_input")
    status, _, _ = alice.request(f"{base}/mcp/operations/{stopped}/stop/", {})
    assert status == 302
    worker.wait_status(stopped, "denied")

    status, location, _ = alice.request(base + "/accounts/logout/", {})
    assert status == 302 and "login" in location
    assert alice.request(base + "/mcp/")[0] == 302  # signed out

    text = log.text()
    assert "sign-in refused: the attempt counter is unavailable" in text
    assert "could not join its push group (ConnectionError); connection closed" in text
    assert re.search(r"push failed: the channel layer is unavailable", text), text[-3000:]
    log.assert_clean()

    cache.start()
    channels.start()
    alice.login(base, "alice", "alice-demo-pw")  # signing in works again


def test_database_cut_no_500_anywhere(worker, services, up, demo_mcp):
    """PostgreSQL unreachable: every page answers 503 "nothing was sent" (never a 500, no traceback),
    and everything works again once it is back."""
    _, pg, _, _ = services
    base = worker.url("A")
    server = worker.server_id()
    alice, admin = WebSession(), WebSession()
    alice.login(base, "alice", "alice-demo-pw")
    admin.login(base, "admin", "admin-demo-pw")
    waiting = alice.start(base, server, "connect_account", {"provider": "pg-cut"})
    worker.wait_status(waiting, "awaiting_input")
    log = Log(worker)
    pg.cut()

    seen: dict[str, int] = {}
    for url in _pages(base, server, waiting)[:-1]:
        seen[url] = alice.request(url)[0]
    for page in ADMIN_PAGES:
        seen[page] = admin.request(base + page)[0]
    seen["start"] = alice.request(f"{base}/mcp/servers/{server}/tools/echo/", {"arg-text": "x"})[0]
    seen["answer"] = alice.answer(base, waiting, 1)[0]
    seen["stop"] = alice.request(f"{base}/mcp/operations/{waiting}/stop/", {})[0]
    seen["sign-in"] = _fresh_sign_in(base, "carol", "carol-demo-pw")[0]
    seen["sign-out"] = alice.request(base + "/accounts/logout/", {})[0]
    assert set(seen.values()) <= {503}, seen
    _assert_socket_refused(base, admin)  # its session cannot be read: refused, the page retries
    assert WebSession().request(base + "/accounts/login/")[0] == 200  # the sign-in form needs no database
    assert "websocket /ws/mrtrweb/ refused: the database is unavailable" in log.text()
    log.assert_clean()

    pg.restore()
    t0 = time.monotonic()
    while alice.request(f"{base}/mcp/operations/{waiting}/")[0] != 200:
        assert time.monotonic() - t0 < 30, "the worker did not reach PostgreSQL again within 30 s"
        time.sleep(0.5)
    # the pool checks its connections before handing them out (CONN_HEALTH_CHECKS): none of those
    # the cut broke fails a request after it is back
    for url in _pages(base, server, waiting)[:-1]:
        assert alice.request(url)[0] == 200, url
    # the WebSocket's session lookup too: refused cleanly (403) while the worker's pool still
    # reconnects (its back-off, longer on a loaded machine), then accepted, within the same 30 s
    from websockets.exceptions import InvalidStatus

    while True:
        try:
            with _socket(base, admin) as sock:
                sock.send(json.dumps({"type": "ping"}))
                assert json.loads(sock.recv(timeout=5)) == {"type": "pong"}
            break
        except InvalidStatus as exc:
            assert exc.response.status_code == 403, exc.response.status_code
            assert time.monotonic() - t0 < 30, "the WebSocket was not accepted again within 30 s"
            time.sleep(0.5)
    status, body = alice.answer(base, waiting, 1)
    assert status == 302, body[:300]
    worker.wait_status(waiting, "completed")


def test_a_draining_worker_is_out_of_rotation_until_it_exits(worker, up, demo_mcp):
    """SIGTERM with a call in flight: from that moment the worker's probes are refused (uvicorn
    closed its listener: "not ready" to any load balancer), its lease says draining (readiness
    would answer "draining"), the other worker stays ready, the call completes, then it exits."""
    import signal
    import socket
    import urllib.parse

    # The other worker is a fresh one, ready before D drains: A went through the database cut of
    # an earlier test, and its pool finds the connections the cut broke one checkout at a time
    # (a probe that meets one waits for the pool's reconnect back-off and reads "not ready")
    base_e = worker.start("E")
    _wait_ready(base_e, 200, 30)
    base_d = worker.start("D")
    port_d = urllib.parse.urlsplit(base_d).port
    alice = WebSession()
    alice.login(base_d, "alice", "alice-demo-pw")
    op_id = alice.start(base_d, worker.server_id(), "long_task", {"seconds": "5"})
    worker.wait_status(op_id, "running")
    assert _get(base_d + "/readyz")[0] == 200
    proc, _ = worker.workers.pop("D")
    proc.send_signal(signal.SIGTERM)
    try:
        deadline = time.monotonic() + 5
        while True:  # the listener closes at once
            try:
                socket.create_connection(("127.0.0.1", port_d), timeout=1).close()
            except ConnectionRefusedError:
                break
            except ConnectionResetError:
                pass  # the listener closed with this connection in its queue (ci43): closing, look again
            assert time.monotonic() < deadline, "the draining worker still accepts connections"
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while not worker.db.query("SELECT count(*) FROM mrtrweb_workerlease WHERE pid = %s AND draining",
                                  proc.pid)[0][0]:
            assert time.monotonic() < deadline, "the worker's lease never said draining"
            time.sleep(0.1)
        assert proc.poll() is None and worker.status(op_id) == "running"  # still draining its call
        assert _get(base_e + "/readyz")[0] == 200  # the other worker takes the traffic
        worker.wait_status(op_id, "completed", timeout_s=30)
        proc.wait(timeout=30)  # and exits after it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        other, _ = worker.workers.pop("E")
        other.terminate()
        other.wait(15)


def test_connections_a_database_blip_broke_fail_no_request_after_it(worker, services, up):
    """PostgreSQL's connections cut and the network back at once (a failover, a proxy restart):
    the pooled connections are all broken, yet requests after it succeed -- the pool checks a
    connection before handing it out (CONN_HEALTH_CHECKS) and replaces the broken ones. (Without
    the checks each broken connection fails a request at once: here the first several.) Within one
    request the pool checks a second broken connection at once, then backs off (1 s, 2 s, ...), so a
    request may outlast the pool's timeout (2 s here, MRTRWEB_DB_POOL_TIMEOUT_S; 10 s by default) and
    get the 503 page -- having discarded at least two broken connections. How many requests that is
    depends on how many connections the warm-up left in the pool (more on a loaded machine, where
    its requests overlap more), so the test asserts the mechanism: 503s only first, each after the
    whole pool timeout (never at once, as a request handed a broken connection would fail), at
    most one per two connections the pool may hold, and only 200s once one request got through."""
    from concurrent.futures import ThreadPoolExecutor

    _, pg, _, _ = services
    base = worker.url("A")
    alice = WebSession()
    alice.login(base, "alice", "alice-demo-pw")
    with ThreadPoolExecutor(max_workers=8) as pool:  # several pooled connections in use, then idle
        # the warm-up, before any blip: on a loaded machine the pool opening its connections may
        # keep one request past the 2 s pool timeout (a 503 of setup, ci18), so a burst is tried
        # again until one is all 200 -- the pool then holds the connections the blip breaks
        bursts = [set(pool.map(lambda _: alice.request(base + "/mcp/")[0], range(16)))]
        while bursts[-1] != {200} and len(bursts) < 4:
            bursts.append(set(pool.map(lambda _: alice.request(base + "/mcp/")[0], range(16))))
        assert bursts[-1] == {200}, bursts
    log = Log(worker)
    pg.cut()
    pg.restore()
    pool_timeout_s = float(worker.env["MRTRWEB_DB_POOL_TIMEOUT_S"])  # 2 s (the fixture)
    pool_max_size = 10  # settings_prod's MRTRWEB_DB_POOL_SIZE default (the fixture leaves it)
    timed = []
    for _ in range(12):
        started = time.monotonic()
        status = alice.request(base + "/mcp/")[0]
        timed.append((status, round(time.monotonic() - started, 2)))
    statuses = [status for status, _ in timed]
    failed = statuses.count(503)
    assert statuses == [503] * failed + [200] * (12 - failed), timed
    assert failed <= pool_max_size // 2, timed  # each discarded at least two broken connections
    assert all(took >= pool_timeout_s for status, took in timed if status == 503), timed
    with _socket(base, alice) as sock:
        sock.send(json.dumps({"type": "ping"}))
        assert json.loads(sock.recv(timeout=5)) == {"type": "pong"}
    log.assert_clean()
