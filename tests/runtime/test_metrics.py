"""mrtrweb.runtime.metrics and its endpoint, in this process: labels stay in fixed sets whatever comes from
outside, the label sets follow the product's codes, the hooks never raise and count each event
once, and the view's refusals are stable (the running worker: tests/runtime/test_metrics_live.py)."""

from __future__ import annotations

import datetime
import gc
import types
import uuid

import pytest
from django.test import Client

from mrtrweb.runtime import metrics

from .. import scrape

TOKEN = "unit-token-5d1c"


def _value(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def _op(**kw):
    base = dict(id=uuid.uuid4(), method="tools/call", status="running", updated_at=None, rounds=1)
    return types.SimpleNamespace(**{**base, **kw})


def test_unknown_values_from_outside_count_as_other():
    hostile = "alice@example.com <script> " + "x" * 300
    assert metrics.bounded(hostile, metrics.REJECT_CODES) == "other"
    assert metrics.bounded(None, metrics.DENY_REASONS) == "other"
    assert metrics.bounded("input_response_schema_mismatch", metrics.REJECT_CODES) == "input_response_schema_mismatch"
    assert metrics.round_action({"a": "accept", "b": "accept"}) == "accept"
    assert metrics.round_action({"a": "accept", "b": "decline"}) == "mixed"
    assert metrics.round_action({"a": "accept", "b": hostile}) == "other"
    assert metrics.round_action({"a": hostile}) == "other"
    assert metrics.round_action({}) == "other"
    assert metrics.round_action(None) == "other"

    rejected = _value("mrtrweb_rounds_rejected_total", code="other")
    denied = _value("mrtrweb_denied_total", reason="other")
    received = _value("mrtrweb_rounds_received_total", method="other", kind="mrtr")
    events = _value("mrtrweb_audit_events_total", event="other")
    metrics.observe_event(_op(), "rejected", code=hostile, round_number=1)
    metrics.observe_event(_op(), "denied", reason=hostile, round_number=1)
    metrics.observe_event(_op(method=hostile), "received", code=hostile, round_number=1)
    metrics.observe_event(_op(), hostile)
    assert _value("mrtrweb_rounds_rejected_total", code="other") == rejected + 1
    assert _value("mrtrweb_denied_total", reason="other") == denied + 1
    assert _value("mrtrweb_rounds_received_total", method="other", kind="mrtr") == received + 1
    assert _value("mrtrweb_audit_events_total", event="other") == events + 1
    text = scrape.parse(metrics.exposition(None)[0].decode())
    assert not [pair for pair in scrape.mrtrweb_labels(text) if hostile in pair[1] or "alice" in pair[1]]


def test_label_sets_follow_the_products_codes():
    from mrtrweb.tenancy import access
    from mrtrweb.consent import sampling
    from mrtrweb.models import AuditEvent
    from mrtrweb.operations import messages

    assert metrics.DENY_REASONS == set(messages.DENY_MESSAGES)
    # the events of operations (a server's configuration events are no round's: issue 29; nor a model's
    # proposals: issue 32, appended as configuration events are)
    assert metrics.EVENTS == set(AuditEvent.Event.values) - set(AuditEvent.CONFIG) - set(AuditEvent.CHAT)
    product = {messages.STORE_UNAVAILABLE, messages.AUDIT_UNAVAILABLE, messages.INVALID_RESULT,
               messages.WORKER_DRAINING, messages.AUTHORIZATION_CHANGED, messages.PROTOCOL_CHANGED,
               messages.INVALID_URL_REQUIRED, access.ACCESS_REVOKED, sampling.INVALID_ANSWER}
    assert product <= metrics.REJECT_CODES
    assert set(metrics._KIND_OF_CODE) == {messages.LEGACY, messages.URL_REQUIRED}


def test_a_round_s_kind_comes_from_its_received_code():
    """An MRTR round, a 2025-11-25 server's request during a call, a URL-required error; a reused
    requestState is still an MRTR round."""
    from mrtrweb.operations import messages

    for code, kind in [("", "mrtr"), (messages.STATE_REUSED, "mrtr"), (messages.LEGACY, "legacy"),
                       (messages.URL_REQUIRED, "url")]:
        before = _value("mrtrweb_rounds_received_total", method="prompts/get", kind=kind)
        metrics.observe_event(_op(method="prompts/get"), "received", code=code, round_number=1)
        assert _value("mrtrweb_rounds_received_total", method="prompts/get", kind=kind) == before + 1, code


def test_the_hooks_never_raise():
    metrics.observe_event(object(), "received", round_number=1)
    metrics.observe_event(None, "submitted", actions="not a dict", round_number="x")
    metrics.observe_push(object(), "channel")
    metrics.observe_push(None, None)
    metrics.audit_failed()


def test_round_latency_from_this_worker_or_from_the_row_of_another():
    """Received here then answered here: from the received event (monotonic clock); received on
    another worker: from when the operation was handed to the person (its ``updated_at``)."""
    op = _op()
    count = _value("mrtrweb_round_latency_seconds_count", outcome="answered")
    total = _value("mrtrweb_round_latency_seconds_sum", outcome="answered")
    ended = _value("mrtrweb_round_latency_seconds_count", outcome="ended")
    metrics.observe_event(op, "received", round_number=1, seconds=0.01)
    metrics.observe_event(op, "submitted", round_number=1, actions={"a": "accept"})
    metrics.observe_event(op, "completed", round_number=1)  # the round's answer already left: not again
    assert _value("mrtrweb_round_latency_seconds_count", outcome="answered") == count + 1
    assert _value("mrtrweb_round_latency_seconds_count", outcome="ended") == ended
    elsewhere = _op(status="awaiting_input",
                    updated_at=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5))
    metrics.observe_event(elsewhere, "submitted", round_number=1, actions={"a": "decline"})
    assert _value("mrtrweb_round_latency_seconds_count", outcome="answered") == count + 2
    assert _value("mrtrweb_round_latency_seconds_sum", outcome="answered") >= total + 5
    ended = _value("mrtrweb_round_latency_seconds_count", outcome="ended")
    stopped = _op()
    metrics.observe_event(stopped, "received", round_number=2)
    metrics.observe_event(stopped, "denied", reason="cancelled", round_number=2)
    metrics.observe_event(stopped, "denied", reason="cancelled", round_number=2)  # no start left: once
    assert _value("mrtrweb_round_latency_seconds_count", outcome="ended") == ended + 1


