"""The binding stores' contract, and the database store (the default) on its own.

The contract (load/save/delete, the request-id index, single-use claims, expiry) holds for the
three stores the gate runs on: :class:`DatabaseBindingStore` (the project's database: SQLite here,
PostgreSQL when run with ``DJANGO_SETTINGS_MODULE=tests.services_settings``, as ``./dev test``
does), :class:`DjangoCacheBindingStore` on a real Redis, and the gate's
:class:`InMemoryBindingStore`. Then the database store alone: records sealed per tenant (a row
moved or altered reads as absent, logged, no traceback), claims raced from threads and from
processes (exactly one winner), a PostgreSQL cut through a real TCP proxy (StoreUnavailable, one
log line, the next call after the restore reconnects), the sweep, one statement per call.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import secrets
import threading
import time
from datetime import timedelta

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mrtrweb import operations
from mrtrweb.bindings import DjangoCacheBindingStore, configured_store
from mrtrweb.bindings.database import DatabaseBindingStore, sweep
from mrtrweb.gate import Gate, GateRejection, InMemoryBindingStore, Policy, StoreUnavailable
from mrtrweb.models import BindingClaim, BindingIndexEntry, LegacyAnswer, LiveBinding

from ..conftest import shared_dir
from ..topology import REDIS_URL

pytestmark = [pytest.mark.django_db(transaction=True)]

RECORD = {"tenant": "acme", "operation_id": "op-1", "params": {"name": "deploy", "arguments": {"env": "prod"}},
          "round": {"number": 1, "state": "opaque-state-\u00e9"}}

pg_only = pytest.mark.skipif("connection.vendor != 'postgresql'",
                             reason="PostgreSQL only: run with DJANGO_SETTINGS_MODULE=tests.services_settings")


def _until(predicate, timeout_s: float = 6.0) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(params=["database", pytest.param("cache-redis", marks=pytest.mark.services), "memory"])
def store(request, settings):
    """Each of the gate's stores, empty."""
    if request.param == "database":
        yield DatabaseBindingStore()
    elif request.param == "memory":
        yield InMemoryBindingStore()
    else:
        prefix = f"test-{secrets.token_hex(4)}"
        settings.CACHES = dict(settings.CACHES, redisgate={
            "BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": prefix,
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 2, "SOCKET_TIMEOUT": 2}})
        settings.MRTRWEB = {"BINDING_STORE": "cache", "BINDING_CACHE": "redisgate"}
        yield DjangoCacheBindingStore()
        caches["redisgate"].delete_pattern("*")


# --------------------------------------------------------------------------- the contract
def test_records_load_save_replace_delete(store):
    assert store.load("acme", "op-1") is None
    store.save("acme", "op-1", RECORD, 60)
    assert store.load("acme", "op-1") == RECORD
    assert store.load("globex", "op-1") is None  # per tenant
    assert store.load("acme", "op-2") is None
    store.save("acme", "op-1", {**RECORD, "round": {"number": 2}}, 60)  # replaced, not duplicated
    assert store.load("acme", "op-1")["round"] == {"number": 2}
    store.delete("acme", "op-1")
    assert store.load("acme", "op-1") is None
    store.delete("acme", "op-1")  # deleting what is gone is no error


def test_index_binds_once_per_tenant_and_user(store):
    assert store.index_get("acme", "alice", "s:r-1") is None
    assert store.index_add("acme", "alice", "s:r-1", "op-1", 60) is True
    assert store.index_add("acme", "alice", "s:r-1", "op-2", 60) is False  # bound already
    assert store.index_get("acme", "alice", "s:r-1") == "op-1"
    assert store.index_get("acme", "bob", "s:r-1") is None and store.index_get("globex", "alice", "s:r-1") is None
    assert store.index_add("acme", "bob", "s:r-1", "op-3", 60) is True  # another user: another key
    store.index_delete("acme", "alice", "s:r-1")
    assert store.index_get("acme", "alice", "s:r-1") is None
    assert store.index_add("acme", "alice", "s:r-1", "op-4", 60) is True
    assert store.index_get("acme", "alice", "s:r-1") == "op-4"


def test_claims_win_once_per_tenant(store):
    assert store.claim("acme", "round:op-1:1", 60) is True
    assert store.claim("acme", "round:op-1:1", 60) is False
    assert store.claim("acme", "round:op-1:2", 60) is True
    assert store.claim("globex", "round:op-1:1", 60) is True


