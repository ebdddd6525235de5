"""Fail closed: with the binding store unreachable, nothing is sent, the person gets a clear error
(never a 500), and the round is answerable again once the store is back -- for each store: the
database store (the default; its tables made unusable for real, :mod:`tests.store_faults`) and
the cache store (``BINDING_STORE = "cache"``; a real refused Redis connection). With the database
store a Redis outage no longer touches the rounds at all: that premise of the old "Redis down ->
503" test is replaced by :func:`test_redis_down_loses_no_round_with_the_database_store`.
Security headers: CSP without inline script, framing restricted."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import Operation
from tests import store_faults
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]

DEAD_REDIS = {
    "BACKEND": "django_redis.cache.RedisCache",
    "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1: connection refused
    "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
}


@pytest.fixture
def caches_with_dead_redis(settings):
    settings.CACHES = dict(settings.CACHES, dead=DEAD_REDIS)
    return settings


def _use_store(settings, store: str, alias: str = "default") -> None:
    settings.MRTRWEB = {"BINDING_STORE": store, "BINDING_CACHE": alias}
    operations.reset_gate()


class Outage:
    """The binding store ``store`` made unreachable for real (:meth:`down`) and back (:meth:`up`)."""

    def __init__(self, settings, store: str) -> None:
        self.settings, self.store, self.away = settings, store, False
        _use_store(settings, store)

    async def down(self) -> None:
        if self.store == "cache":
            _use_store(self.settings, "cache", "dead")
        else:
            await sync_to_async(store_faults.take_away)()
            self.away = True

    async def up(self) -> None:
        if self.store == "cache":
            _use_store(self.settings, "cache", "default")
        elif self.away:
            await sync_to_async(store_faults.bring_back)()
            self.away = False


@pytest.fixture(params=["database", "cache"])
def outage(request, seeded, caches_with_dead_redis):
    handle = Outage(caches_with_dead_redis, request.param)
    yield handle
    if handle.away:  # before the database is flushed
        store_faults.bring_back()
    operations.reset_gate()


async def test_start_refused_when_store_down(seeded, outage):
    await outage.down()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "1"})
    assert resp.status_code == 503 and "round store is unavailable" in resp.content.decode()
    assert seeded["mcp"].calls[("deploy", False)] == 0  # nothing was sent
    # the row says why (on PostgreSQL its INSERT is a step of the binding's statement, which failed:
    # it is then written on its own, failed)
    rows = [(o.status, o.error_code) async for o in Operation.objects.filter(server=server, name="deploy")]
    assert rows == [(Operation.Status.FAILED, operations.STORE_UNAVAILABLE)], rows


async def test_answer_fails_closed_then_recovers(seeded, outage):
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server, mcp = seeded["servers"]["acme"], seeded["mcp"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/connect_account/", {"arg-provider": "gitlab"})
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200  # alice sees the card

    await outage.down()  # the store becomes unreachable while the round waits
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 503 and "round store is unavailable" in answer.content.decode()
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200 and "round store is unavailable" in page.content.decode()
    await operations.wait_idle()
    assert mcp.calls[("connect_account", True)] == 0

    await outage.up()  # back: the live round is answerable again
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 302
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.COMPLETED
    assert mcp.calls[("connect_account", True)] == 1


async def test_redis_down_loses_no_round_with_the_database_store(seeded, caches_with_dead_redis):
    """The database store (the default) keeps what a round needs in the database: with the cache
    (Redis) refusing every connection from the start, a round is started, shown, answered and
    completed, its retry sent once; the cache's users degrade (stop requests, hold notices)."""
    _use_store(caches_with_dead_redis, "database", "dead")
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server, mcp = seeded["servers"]["acme"], seeded["mcp"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/connect_account/", {"arg-provider": "gitlab"})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 302
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.COMPLETED
    assert mcp.calls[("connect_account", True)] == 1
    again = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert again.status_code == 409 and mcp.calls[("connect_account", True)] == 1  # once
    operations.reset_gate()


async def test_security_headers(seeded):
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    resp = await client.get("/mcp/")
    csp = resp["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'self'" in csp
    assert resp["X-Frame-Options"] == "SAMEORIGIN"
    assert resp["X-Content-Type-Options"] == "nosniff"
