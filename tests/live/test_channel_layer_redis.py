"""The Redis channel layer as production configures it (``settings_prod``) against the machine's
Redis: an idle receive outlives the layer's 5 s blocking receive, and system check
``mrtrweb.W014`` flags a host without such a socket timeout.

Found by the benchmarks (docs/benchmarks/NOTES.md): with a plain URL, redis-py's default 5 s socket
timeout equals channels_redis's 5 s blocking receive, so an idle WebSocket consumer's receive
failed with ``redis.exceptions.TimeoutError`` after 5 s and its WebSocket was closed.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import secrets
import time

import pytest
from channels_redis.core import RedisChannelLayer
from django.test import override_settings

from mrtrweb import checks

pytestmark = pytest.mark.services

REDIS = f"redis://{os.environ.get('MRTRWEB_TEST_REDIS_HOST', '127.0.0.1')}:6379/14"


@pytest.fixture
def prod_layer_config(monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", secrets.token_urlsafe(60))
    monkeypatch.setenv("DJANGO_ALLOWED_HOSTS", "example.test")
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/unused")
    monkeypatch.setenv("REDIS_URL", REDIS)
    prod = importlib.import_module("mrtrweb.site.settings_prod")
    prod = importlib.reload(prod)  # read this test's environment
    return prod.CHANNEL_LAYERS


async def _idle_receive(hosts: list, wait_s: float) -> BaseException | None:
    """Receive on a fresh channel for ``wait_s`` seconds with nothing sent; the error, or None."""
    layer = RedisChannelLayer(hosts=hosts, prefix=f"mrtrweb-test-idle-{os.getpid()}")
    channel = await layer.new_channel()
    try:
        await asyncio.wait_for(layer.receive(channel), wait_s)
    except asyncio.TimeoutError:
        return None
    except Exception as exc:  # noqa: BLE001 -- the failure under test
        return exc
    finally:
        await layer.flush()
    return None


async def test_idle_receive_outlives_the_blocking_receive_with_the_production_config(prod_layer_config):
    config = prod_layer_config["default"]["CONFIG"]
    assert config["hosts"][0]["socket_timeout"] > 5
    started = time.monotonic()
    assert await _idle_receive(config["hosts"], 7.0) is None
    assert time.monotonic() - started >= 7.0


async def test_a_plain_url_host_fails_when_idle_which_is_what_w014_guards_against():
    """The control: the same idle receive with a plain URL fails after the 5 s blocking receive."""
    error = await _idle_receive([REDIS], 7.0)
    assert error is not None and "Timeout" in repr(error)


def test_w014_flags_a_host_without_a_socket_timeout_above_five_seconds(prod_layer_config):
    backend = "channels_redis.core.RedisChannelLayer"
    for hosts, flagged in (([REDIS], True),
                           ([{"address": REDIS}], True),
                           ([{"address": REDIS, "socket_timeout": 5}], True),
                           ([{"address": REDIS + "?socket_timeout=30"}], False),
                           ([{"address": REDIS, "socket_timeout": 30}], False),
                           (prod_layer_config["default"]["CONFIG"]["hosts"], False)):
        with override_settings(CHANNEL_LAYERS={"default": {"BACKEND": backend, "CONFIG": {"hosts": hosts}}}):
            ids = [m.id for m in checks.check_redis_channel_hosts()]
        assert ids == (["mrtrweb.W014"] if flagged else []), hosts
    with override_settings(CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}):
        assert checks.check_redis_channel_hosts() == []
