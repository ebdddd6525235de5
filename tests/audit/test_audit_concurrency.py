"""Audit appends under concurrency (issue 12, item 5): no valid answer is denied and no audit row
is lost because other people are active.

Runs on the file SQLite of the default test settings and, with ``tests.services_settings``, on
PostgreSQL: many writers append to the same tenant chains at once (threads, each with its own
database connection), and 20 users of two tenants answer their rounds at once through a real
ASGI server (uvicorn, HTTP, CSRF, review and Send) against the real demo MCP server, with invalid
answers mixed in. Afterwards every expected row of every kind is present and every chain verifies.
"""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from collections import Counter

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import close_old_connections, connection, connections

from mrtrweb.audit import events as audit
from mrtrweb.models import AuditEvent, Membership, McpServer, Operation

from ..live_server import LiveAsgiServer
from ..topology import WebSession, status_in
from .concurrency import EXPECTED, INVALID, INVALID_POSTS, ROLES, USERS_PER_TENANT, VALID, ChainHolder, run_threads

pytestmark = [pytest.mark.django_db(transaction=True)]


def _verify() -> str:
    out = io.StringIO()
    call_command("mrtr_audit_verify", stdout=out)  # raises CommandError when a chain is broken
    return out.getvalue()


def _operation(user, server) -> Operation:
    rid = f"mrtr-{uuid.uuid4()}"
    return Operation.objects.create(tenant=server.tenant, user=user, server=server, method="tools/call",
                                    name="deploy", params={"name": "deploy", "arguments": {}}, request_id=rid,
                                    latest_request_id=rid)


@pytest.mark.parametrize("writers", [8, 40])
def test_concurrent_appends_in_two_tenants_all_land_and_chain(seeded, writers, caplog):
    """``writers`` threads append 10 events each, most to one tenant, some to the other, all at
    once: no append fails, every row is there and both chains verify. The rate is printed (no
    timed assertion: it depends on the machine)."""
    users, servers = seeded["users"], seeded["servers"]
    ops = {"acme": _operation(users["alice"], servers["acme"]), "globex": _operation(users["bob"], servers["globex"])}
    per_writer = 10
    kinds = ("received", "shown", "rejected", "submitted", "completed")

    def write(i: int) -> None:
        op = ops["globex" if i % 4 == 3 else "acme"]
        for n in range(per_writer):
            audit.record(op, kinds[n % len(kinds)], round_number=1, reason=f"writer {i}", read_back=(n % 5 == 3))

    caplog.set_level(logging.ERROR, logger="mrtrweb.audit")
    started = time.perf_counter()
    errors = run_threads(write, writers)
    elapsed = time.perf_counter() - started
    print(f"\n{connection.vendor}: {writers} writers, {writers * per_writer} appends in {elapsed:.2f} s "
          f"= {writers * per_writer / elapsed:.0f} appends/s ({len(errors)} writers failed)")
    assert not errors, f"{len(errors)} of {writers} writers failed: {errors[:3]!r}"
    assert not [r for r in caplog.records if r.name == "mrtrweb.audit"], caplog.text
    expected = {"globex": sum(per_writer for i in range(writers) if i % 4 == 3)}
    expected["acme"] = writers * per_writer - expected["globex"]
    for slug, op in ops.items():
        rows = list(AuditEvent.objects.filter(tenant=op.tenant).order_by("sequence"))
        assert [r.sequence for r in rows] == list(range(1, expected[slug] + 1)), slug
        assert Counter(r.reason for r in rows) == Counter(
            {f"writer {i}": per_writer for i in range(writers) if (i % 4 == 3) == (slug == "globex")})
    out = _verify()
    assert "OK acme" in out and "OK globex" in out, out


@pytest.fixture(scope="module")
def live(django_db_setup):
    """The ASGI app under uvicorn on 127.0.0.1 in this process (same database as the test)."""
    server = LiveAsgiServer().start()
    yield server
    server.stop()


def _wait_status(op_id: str, statuses: set[str], timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        status = Operation.objects.filter(pk=op_id).values_list("status", flat=True).first()
        if status in statuses:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"operation {op_id} stayed {status}")
        time.sleep(0.05)