def test_expired_entries_are_absent_and_taken_over(store):
    store.save("acme", "op-1", RECORD, 1)
    assert store.index_add("acme", "alice", "s:r-1", "op-1", 1) is True
    assert store.claim("acme", "t-1", 1) is True
    assert store.load("acme", "op-1") == RECORD  # alive until its TTL
    assert _until(lambda: store.load("acme", "op-1") is None)
    assert _until(lambda: store.index_get("acme", "alice", "s:r-1") is None)
    # an expired index entry and an expired claim are won again
    assert _until(lambda: store.claim("acme", "t-1", 60))
    assert store.claim("acme", "t-1", 60) is False
    assert store.index_add("acme", "alice", "s:r-1", "op-9", 60) is True
    assert store.index_get("acme", "alice", "s:r-1") == "op-9"


def test_a_round_through_the_gate_is_consumed_once(store):
    gate = Gate(store, Policy())
    handle = gate.register(request_id="r-0", server_id="1", origin="https://mcp.example.test:443", user="alice",
                           tenant="acme", method="tools/call", params={"name": "t", "arguments": {"x": 1}})
    gate.receive(tenant="acme", user="alice", request_id="r-0", origin="https://mcp.example.test:443",
                 result=ROUND)
    answer = {"ok": {"action": "accept", "content": {"ok": True}}}
    retry = gate.respond(handle, retry_id="r-1", responses=answer, user="alice", tenant="acme")
    assert retry.params["requestState"] == "opaque" and retry.params["arguments"] == {"x": 1}
    with pytest.raises(GateRejection) as exc:
        gate.respond(handle, retry_id="r-2", responses=answer, user="alice", tenant="acme")
    assert exc.value.code == "inactive_mrtr_round"


def test_a_fresh_retry_id_found_bound_refuses_and_leaves_the_round_open(store):
    """``respond(fresh_id=True)`` (issue 30: the product's UUID4 retry ids) asks the index nothing
    first, but binding the id is still checked: an id another live operation holds refuses with
    ``retry_requires_new_jsonrpc_id``, the claim is rolled back or given back, and the round
    stays answerable."""
    gate = Gate(store, Policy())
    origin = "https://mcp.example.test:443"
    other = gate.register(request_id="taken", server_id="1", origin=origin, user="alice", tenant="acme",
                          method="tools/call", params={"name": "t", "arguments": {}})
    handle = gate.register(request_id="r-0", server_id="1", origin=origin, user="alice", tenant="acme",
                           method="tools/call", params={"name": "t", "arguments": {"x": 1}})
    gate.receive(tenant="acme", user="alice", request_id="r-0", origin=origin, result=ROUND)
    answer = {"ok": {"action": "accept", "content": {"ok": True}}}
    if isinstance(store, DjangoCacheBindingStore):
        pytest.skip("the cache store collects the consume's writes into one script: an add there is not "
                    "checked (a UUID4 is relied on)")
    with pytest.raises(GateRejection) as exc:
        gate.respond(handle, retry_id="taken", responses=answer, user="alice", tenant="acme", fresh_id=True)
    assert exc.value.code == "retry_requires_new_jsonrpc_id"
    assert store.index_get("acme", "alice", "s:taken") == other.operation_id  # still the other operation's
    assert gate.state(handle).round is not None  # still open: nothing consumed
    retry = gate.respond(handle, retry_id="r-1", responses=answer, user="alice", tenant="acme", fresh_id=True)
    assert retry.params["inputResponses"] == answer


def test_close_takes_the_record_the_open_round_and_the_index_entry(store):
    """``Gate.close`` (with the database store: ``discard``, one ``DELETE ... RETURNING`` instead
    of a load and a delete): nothing of the operation is left, and its open round can no longer
    be answered."""
    gate = Gate(store, Policy())
    origin = "https://mcp.example.test:443"
    handle = gate.register(request_id="r-0", server_id="1", origin=origin, user="alice", tenant="acme",
                           method="tools/call", params={"name": "t", "arguments": {}})
    gate.receive(tenant="acme", user="alice", request_id="r-0", origin=origin, result=ROUND)
    gate.close(handle)
    assert gate.state(handle) is None and store.load("acme", handle.operation_id) is None
    assert store.index_get("acme", "alice", "s:r-0") is None
    assert store.claim("acme", f"round:{handle.operation_id}:1", 60) is False  # the open round was retired
    gate.close(handle)  # closing what is gone is no error


