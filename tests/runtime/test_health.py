"""Liveness and readiness (mrtrweb.runtime.health), in process: each failing check flips readiness to 503,
the body names nothing, live touches no service, the probes pass host validation and the TLS
redirect, a blocked check neither holds the probe nor piles up threads, the reason is logged once.
The same against real processes and services: tests/runtime/test_outages.py."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError
from django.test import AsyncClient, Client

from mrtrweb.runtime import drain, health

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fresh():
    health.reset()
    drain.reset()
    yield
    drain.reset()
    health.reset()


class DownCache:
    """A cache backend whose every call fails as django-redis does with Redis down."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            import redis

            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

        return fail


def _body(resp) -> dict:
    return json.loads(resp.content)


async def _ready():
    return await AsyncClient().get("/readyz")


async def test_ready_when_every_service_answers():
    resp = await _ready()
    assert resp.status_code == 200 and _body(resp) == {"status": "ready"}
    assert resp["Cache-Control"] == "no-store" and resp["Content-Type"] == "application/json"


async def test_live_touches_no_service(monkeypatch):
    from channels import layers
    from django.core.cache.backends.locmem import LocMemCache
    from django.db.backends.base.base import BaseDatabaseWrapper

    touched = []

    def forbidden(*args, **kwargs):
        touched.append(args)
        raise AssertionError("live touched a service")

    for cls, names in ((BaseDatabaseWrapper, ("cursor", "ensure_connection")),
                       (LocMemCache, ("get", "set", "add", "get_many", "incr")),
                       (layers.InMemoryChannelLayer, ("group_send", "send", "receive"))):
        for name in names:
            monkeypatch.setattr(cls, name, forbidden)
    monkeypatch.setattr(layers, "get_channel_layer", forbidden)
    monkeypatch.setattr(health, "_checks", forbidden)
    drain.begin_draining()  # a draining worker still lives
    for path in ("/healthz", "/healthz/"):
        for resp in (await AsyncClient().get(path), await sync_to_async(Client().get)(path)):
            assert resp.status_code == 200 and _body(resp) == {"status": "live"}
    assert touched == []


@pytest.mark.parametrize("check", ["database", "binding store", "cache", "channel layer"])
async def test_each_failing_check_makes_the_worker_unready(check, monkeypatch, settings, caplog):
    from django.db.backends.base.base import BaseDatabaseWrapper

    from mrtrweb.bindings.database import DatabaseBindingStore
    from mrtrweb.gate import StoreUnavailable

    if check == "database":
        real_cursor = BaseDatabaseWrapper.cursor

        def cursor(self):  # only the health thread's connection fails: the test's own still works
            if threading.current_thread().name.startswith("mrtrweb-health"):
                raise OperationalError("connection refused")
            return real_cursor(self)

        monkeypatch.setattr(BaseDatabaseWrapper, "cursor", cursor)
    elif check == "binding store":
        def load(self, tenant, operation_id):
            raise StoreUnavailable("binding store unavailable (read)")

        monkeypatch.setattr(DatabaseBindingStore, "load", load)
    elif check == "cache":
        settings.CACHES = {"default": {"BACKEND": "tests.runtime.test_health.DownCache"}}
    else:  # a real channels-redis layer on a port nobody listens on
        from mrtrweb.bench.common import free_port

        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                               "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]}}}
    with caplog.at_level(logging.INFO, logger="mrtrweb.health"):
        resp = await _ready()
        assert resp.status_code == 503 and resp["Retry-After"] == "5"
        # the body reveals nothing: no service, no error, no version
        assert resp.content == b'{"status": "unavailable"}'
        sync = await sync_to_async(Client().get)("/readyz")  # the sync (WSGI) path answers the same
        assert sync.status_code == 503 and sync.content == b'{"status": "unavailable"}'
    assert f"not ready: {check} failed (" in caplog.text and "Traceback" not in caplog.text
    others = {"database", "binding store", "cache", "channel layer"} - {check}
    assert not any(f"{o} failed" in caplog.text for o in others), caplog.text


async def test_draining_is_not_ready(caplog):
    drain.begin_draining()
    with caplog.at_level(logging.INFO, logger="mrtrweb.health"):
        resp = await _ready()
    assert resp.status_code == 503 and _body(resp) == {"status": "draining"}
    assert "not ready: draining" in caplog.text
    drain.reset()
    assert (await _ready()).status_code == 200


def test_probes_pass_host_validation_and_the_tls_redirect(settings):
    settings.SECURE_SSL_REDIRECT = True  # production: http is redirected to https ...
    settings.ALLOWED_HOSTS = ["app.example"]
    client = Client()
    for path, state in (("/healthz", "live"), ("/readyz", "ready")):
        resp = client.get(path, HTTP_HOST="10.0.0.7:8000")  # ... a probe by IP address, plain http
        assert resp.status_code == 200 and _body(resp) == {"status": state}
    # every other request is still validated and redirected
    assert client.get("/mcp/", HTTP_HOST="10.0.0.7:8000").status_code == 400
    assert client.get("/mcp/", HTTP_HOST="app.example").status_code == 301
    assert client.get("/healthzz", HTTP_HOST="app.example").status_code == 301