def _wait_event(op_id: str, events: set[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not AuditEvent.objects.filter(operation_id=op_id, event__in=events).exists():
        if time.monotonic() > deadline:
            return  # the count below names what is missing
        time.sleep(0.05)


def test_twenty_users_of_two_tenants_answer_at_once(seeded, live, caplog):
    """20 users (10 per tenant) start ``deploy``, open its card and answer at once: 3 per tenant
    first post 3 invalid answers each (refused, audited ``rejected``) then a valid one, one
    declines, one cancels, one stops the operation, the rest accept. Every valid answer is sent
    (no ``audit_unavailable``, no missing receipt), every operation has exactly its rows of every
    kind, the server got one retry per answer, and the chains verify."""
    User = get_user_model()
    people: list[tuple[str, McpServer, str]] = []
    for slug in ("acme", "globex"):
        server = seeded["servers"][slug]
        for i in range(USERS_PER_TENANT):
            name = f"{slug}-user-{i}"
            user = User.objects.create_user(name, password=f"{name}-pw")
            Membership.objects.create(tenant=server.tenant, user=user)
            people.append((name, server, ROLES.get(i, "accept")))
    sessions = []
    for name, _server, _role in people:
        s = WebSession()
        s.login(live.url, name, f"{name}-pw")
        sessions.append(s)
    ops: dict[int, str] = {}
    outcomes: dict[int, list[int]] = {}

    def person(i: int) -> None:
        name, server, role = people[i]
        s = sessions[i]
        op_id = s.start(live.url, server.pk, "deploy", {"env": "staging", "replicas": str(i + 1)})
        ops[i] = op_id
        deadline = time.monotonic() + 60
        while (status := status_in(s.page(live.url, op_id))) != "awaiting_input":  # the card shown: its receipt
            assert status in ("running", None) and time.monotonic() < deadline, f"{name}: no round ({status})"
            time.sleep(0.05)
        codes = []
        if role == "invalid_then_accept":
            for _ in range(INVALID_POSTS):
                status, token, body = s.review(live.url, op_id, 1, **INVALID)
                assert token is None, f"{name}: an invalid answer was reviewed"
                codes.append(status)
        if role in ("decline", "cancel"):
            status, _body = s.answer(live.url, op_id, 1, role)
        elif role == "stop":
            status, _location, _body = s.request(f"{live.url}/mcp/operations/{op_id}/stop/", {})
        else:
            status, token, body = s.review(live.url, op_id, 1, **VALID)
            assert token is not None, f"{name}: valid answer not reviewed ({status}): {body[:300]}"
            status, body = s.send(live.url, op_id, 1, token, **VALID)
        codes.append(status)
        outcomes[i] = codes

    caplog.set_level(logging.ERROR, logger="mrtrweb")
    caplog.set_level(logging.INFO, logger="mrtrweb.operations")  # why a call failed, should one (ci17)
    errors = run_threads(person, len(people))
    assert not errors, f"{len(errors)} people failed: {errors[:3]!r}"
    for i, op_id in ops.items():
        _wait_status(op_id, {"completed", "failed", "denied", "expired"})
        _wait_event(op_id, {"completed", "failed", "denied", "cancelled"})  # written just after the status
    for i, op_id in ops.items():
        name, _server, role = people[i]
        rows, status = EXPECTED[role]
        op = Operation.objects.get(pk=op_id)
        assert (op.status, op.error_code) == (status, "denied" if role == "stop" else ""), (
            name, op.error_message, [r.getMessage() for r in caplog.records if str(op_id) in r.getMessage()])
        refused = [400] * (INVALID_POSTS if role == "invalid_then_accept" else 0)
        assert outcomes[i] == refused + [302], (name, outcomes[i])
        kinds = Counter(AuditEvent.objects.filter(operation_id=op_id).values_list("event", flat=True))
        assert kinds == rows, (name, role, kinds)
        if role == "stop":
            assert AuditEvent.objects.get(operation_id=op_id, event="denied").reason == "cancelled"
        if role in ("accept", "invalid_then_accept"):
            assert op.result["content"][0]["text"].startswith(f"Deployed {i + 1} replica(s) to staging"), op.result
    assert set(AuditEvent.objects.filter(event="rejected").values_list("code", flat=True)) == {
        "input_response_schema_mismatch"}
    answered = sum(1 for p in people if p[2] != "stop")
    assert seeded["mcp"].calls[("deploy", True)] == answered  # every answer reached the server once
    assert not [r for r in caplog.records if r.name.startswith("mrtrweb.audit")], caplog.text
    out = _verify()
    assert "OK acme" in out and "OK globex" in out, out
    close_old_connections()


def test_standalone_sqlite_runs_in_wal_with_immediate_transactions_and_a_busy_timeout(db):
    """The standalone site's (and these tests') SQLite: WAL, BEGIN IMMEDIATE, a busy timeout,
    synchronous FULL (a committed audit row survives a power cut)."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite settings")
    with connection.cursor() as cur:
        cur.execute("PRAGMA journal_mode")
        assert cur.fetchone()[0] == "wal"
        cur.execute("PRAGMA busy_timeout")
        assert cur.fetchone()[0] >= 20000
        cur.execute("PRAGMA synchronous")
        assert cur.fetchone()[0] == 2  # FULL
    assert connection.transaction_mode == "IMMEDIATE"


def test_appends_wait_on_an_embedding_projects_plain_sqlite(seeded, monkeypatch):
    """An embedding project's SQLite on Django's defaults (DEFERRED transactions, 5 s busy
    timeout): concurrent appends still wait for each other instead of failing, because an
    append's first statement is a write (no read-to-write lock upgrade)."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite settings")
    options = connections.settings["default"]["OPTIONS"]  # what the writers' new connections use
    monkeypatch.setitem(options, "transaction_mode", None)
    monkeypatch.setitem(options, "timeout", 5)
    monkeypatch.delitem(options, "init_command", raising=False)
    op = _operation(seeded["users"]["alice"], seeded["servers"]["acme"])
    modes: list = []

    def write(i: int) -> None:
        connections["default"].ensure_connection()
        modes.append(connections["default"].transaction_mode)
        for n in range(10):
            audit.record(op, "shown", round_number=1, reason=f"writer {i}", read_back=(n == 5))

    errors = run_threads(write, 20)
    assert set(modes) == {None}  # the writers really ran with DEFERRED transactions
    assert not errors, f"{len(errors)} of 20 writers failed: {errors[:3]!r}"
    assert AuditEvent.objects.filter(operation_id=op.id).count() == 200
    assert "OK acme" in _verify()


def test_an_append_waits_for_a_writer_holding_the_chain(seeded, settings):
    """While another writer holds the tenant's chain, an append waits for it (it does not fail),
    then lands after it."""
    settings.MRTRWEB = {"AUDIT_WAIT_S": 20}
    op = _operation(seeded["users"]["alice"], seeded["servers"]["acme"])
    holder = ChainHolder(op.tenant_id)
    done: list = []
    writer = threading.Thread(target=lambda: (done.append(audit.record(op, "shown", round_number=1)),
                                              connections.close_all()), daemon=True)
    writer.start()
    writer.join(0.5)
    assert writer.is_alive() and not done  # it waits for the holder
    holder.release()
    writer.join(20)
    assert done and done[0].sequence == 1
    assert "OK acme" in _verify()


def test_an_append_fails_closed_after_the_wait_limit(seeded, settings, caplog):
    """A chain held by someone else for longer than AUDIT_WAIT_S: the append gives up with
    AuditUnavailable (logged, with that reason), so the retry it guards is not sent; the chain
    is intact and appends work again once it is free."""
    settings.MRTRWEB = {"AUDIT_WAIT_S": 0.5}
    op = _operation(seeded["users"]["alice"], seeded["servers"]["acme"])
    holder = ChainHolder(op.tenant_id)
    try:
        with pytest.raises(audit.AuditUnavailable, match="stayed locked by other writers for 0.5 s"):
            audit.record(op, "submitted", round_number=1, read_back=True)
    finally:
        holder.release()
    assert "stayed locked by other writers" in caplog.text and "submitted" in caplog.text
    assert not AuditEvent.objects.filter(operation_id=op.id).exists()
    assert audit.record(op, "submitted", round_number=1, read_back=True).sequence == 1
    assert "OK acme" in _verify()


def test_another_tenants_chain_does_not_wait_on_postgresql(seeded, settings):
    """PostgreSQL locks one tenant's chain head: another tenant's appends go on meanwhile."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer lock for the whole database")
    settings.MRTRWEB = {"AUDIT_WAIT_S": 1}
    acme, globex = seeded["servers"]["acme"], seeded["servers"]["globex"]
    holder = ChainHolder(acme.tenant_id)
    try:
        row = audit.record(_operation(seeded["users"]["bob"], globex), "received", round_number=1)
    finally:
        holder.release()
    assert row.sequence == 1


def test_a_card_shown_in_many_tabs_at_once_has_one_receipt(seeded, live):
    """The consent receipt (``shown``) is written once per round and display, however many tabs
    render the card at the same moment (checked again under the chain lock)."""
    from mrtrweb.consent import panels
    from mrtrweb.operations import get_gate, handle_of

    s = WebSession()
    s.login(live.url, "alice", "alice-demo-pw")
    op_id = s.start(live.url, seeded["servers"]["acme"].pk, "deploy", {"env": "staging", "replicas": "1"})
    assert _wait_status(op_id, {"awaiting_input", "failed", "denied"}) == "awaiting_input"
    op = Operation.objects.select_related("server", "tenant").get(pk=op_id)
    rnd = get_gate().state(handle_of(op)).round
    assert not AuditEvent.objects.filter(operation_id=op_id, event="shown").exists()

    assert not run_threads(lambda _i: panels.record_shown(op, rnd), 12)
    assert AuditEvent.objects.filter(operation_id=op_id, event="shown").count() == 1
    assert "OK acme" in _verify()


def test_two_reconciles_at_once_settle_an_expired_round_once(seeded):
    """``mrtr_reconcile`` run from two cron hosts at the same moment: one ``expired`` outcome per
    expired round, so the next run reports no operation with several outcomes."""
    import datetime

    from django.utils import timezone

    from mrtrweb.audit import reconcile

    op = _operation(seeded["users"]["alice"], seeded["servers"]["acme"])
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.AWAITING_INPUT, rounds=1)
    audit.record(op, "received", round_number=1, state_digest="", schema_digests={})
    later = timezone.now() + datetime.timedelta(hours=2)  # past the round's lifetime

    assert not run_threads(lambda _i: reconcile.reconcile(now=later), 6)
    assert AuditEvent.objects.filter(operation_id=op.id, event="expired").count() == 1
    report = reconcile.reconcile(now=later)
    assert report["multiple_outcomes"] == [] and report["expired"] == []
    assert Operation.objects.get(pk=op.pk).status == "expired"
    assert "OK acme" in _verify()
