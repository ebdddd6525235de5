"""The cache binding store (``BINDING_STORE = "cache"``) on real Redis (django-redis): the shared
cases pass through ``mrtr_verify`` as deployed, consumption is atomic across processes, records
are signed per tenant. The database store: tests/bindings/test_db_store.py."""

from __future__ import annotations

import io
import multiprocessing
import secrets

import pytest
from django.core import signing
from django.core.cache import caches
from django.core.management import call_command

from mrtrweb import operations
from mrtrweb.bindings import DjangoCacheBindingStore
from mrtrweb.gate import Gate, GateRejection, Policy

from ..conftest import shared_dir
from ..topology import REDIS_URL

pytestmark = [pytest.mark.services]

ROUND = {"resultType": "input_required", "requestState": "opaque",
         "inputRequests": {"ok": {"method": "elicitation/create", "params": {
             "message": "OK?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}}


@pytest.fixture
def redis_store(settings):
    prefix = f"test-{secrets.token_hex(4)}"
    settings.CACHES = dict(settings.CACHES, redisgate={
        "BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": prefix,
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 2, "SOCKET_TIMEOUT": 2}})
    settings.MRTRWEB = {"BINDING_STORE": "cache", "BINDING_CACHE": "redisgate"}
    operations.reset_gate()
    yield DjangoCacheBindingStore()
    caches["redisgate"].delete_pattern("*")


def test_shared_cases_pass_on_redis(redis_store):
    out = io.StringIO()
    call_command("mrtr_verify", str(shared_dir() / "cases" / "gate-cases.jsonl"), stdout=out)
    assert out.getvalue().strip().splitlines()[-1].endswith("passed, 0 failed")
    assert caches["redisgate"].keys("*")  # played against Redis (the claims outlive their rounds)


def _respond_in_child(handle, queue) -> None:
    from django.db import connections

    connections.close_all()
    gate = Gate(DjangoCacheBindingStore(), Policy())
    try:
        retry = gate.respond(handle, retry_id=f"r-{multiprocessing.current_process().pid}",
                             responses={"ok": {"action": "accept", "content": {"ok": True}}},
                             user="alice", tenant="acme")
        queue.put(("ok", retry.params["requestState"]))
    except GateRejection as exc:
        queue.put((exc.code, None))


def test_round_consumed_once_across_processes(redis_store):
    gate = Gate(redis_store, Policy())
    handle = gate.register(request_id="r-0", server_id="1", origin="https://mcp.example.test:443", user="alice",
                           tenant="acme", method="tools/call", params={"name": "t", "arguments": {}})
    gate.receive(tenant="acme", user="alice", request_id="r-0", origin="https://mcp.example.test:443", result=ROUND)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_respond_in_child, args=(handle, queue)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    outcomes = sorted(queue.get(timeout=5) for _ in procs)
    assert [o for o in outcomes if o[0] == "ok"] == [("ok", "opaque")]
    assert [o[0] for o in outcomes if o[0] != "ok"] == ["inactive_mrtr_round"] * 7


def test_records_are_signed_per_tenant(redis_store):
    gate = Gate(redis_store, Policy())
    handle = gate.register(request_id=7, server_id="1", origin="https://a.test:443", user="u", tenant="acme",
                           method="tools/call", params={"name": "t"})
    key = redis_store._key("acme", "op", handle.operation_id)
    raw = caches["redisgate"].get(key)
    assert signing.loads(raw, salt=redis_store._salt("acme"))["operation_id"] == handle.operation_id
    with pytest.raises(signing.BadSignature):
        signing.loads(raw, salt=redis_store._salt("globex"))
    # the same record planted under another tenant's key does not verify there
    caches["redisgate"].set(redis_store._key("globex", "op", handle.operation_id), raw, 60)
    assert redis_store.load("globex", handle.operation_id) is None
    # a tampered record is ignored: the result finds no live request
    caches["redisgate"].set(key, raw[:-3] + "AAA", 60)
    with pytest.raises(GateRejection) as exc:
        gate.receive(tenant="acme", user="u", request_id=7, origin="https://a.test:443", result=ROUND)
    assert exc.value.code == "no_live_request"
    assert redis_store.prefix and key.startswith(redis_store.prefix + ":")