async def test_only_get_and_head():
    client = AsyncClient()
    for path in ("/healthz", "/readyz"):
        head = await client.head(path)
        assert head.status_code == 200 and head.content == b"" and head["Cache-Control"] == "no-store"
        for method in (client.post, client.put, client.delete):
            resp = await method(path)
            assert resp.status_code == 405 and resp["Allow"] == "GET, HEAD" and resp.content == b""


async def test_a_blocked_check_neither_holds_the_probe_nor_piles_up(monkeypatch):
    started = []
    release = threading.Event()

    def blocked() -> None:  # a database that accepts connections and never answers
        started.append(time.monotonic())
        release.wait(10)

    monkeypatch.setattr(health, "_database", blocked)
    try:
        t0 = time.monotonic()
        resp = await _ready()
        first = time.monotonic() - t0
        assert resp.status_code == 503 and first < health.CHECK_TIMEOUT_S + 1.0, first
        t0 = time.monotonic()
        for _ in range(5):  # the previous run is still blocked: failing at once, no new thread
            assert (await _ready()).status_code == 503
        assert time.monotonic() - t0 < 2.0 and len(started) == 1
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while (await _ready()).status_code != 200:  # the blocked run returned: checked again, ready
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert len(started) == 2


async def test_the_reason_is_logged_once_not_per_probe(monkeypatch, caplog):
    def down() -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(health, "_database", down)
    with caplog.at_level(logging.INFO, logger="mrtrweb.health"):
        for _ in range(10):
            assert (await _ready()).status_code == 503
        monkeypatch.undo()
        assert (await _ready()).status_code == 200
        assert (await _ready()).status_code == 200
    lines = [r for r in caplog.records if r.name == "mrtrweb.health"]
    assert [(r.levelname, r.getMessage()) for r in lines] == [
        ("WARNING", "not ready: database failed (OperationalError)"),
        ("INFO", "ready again after 0 s (was: database failed (OperationalError))")]
    # and Django's request log does not add a "Service Unavailable: /readyz" line per probe
    assert not [r for r in caplog.records if r.name == "django.request"]



def _health_lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "mrtrweb.health"]


async def test_a_change_is_logged_at_once_and_the_same_cause_reminded_every_few_minutes(monkeypatch, caplog):
    """Issue 26, item 4: probes every 10 s for 11 minutes of one outage log one line and two
    reminders (not one line a minute); a new cause and the return to ready are logged at once.
    The clock is injected (:class:`health.ReadinessLog`); the probes are real /readyz requests."""
    now = [5000.0]
    database, cache = health._database, health._cache
    monkeypatch.setattr(health, "_readiness_log", health.ReadinessLog(clock=lambda: now[0]))
    assert health.REMIND_EVERY_S == 300.0

    def down() -> None:
        raise OperationalError("connection refused")

    async def probes(seconds: int, status: int) -> None:
        for _ in range(seconds // 10):
            assert (await _ready()).status_code == status
            now[0] += 10

    monkeypatch.setattr(health, "_database", down)
    with caplog.at_level(logging.INFO, logger="mrtrweb.health"):
        await probes(660, 503)  # t = 0 .. 650 s
        assert _health_lines(caplog) == [
            ("WARNING", "not ready: database failed (OperationalError)"),
            ("WARNING", "still not ready for 300 s: database failed (OperationalError)"),
            ("WARNING", "still not ready for 600 s: database failed (OperationalError)")]
        caplog.clear()

        def cache_down() -> None:
            raise ConnectionError("cache down")

        monkeypatch.setattr(health, "_cache", cache_down)  # the cause changes: logged at once
        await probes(20, 503)
        monkeypatch.setattr(health, "_database", database)
        await probes(20, 503)  # and again: only the cache fails now
        drain.begin_draining()
        await probes(20, 503)
        drain.reset()
        monkeypatch.setattr(health, "_cache", cache)
        await probes(20, 200)
    assert _health_lines(caplog) == [
        ("WARNING", "not ready: cache failed (ConnectionError), database failed (OperationalError)"),
        ("WARNING", "not ready: cache failed (ConnectionError)"),
        ("WARNING", "not ready: draining"),
        ("INFO", "ready again after 20 s (was: draining)")]


def test_the_reminder_says_the_latest_classes_and_ready_resets_the_clock(caplog):
    now = [0.0]
    log = health.ReadinessLog(clock=lambda: now[0], remind_every_s=300.0)
    with caplog.at_level(logging.INFO, logger="mrtrweb.health"):
        log.report("database", "database failed (TimeoutError)")
        now[0] = 299.0
        log.report("database", "database failed (CheckStillRunning)")  # the same cause: quiet
        now[0] = 300.0
        log.report("database", "database failed (CheckStillRunning)")
        now[0] = 400.0
        log.report("", "")
        log.report("", "")  # ready stays ready: quiet
        now[0] = 401.0
        log.report("database", "database failed (OperationalError)")  # a new outage: at once
    assert _health_lines(caplog) == [
        ("WARNING", "not ready: database failed (TimeoutError)"),
        ("WARNING", "still not ready for 300 s: database failed (CheckStillRunning)"),
        ("INFO", "ready again after 400 s (was: database failed (CheckStillRunning))"),
        ("WARNING", "not ready: database failed (OperationalError)")]
