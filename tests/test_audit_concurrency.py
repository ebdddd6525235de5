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

from mrtrweb import audit
from mrtrweb.models import AuditEvent, Membership, McpServer, Operation

from .live import LiveAsgiServer
from .topology import WebSession, status_in

pytestmark = [pytest.mark.django_db(transaction=True)]

USERS_PER_TENANT = 10
INVALID_PER_TENANT = 3  # users who first post invalid answers (3 each), then a valid one
INVALID_POSTS = 3

VALID = {"in-confirm_deploy-confirm": "on", "in-confirm_deploy-ticket": "CHG-1", "in-confirm_deploy-window": "3",
         "in-confirm_deploy-region": "eu-west-1"}
INVALID = dict(VALID, **{"in-confirm_deploy-email": "not-an-email"})  # Django accepts it; the gate does not


def _run_threads(target, count: int, timeout_s: float = 240.0) -> list[BaseException]:
    """Run ``target(i)`` in ``count`` threads released together; returns what they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(30)
            target(i)
        except BaseException as exc:  # noqa: BLE001 -- reported to the test
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    assert not any(t.is_alive() for t in threads), "some writers never finished"
    return errors


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
    errors = _run_threads(write, writers)
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


def test_twenty_users_of_two_tenants_answer_at_once(seeded, live, settings, caplog):
    """20 users (10 per tenant) start ``deploy``, open its card and answer at once; 3 per tenant
    first post 3 invalid answers each (refused and audited ``rejected``), then the valid one.
    Every valid answer is sent (no ``audit_unavailable``, no missing receipt), every round has
    exactly its rows, the server got 20 retries, and the chains verify."""
    settings.MRTRWEB = {"MAX_STARTS_PER_MINUTE": 1000, "MAX_TENANT_STARTS_PER_MINUTE": 1000}
    User = get_user_model()
    people: list[tuple[str, McpServer, bool]] = []
    for slug in ("acme", "globex"):
        server = seeded["servers"][slug]
        for i in range(USERS_PER_TENANT):
            name = f"{slug}-user-{i}"
            user = User.objects.create_user(name, password=f"{name}-pw")
            Membership.objects.create(tenant=server.tenant, user=user)
            people.append((name, server, i < INVALID_PER_TENANT))
    sessions = []
    for name, _server, _invalid in people:
        s = WebSession()
        s.login(live.url, name, f"{name}-pw")
        sessions.append(s)
    ops: dict[int, str] = {}
    outcomes: dict[int, list[int]] = {}

    def person(i: int) -> None:
        name, server, invalid = people[i]
        s = sessions[i]
        op_id = s.start(live.url, server.pk, "deploy", {"env": "staging", "replicas": str(i + 1)})
        ops[i] = op_id
        deadline = time.monotonic() + 60
        while status_in(s.page(live.url, op_id)) != "awaiting_input":  # the card shown: its receipt
            assert time.monotonic() < deadline, f"{name}: no round"
            time.sleep(0.05)
        codes = []
        if invalid:
            for _ in range(INVALID_POSTS):
                status, token, body = s.review(live.url, op_id, 1, **INVALID)
                assert token is None, f"{name}: an invalid answer was reviewed"
                codes.append(status)
        status, token, body = s.review(live.url, op_id, 1, **VALID)
        assert token is not None, f"{name}: valid answer not reviewed ({status}): {body[:300]}"
        status, body = s.send(live.url, op_id, 1, token, **VALID)
        codes.append(status)
        outcomes[i] = codes

    caplog.set_level(logging.ERROR, logger="mrtrweb")
    errors = _run_threads(person, len(people))
    assert not errors, f"{len(errors)} people failed: {errors[:3]!r}"
    for i, op_id in ops.items():
        _wait_status(op_id, {"completed", "failed", "denied", "expired"})
    statuses = Counter(Operation.objects.filter(pk__in=ops.values()).values_list("status", flat=True))
    assert statuses == {"completed": len(people)}, (statuses, list(Operation.objects.exclude(
        status="completed").values_list("error_code", "error_message")))
    invalid_people = [i for i, p in enumerate(people) if p[2]]
    for i, codes in outcomes.items():
        assert codes == ([400] * INVALID_POSTS if i in invalid_people else []) + [302], (people[i][0], codes)
    assert seeded["mcp"].calls[("deploy", True)] == len(people)  # every valid answer reached the server once
    for i, op_id in ops.items():
        kinds = Counter(AuditEvent.objects.filter(operation_id=op_id).values_list("event", flat=True))
        expected = {"received": 1, "shown": 1, "submitted": 1, "completed": 1}
        if i in invalid_people:
            expected["rejected"] = INVALID_POSTS
        assert kinds == expected, (people[i][0], kinds)
        codes = set(AuditEvent.objects.filter(operation_id=op_id, event="rejected").values_list("code", flat=True))
        assert codes <= {"input_response_schema_mismatch"}
        result = Operation.objects.get(pk=op_id).result
        assert result["content"][0]["text"].startswith(f"Deployed {i + 1} replica(s) to staging"), result
    assert not [r for r in caplog.records if r.name.startswith("mrtrweb.audit")], caplog.text
    out = _verify()
    assert "OK acme" in out and "OK globex" in out, out
    close_old_connections()