def test_load_bound_is_the_index_then_the_record_in_one_statement():
    """What ``Gate.receive`` asks first (issue 30): the record bound to a request id, as
    ``index_get`` then ``load`` give it, in one SELECT; absent when either row is absent or expired."""
    store = DatabaseBindingStore()
    assert store.load_bound("acme", "alice", "s:r-1") is None
    store.save("acme", "op-1", RECORD, 60)
    assert store.load_bound("acme", "alice", "s:r-1") is None  # no index entry
    store.index_add("acme", "alice", "s:r-1", "op-1", 60)
    with CaptureQueriesContext(connection) as ctx:
        bound = store.load_bound("acme", "alice", "s:r-1")
    assert len(ctx.captured_queries) == 1
    assert bound == store.load("acme", "op-1") == RECORD
    assert store.load_bound("acme", "bob", "s:r-1") is None and store.load_bound("globex", "alice", "s:r-1") is None
    LiveBinding.objects.filter(operation_id="op-1").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert store.load_bound("acme", "alice", "s:r-1") is None  # the record expired
    store.save("acme", "op-1", RECORD, 60)
    BindingIndexEntry.objects.filter(operation_id="op-1").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert store.load_bound("acme", "alice", "s:r-1") is None  # the entry expired


def test_a_phases_writes_as_one_are_all_or_nothing():
    """``bind`` (register), ``claim_and_save`` (receive) and ``consume`` (respond): on PostgreSQL
    one statement each (data-modifying WITH steps; no BEGIN/COMMIT), elsewhere the separate calls
    in a transaction; either way a refused step writes nothing."""
    store = DatabaseBindingStore()
    pg = connection.vendor == "postgresql"
    with CaptureQueriesContext(connection) as ctx:
        assert store.bind("acme", "alice", "s:r-1", "op-1", RECORD, 60) is True
    assert len(ctx.captured_queries) == (1 if pg else 2)
    assert store.bind("acme", "alice", "s:r-1", "op-2", RECORD, 60) is False  # bound already: nothing written
    assert store.load("acme", "op-2") is None and store.load_bound("acme", "alice", "s:r-1") == RECORD
    changed = {**RECORD, "round": {"number": 2}}
    with CaptureQueriesContext(connection) as ctx:
        assert store.claim_and_save("acme", "recv:op-1:s:r-1", "op-1", changed, 60) is True
    assert len(ctx.captured_queries) == (1 if pg else 2)
    assert store.claim_and_save("acme", "recv:op-1:s:r-1", "op-1", RECORD, 60) is False  # claimed: not saved
    assert store.load("acme", "op-1") == changed
    store.index_add("acme", "alice", "s:taken", "op-9", 60)
    assert store.consume("acme", "round:op-1:2", "alice", "s:taken", "s:r-1", "op-1", RECORD, 60) == (True, False)
    assert store.load("acme", "op-1") == changed and store.index_get("acme", "alice", "s:r-1") == "op-1"
    with CaptureQueriesContext(connection) as ctx:  # the claim was not kept: the round is still answerable
        assert store.consume("acme", "round:op-1:2", "alice", "s:r-2", "s:r-1", "op-1", RECORD, 60) == (True, True)
    assert len(ctx.captured_queries) == 1 if pg else len(ctx.captured_queries) >= 4
    assert store.load("acme", "op-1") == RECORD and store.index_get("acme", "alice", "s:r-2") == "op-1"
    assert store.index_get("acme", "alice", "s:r-1") is None  # the previous id unbound
    assert store.consume("acme", "round:op-1:2", "alice", "s:r-3", "s:r-2", "op-1", changed, 60) == (False, False)
    assert store.load("acme", "op-1") == RECORD and store.index_get("acme", "alice", "s:r-3") is None


def test_discard_returns_the_live_record_once():
    store = DatabaseBindingStore()
    store.save("acme", "op-1", RECORD, 60)
    with CaptureQueriesContext(connection) as ctx:
        assert store.discard("acme", "op-1") == RECORD
    assert len(ctx.captured_queries) == 1
    assert store.discard("acme", "op-1") is None and store.load("acme", "op-1") is None
    store.save("globex", "op-1", RECORD, 60)  # sealed for another tenant than the one it claims
    assert store.discard("globex", "op-1") is None and store.load("globex", "op-1") is None


