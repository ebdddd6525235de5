"""The metrics of a running worker (issue 16, "Operators see it too"): the whole ASGI app under
uvicorn (:class:`tests.live_server.LiveAsgiServer`), a person driving real rounds of the demo MCP server
over HTTP with a WebSocket open, and the worker's own ``/mcp/metrics/`` scraped and parsed with
``prometheus_client.parser``: every counter and histogram moved by exactly what happened, the
pending-rounds gauge counts the tenant's open round, no label names a person, a tenant or a value,
and the endpoint refuses scrapes without the token (401) or when no token is configured (404)."""

from __future__ import annotations

import gc
import json
import time
from collections import Counter

import pytest

from mrtrweb.runtime import metrics
from mrtrweb.models import AuditEvent, Operation, Tenant

from .. import scrape
from ..live_server import LiveAsgiServer
from ..topology import WebSession

pytestmark = [pytest.mark.django_db(transaction=True)]

TOKEN = "scrape-Token-7f3a9c1e"
VALID = {"in-confirm_deploy-confirm": "on", "in-confirm_deploy-ticket": "CHG-4711", "in-confirm_deploy-window": "3",
         "in-confirm_deploy-region": "eu-west-1"}
INVALID = dict(VALID, **{"in-confirm_deploy-email": "not-an-email"})  # Django accepts it; the gate does not


@pytest.fixture(scope="module")
def live(django_db_setup):
    server = LiveAsgiServer().start()
    yield server
    server.stop()


@pytest.fixture
def token(settings):
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "METRICS_TOKEN": TOKEN}
    return TOKEN


