"""Fail closed: with the binding store unreachable (a real refused Redis connection), nothing is
sent, the person gets a clear error (never a 500), and the round is answerable again once the
store is back. Security headers: CSP without inline script, framing restricted."""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import Operation
from tests.consent import post_answer

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


def _use_store(settings, alias: str) -> None:
    settings.MRTRWEB = {"BINDING_CACHE": alias}
    operations.reset_gate()


async def test_start_refused_when_store_down(seeded, caches_with_dead_redis):
    _use_store(caches_with_dead_redis, "dead")
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "1"})
    assert resp.status_code == 200 and "round store is unavailable" in resp.content.decode()
    assert seeded["mcp"].calls[("deploy", False)] == 0  # nothing was sent


async def test_answer_fails_closed_then_recovers(seeded, caches_with_dead_redis):
    settings = caches_with_dead_redis
    _use_store(settings, "default")
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server, mcp = seeded["servers"]["acme"], seeded["mcp"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/connect_account/", {"arg-provider": "gitlab"})
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200  # alice sees the card

    _use_store(settings, "dead")  # the store becomes unreachable while the round waits
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 503 and "round store is unavailable" in answer.content.decode()
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200 and "round store is unavailable" in page.content.decode()
    await operations.wait_idle()
    assert mcp.calls[("connect_account", True)] == 0

    _use_store(settings, "default")  # back: the live round is answerable again
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code == 302
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.COMPLETED
    assert mcp.calls[("connect_account", True)] == 1


async def test_security_headers(seeded):
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    resp = await client.get("/mcp/")
    csp = resp["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'self'" in csp
    assert resp["X-Frame-Options"] == "SAMEORIGIN"
    assert resp["X-Content-Type-Options"] == "nosniff"
