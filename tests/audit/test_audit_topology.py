"""Audit appends from two ASGI worker processes on real PostgreSQL (issue 12, item 5): 20 users
of two tenants answer at once, each starting on one worker and answering on the other, invalid
answers, declines, cancels and stops mixed in. No valid answer is denied, every operation has
exactly its audit rows, and both chains verify."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from tests.audit.concurrency import EXPECTED, INVALID, INVALID_POSTS, ROLES, USERS_PER_TENANT, VALID
from ..topology import ROOT, Cluster, PrivateDatabase, WebSession, status_in

pytestmark = [pytest.mark.services]

MAKE_USERS = """
from django.contrib.auth import get_user_model
from mrtrweb.models import Membership, Tenant
User = get_user_model()
for slug in ("acme", "globex"):
    tenant = Tenant.objects.get(slug=slug)
    for i in range({n}):
        name = f"{{slug}}-user-{{i}}"
        user = User.objects.create_user(name, password=f"{{name}}-pw")
        Membership.objects.create(tenant=tenant, user=user)
"""


@pytest.fixture(scope="module")
def cluster(demo_mcp):
    db = PrivateDatabase()
    c = Cluster(db, demo_mcp.url, MRTRWEB_LOG_LEVEL="ERROR")
    try:
        out = subprocess.run([sys.executable, "manage.py", "shell", "-c", MAKE_USERS.format(n=USERS_PER_TENANT)],
                             cwd=ROOT, env=c.env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        c.start("A")
        c.start("B")
        yield c
    finally:
        c.stop_all()
        db.drop()


def test_twenty_users_answer_at_once_through_two_workers(cluster, demo_mcp):
    demo_mcp.log.clear()
    before = demo_mcp.calls[("deploy", True)]
    people = [(f"{slug}-user-{i}", slug, ROLES.get(i, "accept"))
              for slug in ("acme", "globex") for i in range(USERS_PER_TENANT)]
    servers = {slug: cluster.server_id(slug) for slug in ("acme", "globex")}
    workers = [cluster.url("A"), cluster.url("B")]
    sessions = []
    for name, _slug, _role in people:
        s = WebSession()
        s.login(workers[0], name, f"{name}-pw")  # the session cookie is valid on both workers
        sessions.append(s)
    ops: dict[int, str] = {}
    outcomes: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(people))

    def person(i: int) -> None:
        name, slug, role = people[i]
        s, start_on, answer_on = sessions[i], workers[i % 2], workers[1 - i % 2]
        try:
            barrier.wait(30)
            op_id = s.start(start_on, servers[slug], "deploy", {"env": "staging", "replicas": str(i + 1)})
            ops[i] = op_id
            deadline = time.monotonic() + 60
            while (status := status_in(s.page(answer_on, op_id))) != "awaiting_input":
                assert status in ("running", None) and time.monotonic() < deadline, f"{name}: no round ({status})"
                time.sleep(0.05)
            codes = []
            if role == "invalid_then_accept":
                for _ in range(INVALID_POSTS):
                    codes.append(s.review(answer_on, op_id, 1, **INVALID)[0])
            if role in ("decline", "cancel"):
                codes.append(s.answer(answer_on, op_id, 1, role)[0])
            elif role == "stop":
                codes.append(s.request(f"{answer_on}/mcp/operations/{op_id}/stop/", {})[0])
            else:
                status, token, body = s.review(answer_on, op_id, 1, **VALID)
                assert token is not None, f"{name}: valid answer not reviewed ({status}): {body[:300]}"
                codes.append(s.send(answer_on, op_id, 1, token, **VALID)[0])
            outcomes[i] = codes
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=person, args=(i,), daemon=True) for i in range(len(people))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not errors, f"{len(errors)} people failed: {errors[:3]!r}"
    cluster.wait_status(list(ops.values()), {"completed", "denied", "failed", "expired"}, timeout_s=120)
    deadline = time.monotonic() + 30
    while len(cluster.db.query("SELECT DISTINCT operation_id FROM mrtrweb_auditevent WHERE event IN "
                               "('completed', 'cancelled', 'denied', 'failed')")) < len(ops):
        if time.monotonic() > deadline:
            break  # the counts below name what is missing
        time.sleep(0.1)
    for i, op_id in ops.items():
        name, _slug, role = people[i]
        rows, status = EXPECTED[role]
        assert cluster.status(op_id) == status, (name, role)
        refused = [400] * (INVALID_POSTS if role == "invalid_then_accept" else 0)
        assert outcomes[i] == refused + [302], (name, outcomes[i])
        kinds = Counter(e for (e,) in cluster.db.query("SELECT event FROM mrtrweb_auditevent WHERE operation_id = %s",
                                                       op_id))
        assert kinds == rows, (name, role, kinds)
    answered = sum(1 for p in people if p[2] != "stop")
    assert demo_mcp.calls[("deploy", True)] - before == answered
    out = subprocess.run([sys.executable, "manage.py", "mrtr_audit_verify"], cwd=ROOT, env=cluster.env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "OK acme" in out.stdout and "OK globex" in out.stdout, out.stdout + out.stderr
    for name, path in cluster.logs.items():
        text = path.read_text()
        assert "audit write" not in text and "Traceback" not in text, (name, text[-2000:])