def test_the_round_starts_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_TRACKED_ROUNDS", 3)
    ops = [_op() for _ in range(5)]
    for op in ops:
        metrics.observe_event(op, "received", round_number=1)
    assert len(metrics._started) <= 3
    assert (ops[-1].id, 1) in metrics._started and (ops[0].id, 1) not in metrics._started


def test_a_push_is_observed_once_per_socket_and_round():
    now = datetime.datetime.now(datetime.timezone.utc)
    op = _op(status="awaiting_input", updated_at=now - datetime.timedelta(seconds=0.2))
    count = _value("mrtrweb_push_latency_seconds_count")
    metrics.observe_push(op, "socket-1")
    metrics.observe_push(op, "socket-1")  # the same card again: not a new round
    metrics.observe_push(op, "socket-2")  # the person's second tab
    metrics.observe_push(_op(status="completed", updated_at=now), "socket-1")  # no open round: not a card
    assert _value("mrtrweb_push_latency_seconds_count") == count + 2
    op.rounds = 2
    metrics.observe_push(op, "socket-1")
    assert _value("mrtrweb_push_latency_seconds_count") == count + 3


def test_garbage_collector_pauses_are_timed_per_generation():
    assert metrics._on_gc in gc.callbacks
    metrics.install_gc_hook()
    assert gc.callbacks.count(metrics._on_gc) == 1
    before = {g: _value("mrtrweb_gc_pause_seconds_count", generation=g) for g in ("0", "2")}
    gc.collect(0)
    gc.collect()
    assert _value("mrtrweb_gc_pause_seconds_count", generation="0") >= before["0"] + 1
    assert _value("mrtrweb_gc_pause_seconds_count", generation="2") >= before["2"] + 1


