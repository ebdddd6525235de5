"""The cache binding store consumes a round atomically (issue 26, item 7b).

A round's claim and the record's writes reach the cache together or not at all
(:meth:`DjangoCacheBindingStore.atomic`: one Lua script on Redis), so a failure in the middle of
a consume -- the connection to Redis cut, or a Redis with persistence killed and restarted --
leaves the round answerable, once, instead of claimed with no retry built (stranded until its TTL).
Real parts: a private ``redis-server`` (tests/faults.py), a TCP proxy in front of it, the real gate.
Without scripts (locmem) the steps run in order and a claim lost meanwhile writes nothing.
"""

from __future__ import annotations

import secrets
import subprocess

import pytest
from django.core.cache import caches

from mrtrweb.bindings import DjangoCacheBindingStore
from mrtrweb.gate import Gate, GateRejection, Policy, StoreUnavailable

from ..faults import RedisServer, TcpProxy

ROUND = {"resultType": "input_required", "requestState": "opaque",
         "inputRequests": {"ok": {"method": "elicitation/create", "params": {
             "message": "OK?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}}
ANSWER = {"ok": {"action": "accept", "content": {"ok": True}}}
ORIGIN = "https://mcp.example.test:443"


class PersistentRedis(RedisServer):
    """A private redis-server that writes every command to its append-only file (``appendfsync
    always``): killed and started again, it comes back with what it had."""

    def __init__(self, directory) -> None:
        self.directory = directory
        super().__init__()

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        from mrtrweb.bench.common import wait_port

        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "yes",
             "--appendfsync", "always", "--dir", str(self.directory), "--protected-mode", "no"],
            stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        wait_port(self.port, proc=self.proc, log=self.log)


def _use_cache(settings, location: str) -> str:
    alias = f"atomic-{secrets.token_hex(3)}"
    settings.CACHES = dict(settings.CACHES, **{alias: {
        "BACKEND": "django_redis.cache.RedisCache", "LOCATION": location, "KEY_PREFIX": "t",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1}}})
    return alias


class FaultAfterClaim(DjangoCacheBindingStore):
    """The real store; ``fault`` runs once, at the first write after the round's claim (the
    moment where the claim is taken and the record not yet written)."""

    fault = None

    def index_add(self, *args, **kwargs):
        fault, self.fault = self.fault, None
        if fault is not None:
            fault()
        return super().index_add(*args, **kwargs)


def _open_round(gate: Gate):
    handle = gate.register(request_id="r-0", server_id="1", origin=ORIGIN, user="alice", tenant="acme",
                           method="tools/call", params={"name": "t", "arguments": {"x": 1}})
    gate.receive(tenant="acme", user="alice", request_id="r-0", origin=ORIGIN, result=ROUND)
    return handle


@pytest.mark.services
@pytest.mark.parametrize("failure", ["connection cut", "redis killed"])
def test_a_failure_after_the_claim_leaves_the_round_answerable_once(settings, tmp_path, failure):
    redis = PersistentRedis(tmp_path) if failure == "redis killed" else RedisServer()
    proxy = TcpProxy("127.0.0.1", redis.port) if failure == "connection cut" else None
    try:
        alias = _use_cache(settings, f"redis://127.0.0.1:{proxy.port if proxy else redis.port}/0")
        store = FaultAfterClaim(alias=alias, prefix="mrtrweb")
        gate = Gate(store, Policy())
        handle = _open_round(gate)
        store.fault = proxy.cut if proxy else redis.stop
        with pytest.raises(StoreUnavailable):
            gate.respond(handle, retry_id="r-1", responses=ANSWER, user="alice", tenant="acme")
        if proxy:
            proxy.restore()
        else:
            redis.start()  # from its append-only file: what it had before the kill
        assert gate.state(handle) is not None and gate.state(handle).round is not None  # the round is still open
        retry = gate.respond(handle, retry_id="r-2", responses=ANSWER, user="alice", tenant="acme")
        assert retry.id == "r-2" and retry.params["requestState"] == "opaque"
        with pytest.raises(GateRejection) as exc:  # and it is consumed once
            gate.respond(handle, retry_id="r-3", responses=ANSWER, user="alice", tenant="acme")
        assert exc.value.code == "inactive_mrtr_round"
        assert gate.state(handle).status == "awaiting_result"
    finally:
        if proxy:
            proxy.close()
        redis.close()


@pytest.fixture(params=["locmem", pytest.param("redis", marks=pytest.mark.services)])
def store(request, settings):
    if request.param == "locmem":
        alias = f"atomic-{secrets.token_hex(3)}"
        settings.CACHES = dict(settings.CACHES, **{alias: {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": alias}})
        yield DjangoCacheBindingStore(alias=alias, prefix="mrtrweb")
        return
    redis = RedisServer()
    try:
        yield DjangoCacheBindingStore(alias=_use_cache(settings, redis.url()), prefix="mrtrweb")
    finally:
        redis.close()


def test_an_error_inside_the_consume_writes_nothing(store):
    store.save("acme", "op-1", {"tenant": "acme", "n": 1}, 60)
    with pytest.raises(RuntimeError):
        with store.atomic():
            assert store.claim("acme", "round:op-1:1", 60) is True
            store.save("acme", "op-1", {"tenant": "acme", "n": 2}, 60)
            store.index_add("acme", "alice", "k-2", "op-1", 60)
            raise RuntimeError("the gate failed after the claim")
    assert store.load("acme", "op-1") == {"tenant": "acme", "n": 1} and store.index_get("acme", "alice", "k-2") is None
    assert store.claim("acme", "round:op-1:1", 60) is True  # the claim was never taken


def test_a_claim_taken_meanwhile_writes_nothing_and_is_refused(store):
    store.save("acme", "op-1", {"tenant": "acme", "n": 1}, 60)
    other = DjangoCacheBindingStore(alias=store.alias, prefix=store.prefix)  # another worker
    with pytest.raises(GateRejection) as exc:
        with store.atomic():
            assert store.claim("acme", "round:op-1:1", 60) is True  # free when asked
            assert other.claim("acme", "round:op-1:1", 60) is True  # taken before the block ends
            store.save("acme", "op-1", {"tenant": "acme", "n": 2}, 60)
            store.index_delete("acme", "alice", "k-1")
    assert exc.value.code == "inactive_mrtr_round"
    assert store.load("acme", "op-1") == {"tenant": "acme", "n": 1}
    with store.atomic():  # a claim held already is refused at once, as outside a block
        assert store.claim("acme", "round:op-1:1", 60) is False


def test_a_consume_writes_claim_record_and_index_together(store):
    with store.atomic():
        assert store.claim("acme", "round:op-1:1", 60) is True
        store.index_add("acme", "alice", "k-1", "op-1", 60)
        store.save("acme", "op-1", {"tenant": "acme", "n": 2}, 60)
        assert store.load("acme", "op-1") is None  # collected, not yet sent
    assert store.load("acme", "op-1") == {"tenant": "acme", "n": 2}
    assert store.index_get("acme", "alice", "k-1") == "op-1"
    assert store.claim("acme", "round:op-1:1", 60) is False
    cache = caches[store.alias]
    if hasattr(cache, "ttl"):  # Redis: the script set the lifetimes
        assert all(50 < cache.ttl(key) <= 60 for key in cache.keys("mrtrweb:*")), cache.keys("mrtrweb:*")