ROUND = {"resultType": "input_required", "requestState": "opaque",
         "inputRequests": {"ok": {"method": "elicitation/create", "params": {
             "message": "OK?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}}


# --------------------------------------------------------------------------- the database store
def test_database_is_the_default_store_and_passes_the_shared_cases(settings):
    operations.reset_gate()
    assert isinstance(configured_store(), DatabaseBindingStore)
    assert isinstance(operations.get_gate().store, DatabaseBindingStore)
    out = io.StringIO()
    call_command("mrtr_verify", str(shared_dir() / "cases" / "gate-cases.jsonl"), stdout=out)
    assert out.getvalue().strip().splitlines()[-1].endswith("passed, 0 failed")
    assert BindingClaim.objects.exists()  # the cases went through the database (claims outlive their round)
    settings.MRTRWEB = {"BINDING_STORE": "cache"}
    assert isinstance(configured_store(), DjangoCacheBindingStore)


def test_shared_cases_pass_in_a_fresh_checkout_before_migrate(tmp_path):
    """``manage.py mrtr_verify`` on a database nobody migrated yet (a fresh clone): the cases are
    played against the binding cache's store, and it says so; nothing fails for want of tables."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, MRTRWEB_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="mrtrweb.site.settings")
    done = subprocess.run([sys.executable, "manage.py", "mrtr_verify", str(shared_dir() / "cases" / "gate-cases.jsonl")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].endswith("passed, 0 failed")
    assert "run manage.py migrate to verify the database store" in done.stderr


def test_rows_hold_nothing_readable(settings):
    store = DatabaseBindingStore()
    store.save("acme", "op-1", RECORD, 60)
    store.index_add("acme", "alice", "s:request-id-42", "op-1", 60)
    store.claim("acme", "round:op-1:1", 60)
    row = LiveBinding.objects.get()
    assert "opaque-state" not in row.record and "prod" not in row.record and "deploy" not in row.record
    assert (row.tenant, row.operation_id) == ("acme", "op-1")
    entry, claim = BindingIndexEntry.objects.get(), BindingClaim.objects.get()
    assert "alice" not in entry.key_digest and "request-id-42" not in entry.key_digest and len(entry.key_digest) == 64
    assert "round" not in claim.token_digest and len(claim.token_digest) == 64


def test_a_row_moved_to_another_tenant_or_altered_reads_as_absent(caplog):
    store = DatabaseBindingStore()
    store.save("acme", "op-1", RECORD, 60)
    LiveBinding.objects.update(tenant="globex")  # a row moved to another tenant
    with caplog.at_level(logging.WARNING, logger="mrtrweb.bindings"):
        assert store.load("globex", "op-1") is None
    assert [r.getMessage() for r in caplog.records] == [
        "binding record for operation op-1 belongs to another tenant; ignored"]
    assert caplog.records[0].exc_info is None  # no traceback
    # a record sealed for acme copied over globex's own record of that operation
    store.save("globex", "op-1", {**RECORD, "tenant": "globex"}, 60)
    LiveBinding.objects.filter(tenant="acme").delete()
    store.save("acme", "op-1", RECORD, 60)
    acme_record = LiveBinding.objects.get(tenant="acme").record
    LiveBinding.objects.filter(tenant="globex").update(record=acme_record)
    assert store.load("globex", "op-1") is None and store.load("acme", "op-1") == RECORD
    caplog.clear()
    sealed = LiveBinding.objects.get(tenant="acme").record  # altered: one character changed
    LiveBinding.objects.filter(tenant="acme").update(record=sealed[:40] + ("A" if sealed[40] != "A" else "B")
                                                     + sealed[41:])
    with caplog.at_level(logging.WARNING, logger="mrtrweb.bindings"):
        assert store.load("acme", "op-1") is None
    assert [r.getMessage() for r in caplog.records] == [
        "binding record for operation op-1 cannot be opened (keys changed or altered); ignored"]
    assert caplog.records[0].exc_info is None
    # an index entry moved to another tenant binds nothing there
    store.index_add("acme", "alice", "s:r-1", "op-1", 60)
    BindingIndexEntry.objects.update(tenant="globex")
    assert store.index_get("globex", "alice", "s:r-1") is None


def test_rows_past_expires_at_are_absent_and_taken_over_in_place():
    store = DatabaseBindingStore()
    store.save("acme", "op-1", RECORD, 60)
    store.index_add("acme", "alice", "s:r-1", "op-1", 60)
    store.claim("acme", "t-1", 60)
    past = timezone.now() - timedelta(seconds=1)
    for model in (LiveBinding, BindingIndexEntry, BindingClaim):
        model.objects.update(expires_at=past)
    assert store.load("acme", "op-1") is None and store.index_get("acme", "alice", "s:r-1") is None
    assert store.index_add("acme", "alice", "s:r-1", "op-2", 60) is True
    assert store.claim("acme", "t-1", 60) is True and store.claim("acme", "t-1", 60) is False
    assert BindingIndexEntry.objects.count() == 1 and BindingClaim.objects.count() == 1  # the same rows
    assert BindingIndexEntry.objects.get().operation_id == "op-2"
    assert BindingClaim.objects.get().expires_at > timezone.now() + timedelta(seconds=50)


def test_sweep_deletes_only_expired_rows():
    store = DatabaseBindingStore()
    for i in range(3):
        store.save("acme", f"op-{i}", {**RECORD, "operation_id": f"op-{i}"}, 60)
        store.index_add("acme", "alice", f"s:r-{i}", f"op-{i}", 60)
        store.claim("acme", f"t-{i}", 60)
    import uuid

    LegacyAnswer.objects.create(operation_id=uuid.uuid4(), round_number=1, payload="x",
                                expires_at=timezone.now() - timedelta(seconds=5))
    LegacyAnswer.objects.create(operation_id=uuid.uuid4(), round_number=1, payload="y",
                                expires_at=timezone.now() + timedelta(seconds=60))
    past = timezone.now() - timedelta(seconds=1)
    for model in (LiveBinding, BindingIndexEntry, BindingClaim):
        model.objects.filter(pk__in=list(model.objects.order_by("pk").values_list("pk", flat=True)[:2])) \
            .update(expires_at=past)
    assert sweep() == 2 * 3 + 1
    assert (LiveBinding.objects.count(), BindingIndexEntry.objects.count(), BindingClaim.objects.count(),
            LegacyAnswer.objects.count()) == (1, 1, 1, 1)
    assert store.load("acme", "op-2") is not None and LegacyAnswer.objects.get().payload == "y"
    assert sweep() == 0
    for model in (LiveBinding, BindingIndexEntry, BindingClaim, LegacyAnswer):
        model.objects.update(expires_at=past)
    assert sweep(limit=1) == 4 and sweep() == 0  # at most `limit` rows per table and call


def test_each_store_call_is_one_statement():
    """No transaction spans statements: each call, claims and index entries included, is a
    single statement (atomic on its own; the unique constraint decides races)."""
    store = DatabaseBindingStore()
    calls = [lambda: store.index_add("acme", "alice", "s:r-1", "op-1", 60),
             lambda: store.save("acme", "op-1", RECORD, 60), lambda: store.save("acme", "op-1", RECORD, 60),
             lambda: store.load("acme", "op-1"), lambda: store.index_get("acme", "alice", "s:r-1"),
             lambda: store.claim("acme", "t-1", 60), lambda: store.claim("acme", "t-1", 60),
             lambda: store.index_delete("acme", "alice", "s:r-1"), lambda: store.delete("acme", "op-1"),
             lambda: store.release("acme", "t-1")]
    for call in calls:
        with CaptureQueriesContext(connection) as ctx:
            call()
        assert len(ctx.captured_queries) == 1, [q["sql"] for q in ctx.captured_queries]


def test_release_gives_a_claim_back():
    store = DatabaseBindingStore()
    assert store.claim("acme", "legacy-settle:op-1:1", 60) is True
    assert store.claim("acme", "legacy-settle:op-1:1", 60) is False
    store.release("acme", "legacy-settle:op-1:1")
    assert store.claim("acme", "legacy-settle:op-1:1", 60) is True


@pytest.mark.parametrize("expired_row_in_the_way", [False, True])
def test_claims_raced_from_threads_have_one_winner(expired_row_in_the_way):
    store = DatabaseBindingStore()
    if expired_row_in_the_way:
        store.claim("acme", "race", 60)
        store.index_add("acme", "alice", "s:race", "op-0", 60)
        BindingClaim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        BindingIndexEntry.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    n = 12
    barrier = threading.Barrier(n)
    won: list[tuple[bool, bool]] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            barrier.wait()
            won.append((store.claim("acme", "race", 60), store.index_add("acme", "alice", "s:race", f"op-{i}", 60)))
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(c for c, _ in won) == [False] * (n - 1) + [True]
    assert sorted(i for _, i in won) == [False] * (n - 1) + [True]
    assert BindingClaim.objects.count() == 1 and BindingIndexEntry.objects.count() == 1


def _claim_in_child(barrier, queue) -> None:
    try:
        barrier.wait(30)
        store = DatabaseBindingStore()
        queue.put(("claim", store.claim("acme", "race", 60)))
        queue.put(("index", store.index_add("acme", "alice", "s:race", f"op-{multiprocessing.current_process().pid}",
                                            60)))
    except BaseException as exc:  # noqa: BLE001 -- the parent asserts on it
        queue.put(("error", repr(exc)))
    finally:
        connections.close_all()


def test_claims_raced_from_processes_have_one_winner():
    connections.close_all()  # the children open their own connections (never one inherited)
    ctx = multiprocessing.get_context("fork")
    n = 6
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_claim_in_child, args=(barrier, queue)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    outcomes = [queue.get(timeout=10) for _ in range(2 * n)]
    assert not [o for o in outcomes if o[0] == "error"], outcomes
    assert sorted(won for what, won in outcomes if what == "claim") == [False] * (n - 1) + [True]
    assert sorted(won for what, won in outcomes if what == "index") == [False] * (n - 1) + [True]
    assert BindingClaim.objects.count() == 1 and BindingIndexEntry.objects.count() == 1


@pg_only
def test_postgres_cut_fails_closed_with_one_line_then_reconnects(caplog):
    from ..faults import TcpProxy

    store = DatabaseBindingStore()
    store.save("acme", "op-1", RECORD, 60)
    params = connection.settings_dict
    saved = params["HOST"], params["PORT"]
    proxy = TcpProxy(params["HOST"] or "127.0.0.1", int(params["PORT"] or 5432))
    connection.close()
    params["HOST"], params["PORT"] = "127.0.0.1", proxy.port  # this thread's connections go through the proxy
    try:
        assert store.load("acme", "op-1") == RECORD
        proxy.cut()
        calls = {"read": lambda: store.load("acme", "op-1"), "write": lambda: store.save("acme", "op-2", RECORD, 60),
                 "claim": lambda: store.claim("acme", "t", 60),
                 "index": lambda: store.index_add("acme", "alice", "s:r", "op-1", 60),
                 "delete": lambda: store.delete("acme", "op-1")}
        for name, call in calls.items():
            caplog.clear()
            with caplog.at_level(logging.DEBUG):
                started = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    call()
                assert time.monotonic() - started < 10, name  # fails, never hangs
            lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(lines) == 1 and lines[0].name == "mrtrweb.bindings", (name, [r.getMessage() for r in lines])
            assert lines[0].getMessage().startswith("binding store ") and lines[0].exc_info is None
        proxy.restore()
        # the connection the cut broke was dropped: the next call reconnects
        assert store.load("acme", "op-1") == RECORD
        assert store.claim("acme", "t", 60) is True
    finally:
        connection.close()
        params["HOST"], params["PORT"] = saved
        proxy.close()


def test_the_portable_upsert_path_agrees_with_the_one_statement_path():
    """Databases without ``ON CONFLICT ... WHERE ... RETURNING`` take a two-statement path in a
    transaction (exercised here on this database directly): the same outcomes."""
    from mrtrweb.bindings.database import _upsert_portable, lifetime, upsert

    for i, how in enumerate((upsert, lambda m, u, v, only_over_expired: _upsert_portable(
            m, "default", u, v, only_over_expired))):
        unique = {"tenant": "acme", "token_digest": f"t-{i}"}
        live = {"expires_at": timezone.now() + timedelta(seconds=60)}
        assert how(BindingClaim, unique, live, only_over_expired=True) is True
        assert how(BindingClaim, unique, live, only_over_expired=True) is False  # a live row stays
        BindingClaim.objects.filter(**unique).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert how(BindingClaim, unique, live, only_over_expired=True) is True  # an expired one is taken over
        assert how(BindingClaim, unique, live, only_over_expired=False) is True  # always overwritten
        assert BindingClaim.objects.filter(**unique).count() == 1
        # a lifetime by the database's clock (what the store writes) works on both paths too
        BindingClaim.objects.filter(**unique).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert how(BindingClaim, unique, {"expires_at": lifetime(60)}, only_over_expired=True) is True
        assert how(BindingClaim, unique, {"expires_at": lifetime(60)}, only_over_expired=True) is False
        left = (BindingClaim.objects.get(**unique).expires_at - timezone.now()).total_seconds()
        assert 50 < left <= 61, left