@pytest.mark.django_db(transaction=True)
def test_a_receipt_written_once_is_counted_once(seeded):
    """``audit.record(..., once=...)`` that finds the receipt already there appends nothing and
    counts nothing; each real append is counted and timed."""
    from mrtrweb.audit import events as audit
    from mrtrweb.models import Operation

    server = seeded["servers"]["acme"]
    rid = f"mrtr-{uuid.uuid4()}"
    op = Operation.objects.create(tenant=server.tenant, user=seeded["users"]["alice"], server=server,
                                  method="tools/call", name="deploy", params={}, request_id=rid, latest_request_id=rid)
    shown = _value("mrtrweb_audit_events_total", event="shown")
    appends = _value("mrtrweb_audit_append_seconds_count")
    first = audit.record(op, "shown", round_number=1, display_digest="sha256:x", once=("round_number", "display_digest"))
    again = audit.record(op, "shown", round_number=1, display_digest="sha256:x", once=("round_number", "display_digest"))
    assert again.pk == first.pk
    assert _value("mrtrweb_audit_events_total", event="shown") == shown + 1
    assert _value("mrtrweb_audit_append_seconds_count") == appends + 1


@pytest.mark.django_db
def test_the_view_refuses_with_stable_reasons_and_never_a_500(settings, monkeypatch):
    client = Client()
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "METRICS_TOKEN": None}
    assert (client.get("/mcp/metrics/").status_code, client.get("/mcp/metrics/").content) == (404, b"metrics_disabled\n")
    settings.MRTRWEB = {**settings.MRTRWEB, "METRICS_TOKEN": TOKEN}
    refused = client.get("/mcp/metrics/", HTTP_AUTHORIZATION=f"Basic {TOKEN}")
    assert (refused.status_code, refused.content) == (401, b"metrics_token_required\n")
    assert refused["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/mcp/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").content == b"metrics_token_invalid\n"
    assert client.post("/mcp/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405
    ok = client.get("/mcp/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert ok.status_code == 200 and ok["Cache-Control"] == "no-store"
    assert any(name == "mrtrweb_gc_pause_seconds_count" for name, _labels in scrape.parse(ok.content.decode()))
    om = client.get("/mcp/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", HTTP_ACCEPT="application/openmetrics-text")
    assert om["Content-Type"].startswith("application/openmetrics-text") and om.content.endswith(b"# EOF\n")

    def broken(accept):
        raise RuntimeError("collector broke")

    monkeypatch.setattr(metrics, "exposition", broken)
    failed = client.get("/mcp/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert (failed.status_code, failed.content) == (503, b"metrics_unavailable\n")


@pytest.mark.django_db
def test_pending_rounds_are_left_out_when_the_database_fails(monkeypatch, caplog):
    """A scrape while the database fails: the gauge is missing from it (logged), the rest served."""
    from django.db import OperationalError
    from django.db.models import QuerySet

    def down(self, *args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(QuerySet, "annotate", down)
    body = metrics.exposition(None)[0].decode()
    assert "mrtrweb_pending_rounds" not in body and "mrtrweb_audit_events" in body
    assert "pending rounds not counted (OperationalError)" in caplog.text


@pytest.mark.parametrize("value", ["", "/nonexistent/mrtrweb-metrics"])
def test_a_multiprocess_dir_that_is_not_a_directory_stops_start_up(tmp_path, value):
    """prometheus_client turns multiprocess mode on when the variable exists at all: an empty
    value would scatter its files in the working directory, a missing directory fail at the first
    count. Both stop the import with the reason instead (in a fresh process: the mode is chosen
    when the metrics are made), and nothing is written."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=value, DJANGO_SETTINGS_MODULE="mrtrweb.site.settings",
               PYTHONPATH=str(scrape.__file__).rsplit("/tests/", 1)[0])
    out = subprocess.run([sys.executable, "-c", "import django; django.setup(); import mrtrweb.runtime.metrics"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "PROMETHEUS_MULTIPROC_DIR is set but is not an existing directory" in out.stderr
    assert list(tmp_path.iterdir()) == []
