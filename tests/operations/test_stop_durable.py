"""A Stop survives Redis restarted empty (issue 26, item 7c).

The Stop of a call in flight is written to the cache (read by the worker driving the call every
``STOP_POLL_S``) and to the operation's row (read every ``STOP_DB_POLL_S`` while the cache has
none). Real parts: a private ``redis-server`` as the binding cache, restarted empty
(tests/faults.py), the demo MCP server, the app in process.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest
from asgiref.sync import sync_to_async

from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation
from mrtrweb.operations.stopping import STOP_DB_POLL_S, request_stop, stop_requested

from ..faults import RedisServer
from tests.sockets import csrf_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


@pytest.fixture
def redis(settings):
    server = RedisServer()
    alias = f"stop-{secrets.token_hex(3)}"
    settings.CACHES = dict(settings.CACHES, **{alias: {
        "BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url(), "KEY_PREFIX": "t",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1}}})
    settings.MRTRWEB = {"BINDING_CACHE": alias}
    operations.reset_gate()
    yield server
    server.close()
    operations.reset_gate()


async def _running(seeded, seconds: int = 20) -> str:
    alice = await csrf_client(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    resp = await alice.post(f"/mcp/servers/{server.pk}/tools/long_task/", {"arg-seconds": str(seconds)})
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    assert (await Operation.objects.aget(pk=op_id)).status == "running"
    return op_id


async def _status_within(op_id: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        status = (await Operation.objects.aget(pk=op_id)).status
        if status != "running" or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.1)


async def test_a_stop_recorded_before_redis_restarts_empty_is_still_read(seeded, redis):
    op_id = await _running(seeded)
    await sync_to_async(request_stop)(op_id, "person")  # what the Stop button does
    await sync_to_async(redis.restart)()  # empty: the cache's stop request is gone
    assert await sync_to_async(stop_requested)(op_id, durable=True) == "person"
    # the call was stopped by its driver meanwhile (cache or row), never left running
    assert await _status_within(op_id, STOP_DB_POLL_S + 6) == "denied"
    await operations.wait_idle()


async def test_the_driver_stops_a_call_whose_stop_only_the_row_holds(seeded, redis):
    """The state a click just before an empty restart leaves (the row has it, the cache not):
    the worker driving the call reads the row and stops it within STOP_DB_POLL_S."""
    op_id = await _running(seeded)
    await sync_to_async(redis.restart)()
    await Operation.objects.filter(pk=op_id).aupdate(stop_requested_by="person")
    started = time.monotonic()
    assert await _status_within(op_id, STOP_DB_POLL_S + 4) == "denied"
    assert time.monotonic() - started < STOP_DB_POLL_S + 4
    op = await Operation.objects.aget(pk=op_id)
    assert "cancelled" in op.error_message
    await operations.wait_idle()
    last = await AuditEvent.objects.filter(operation_id=op_id).order_by("-sequence").afirst()
    assert (last.event, last.reason) == ("denied", "cancelled")


async def test_a_stop_with_the_cache_down_records_nothing(seeded, redis):
    """The cache is written first: with Redis down the Stop is refused (503, docs/deploy/what-holds.md)
    and nothing is recorded, so "the call goes on" stays true."""
    op_id = await _running(seeded, seconds=3)
    await sync_to_async(redis.stop)()
    with pytest.raises(Exception):  # noqa: B017 -- a redis-py / django-redis connection error
        await sync_to_async(request_stop)(op_id, "person")
    assert (await Operation.objects.aget(pk=op_id)).stop_requested_by == ""
    await sync_to_async(redis.start)()
    assert await _status_within(op_id, 15) == "completed"
    await operations.wait_idle()
