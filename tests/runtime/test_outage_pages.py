"""Outages never turn into a 500 or an exception (issue 14): which exceptions are outages
(mrtrweb.runtime.outage.kind), the rate-limited log line, pushes that never raise or hang
(mrtrweb.runtime.push), and the 503 net for an outage raised outside a view (handler500). The pages with
real services down: tests/runtime/test_outages.py."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from django.db import InterfaceError, OperationalError
from django.test import Client

from mrtrweb.runtime import outage, push


def test_what_counts_as_an_outage():
    import redis
    from django_redis.exceptions import ConnectionInterrupted

    from mrtrweb.gate import StoreUnavailable

    assert outage.kind(OperationalError("x")) == "database"
    assert outage.kind(InterfaceError("connection already closed")) == "database"
    assert outage.kind(StoreUnavailable("x")) == "round store"
    assert outage.kind(redis.exceptions.ConnectionError("x")) == "cache"
    assert outage.kind(redis.exceptions.TimeoutError("x"), redis="channel layer") == "channel layer"
    assert outage.kind(redis.exceptions.ReadOnlyError("x")) == "cache"
    assert outage.kind(ConnectionInterrupted(connection=None)) == "cache"
    assert outage.kind(ConnectionRefusedError()) == "network" and outage.kind(TimeoutError()) == "network"
    assert outage.kind(outage.ServiceUnavailable("cache", "Try later.")) == "cache"
    # bugs stay bugs
    for bug in (ValueError("x"), KeyError("x"), redis.exceptions.ResponseError("WRONGTYPE"), RuntimeError("x")):
        assert outage.kind(bug) is None
    # a command written on a transport the loop had just closed (Redis restarted under it; seen from
    # the channel layer's receive in tests/runtime/test_outages.py): uvloop's RuntimeError, raised inside
    # redis-py's connection module -- an outage of that Redis; the same error raised elsewhere is a bug
    import redis.asyncio.connection as redis_connection

    closed = "unable to perform operation on <TCPTransport closed=True reading=False>; the handler is closed"
    code = compile(f"raise RuntimeError({closed!r})", redis_connection.__file__, "exec")
    try:
        exec(code, {})
    except RuntimeError as exc:
        assert outage.kind(exc, redis="channel layer") == "channel layer"
    try:
        raise RuntimeError(closed)
    except RuntimeError as exc:
        assert outage.kind(exc) is None


def test_the_log_limiter_writes_one_line_per_key_and_period(caplog):
    limiter = outage.LogLimiter(logging.getLogger("mrtrweb.test"), every_s=0.3)
    with caplog.at_level(logging.WARNING, logger="mrtrweb.test"):
        assert limiter.warning("push", "push failed (%s)", "ConnectionError")
        assert not any(limiter.warning("push", "push failed (%s)", "ConnectionError") for _ in range(50))
        assert limiter.warning("other", "other failed")  # another key is logged at once
        time.sleep(0.35)
        assert limiter.warning("push", "push failed (%s)", "ConnectionError")
    assert [r.getMessage() for r in caplog.records] == [
        "push failed (ConnectionError)", "other failed",
        "push failed (ConnectionError) (50 more like it since the last one)"]


class _Layer:
    def __init__(self, how: str) -> None:
        self.how = how

    async def group_send(self, group, message):
        if self.how == "hangs":
            await asyncio.sleep(60)
        import redis

        raise redis.exceptions.ConnectionError("Connection closed by server.")


async def test_a_push_never_raises_nor_hangs(monkeypatch, caplog):
    push._log.reset()
    monkeypatch.setattr(push, "PUSH_TIMEOUT_S", 0.2)
    for how in ("fails", "hangs"):
        monkeypatch.setattr("channels.layers.get_channel_layer", lambda alias="default", how=how: _Layer(how))
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="mrtrweb.push"):
            for _ in range(3):
                assert await push.group_send("mrtrweb.user.1", {"type": "operation.update"}, what=how) is False
        assert time.monotonic() - t0 < 2.0
    lines = [r.getMessage() for r in caplog.records if r.name == "mrtrweb.push"]
    assert lines == [
        "fails push failed: the channel layer is unavailable (ConnectionError); pages catch up when they reconnect",
        "hangs push failed: the channel layer is unavailable (TimeoutError); pages catch up when they reconnect"]
    assert not any(r.exc_info for r in caplog.records)


class SavesOnTheWayOut:
    """A middleware failing after the view, as SessionMiddleware saving a session does when the
    database went away meanwhile."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.path == "/mcp/":
            raise OperationalError("connection refused")
        return response


def test_an_outage_outside_a_view_is_a_503_not_a_500(transactional_db, settings, caplog):
    from django.contrib.auth import get_user_model

    settings.MIDDLEWARE = [*settings.MIDDLEWARE[:2], "tests.runtime.test_outage_pages.SavesOnTheWayOut", *settings.MIDDLEWARE[2:]]
    user = get_user_model().objects.create_user("outside", password="pw-outside-1")
    client = Client(raise_request_exception=False)
    client.force_login(user)
    with caplog.at_level(logging.INFO):
        resp = client.get("/mcp/")
    assert resp.status_code == 503 and b"The database is unreachable right now" in resp.content
    assert "database unavailable while serving GET /mcp/ (outside the view): OperationalError" in caplog.text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    # anything that is no outage still is a 500
    settings.MIDDLEWARE = [m.replace("SavesOnTheWayOut", "FailsOnTheWayOut") for m in settings.MIDDLEWARE]
    other = Client(raise_request_exception=False)
    other.force_login(user)
    assert other.get("/mcp/").status_code == 500


class FailsOnTheWayOut(SavesOnTheWayOut):
    def __call__(self, request):
        self.get_response(request)
        raise ValueError("a bug")