def _pushed_round(ws, op_id: str, timeout_s: float = 30.0) -> None:
    """Wait for the socket to receive the operation's card with an open round."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no card of operation {op_id} with an open round was pushed"
        message = json.loads(ws.recv(timeout=left))
        if message.get("type") == "operation" and message.get("id") == op_id and \
                message.get("status") == "awaiting_input":
            return


def _ended(op_id: str, timeout_s: float = 60.0) -> None:
    """Wait until the operation is terminal and its terminal audit event is written."""
    deadline = time.monotonic() + timeout_s
    while not (Operation.objects.filter(pk=op_id, status__in=Operation.TERMINAL).exists() and
               AuditEvent.objects.filter(operation_id=op_id, event__in=AuditEvent.TERMINAL).exists()):
        assert time.monotonic() < deadline, f"operation {op_id} did not end"
        time.sleep(0.05)


def test_a_running_worker_exposes_what_its_rounds_did(seeded, live, token):
    """Three rounds of ``deploy`` through the worker: one answered after a refused answer, one
    declined, one stopped while open. The worker's own metrics move by exactly that."""
    from websockets.sync.client import connect

    base = live.url
    acme = seeded["servers"]["acme"]
    alice = WebSession()
    alice.login(base, "alice", "alice-demo-pw")
    cookie = "; ".join(f"{c.name}={c.value}" for c in alice.jar)
    before = scrape.scrape(base, token)
    with connect(base.replace("http://", "ws://") + "/ws/mrtrweb/", origin=base,
                 additional_headers={"Cookie": cookie}, open_timeout=10) as ws:
        answered = alice.start(base, acme.pk, "deploy", {"env": "staging", "replicas": "3"})
        _pushed_round(ws, answered)
        during = scrape.scrape(base, token)
        status, review, _body = alice.review(base, answered, 1, **INVALID)
        assert (status, review) == (400, None)  # refused by the gate: audited "rejected"
        status, _body = alice.answer(base, answered, 1, "accept", **VALID)
        assert status == 302
        _ended(answered)

        declined = alice.start(base, acme.pk, "deploy", {"env": "production", "replicas": "1"})
        _pushed_round(ws, declined)
        status, _body = alice.answer(base, declined, 1, "decline")
        assert status == 302
        _ended(declined)

        stopped = alice.start(base, acme.pk, "deploy", {"env": "staging", "replicas": "2"})
        _pushed_round(ws, stopped)
        status, _location, _body = alice.request(f"{base}/mcp/operations/{stopped}/stop/", {})
        assert status == 302
        _ended(stopped)
    gc.collect()  # this process is the worker: its collector's pause is observed
    after = scrape.scrape(base, token)
    ops = [answered, declined, stopped]

    assert Operation.objects.get(pk=answered).status == "completed"
    assert AuditEvent.objects.get(operation_id=stopped, event="denied").reason == "cancelled"
    d = lambda name, **labels: scrape.delta(after, before, name, **labels)  # noqa: E731
    assert d("mrtrweb_rounds_received_total", method="tools/call", kind="mrtr") == 3
    assert d("mrtrweb_rounds_rejected_total", code="input_response_schema_mismatch") == 1
    assert d("mrtrweb_rounds_answered_total", action="accept") == 1
    assert d("mrtrweb_rounds_answered_total", action="decline") == 1
    assert d("mrtrweb_rounds_answered_total", action="cancel") == 0
    assert d("mrtrweb_denied_total", reason="cancelled") == 1
    # every audit row of the three operations, counted once by kind, its append timed once
    rows = Counter(AuditEvent.objects.filter(operation_id__in=ops).values_list("event", flat=True))
    assert rows["shown"] == 3 and rows["submitted"] == 2 and rows["rejected"] == 1, rows
    for event in metrics.EVENTS:
        assert d("mrtrweb_audit_events_total", event=event) == rows[event], event
    assert d("mrtrweb_audit_append_seconds_count") == sum(rows.values())
    assert d("mrtrweb_audit_append_seconds_sum") > 0
    assert d("mrtrweb_audit_failures_total") == 0
    # received -> retry left (two answers), received -> ended (the stop)
    assert d("mrtrweb_round_latency_seconds_count", outcome="answered") == 2
    assert d("mrtrweb_round_latency_seconds_count", outcome="ended") == 1
    assert d("mrtrweb_round_latency_seconds_sum", outcome="answered") > 0
    # one card with an open round pushed per operation to the one socket
    assert d("mrtrweb_push_latency_seconds_count") == 3
    assert d("mrtrweb_push_latency_seconds_sum") > 0
    assert d("mrtrweb_gc_pause_seconds_count", generation="2") >= 1
    # the open round was counted for its tenant (by primary key) while it waited, and not after
    assert scrape.value(during, "mrtrweb_pending_rounds", tenant=str(acme.tenant_id)) == 1
    assert scrape.value(after, "mrtrweb_pending_rounds", tenant=str(acme.tenant_id)) == 0
    assert scrape.value(after, "process_resident_memory_bytes") > 0

    # no label carries a person, a tenant's name or slug, an answer, a URL, an id, the token
    allowed = ({("method", m) for m in metrics.METHODS | {"other"}} | {("kind", k) for k in metrics.KINDS}
               | {("code", c) for c in metrics.REJECT_CODES | {"other"}}
               | {("reason", r) for r in metrics.DENY_REASONS | {"other"}}
               | {("action", a) for a in metrics.ACTIONS | {"other"}}
               | {("event", e) for e in metrics.EVENTS | {"other"}}
               | {("outcome", "answered"), ("outcome", "ended")}
               | {("generation", g) for g in ("0", "1", "2", "other")}
               | {("tenant", str(pk)) for pk in Tenant.objects.values_list("pk", flat=True)})
    labels = scrape.mrtrweb_labels(after) | scrape.mrtrweb_labels(during)
    assert labels <= allowed, labels - allowed
    _status, _ctype, body = scrape.fetch(base, token)
    secrets = ["alice", "CHG-4711", "eu-west-1", "staging", seeded["mcp"].url, TOKEN, *ops,
               *Tenant.objects.values_list("name", flat=True), *Tenant.objects.values_list("slug", flat=True)]
    states = [s for s in AuditEvent.objects.filter(operation_id__in=ops).values_list("state_digest", flat=True) if s]
    for secret in secrets + states:
        assert secret not in body, secret


def test_the_endpoint_wants_the_token(seeded, live, token):
    """No token: 401 ``metrics_token_required``; a wrong one (even a prefix): 401
    ``metrics_token_invalid``; both with ``WWW-Authenticate: Bearer``; the right one: 200, the
    Prometheus text format, parsed."""
    assert scrape.fetch(live.url, None)[::2] == (401, "metrics_token_required\n")
    assert scrape.fetch(live.url, "wrong")[::2] == (401, "metrics_token_invalid\n")
    assert scrape.fetch(live.url, TOKEN[:-1])[::2] == (401, "metrics_token_invalid\n")
    status, ctype, body = scrape.fetch(live.url, TOKEN)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
    assert ("mrtrweb_audit_events_total", frozenset({("event", "received")})) in scrape.parse(body) or \
        "# TYPE mrtrweb_audit_events counter" in body


def test_the_endpoint_is_absent_without_a_token(seeded, live, settings):
    """``METRICS_TOKEN`` unset (the default): 404 for everyone, token or not."""
    settings.MRTRWEB = {k: v for k, v in getattr(settings, "MRTRWEB", {}).items() if k != "METRICS_TOKEN"}
    assert scrape.fetch(live.url, None)[::2] == (404, "metrics_disabled\n")
    assert scrape.fetch(live.url, TOKEN)[::2] == (404, "metrics_disabled\n")
