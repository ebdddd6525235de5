"""Metrics of real worker processes (uvicorn, production settings, PostgreSQL and Redis) in
prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``): a round received by worker A
and answered through worker B is counted once, and either worker's ``/mcp/metrics/`` reports the
sum over both; the pending-rounds gauge is the database's count for the tenant (by primary key)."""

from __future__ import annotations

import time

import pytest

from .. import scrape
from ..topology import Cluster, PrivateDatabase, WebSession

pytestmark = [pytest.mark.services]

TOKEN = "workers-scrape-token-31c9"
VALID = {"in-confirm_deploy-confirm": "on", "in-confirm_deploy-ticket": "CHG-9", "in-confirm_deploy-window": "3",
         "in-confirm_deploy-region": "eu-west-1"}


def test_a_round_across_two_workers_is_counted_once_and_seen_from_both(demo_mcp, tmp_path):
    db = PrivateDatabase()
    mp_dir = tmp_path / "prometheus"
    mp_dir.mkdir()
    c = Cluster(db, demo_mcp.url, MRTRWEB_METRICS_TOKEN=TOKEN, PROMETHEUS_MULTIPROC_DIR=str(mp_dir))
    try:
        a, b = c.start("A"), c.start("B")
        assert scrape.fetch(a, None)[0] == 401 and scrape.fetch(b, "nope")[0] == 401
        before = scrape.scrape(a, TOKEN)
        tenant = str(db.query("SELECT id FROM mrtrweb_tenant WHERE slug = 'acme'")[0][0])
        alice = WebSession()
        alice.login(a, "alice", "alice-demo-pw")
        op_id = alice.start(a, c.server_id(), "deploy", {"env": "staging", "replicas": "2"})
        c.wait_status(op_id, "awaiting_input")
        waiting = scrape.scrape(b, TOKEN)
        assert scrape.value(waiting, "mrtrweb_pending_rounds", tenant=tenant) == 1
        alice.page(b, op_id)  # the card shown (its receipt), on B
        status, _body = alice.answer(b, op_id, 1, "accept", **VALID)
        assert status == 302
        c.wait_status(op_id, "completed")
        deadline = time.monotonic() + 30
        while not db.query("SELECT 1 FROM mrtrweb_auditevent WHERE operation_id = %s AND event = 'completed'", op_id):
            assert time.monotonic() < deadline, "no completed event"  # written just after the status
            time.sleep(0.05)
        rows = db.query("SELECT event, count(*) FROM mrtrweb_auditevent WHERE operation_id = %s GROUP BY event",
                        op_id)
        after_a, after_b = scrape.scrape(a, TOKEN), scrape.scrape(b, TOKEN)
    finally:
        c.stop_all()
        db.drop()
    events = dict(rows)
    assert events.get("received") == 1 and events.get("submitted") == 1, events
    for after in (after_a, after_b):
        d = lambda name, **labels: scrape.delta(after, before, name, **labels)  # noqa: E731
        assert d("mrtrweb_rounds_received_total", method="tools/call", kind="mrtr") == 1
        assert d("mrtrweb_rounds_answered_total", action="accept") == 1
        # received on A, answered on B: B times it from when the round was handed to the person
        assert d("mrtrweb_round_latency_seconds_count", outcome="answered") == 1
        for event, count in events.items():
            assert d("mrtrweb_audit_events_total", event=event) == count, event
        assert scrape.value(after, "mrtrweb_pending_rounds", tenant=tenant) == 0
        labels = scrape.mrtrweb_labels(after)
        assert not [pair for pair in labels if pair[0] == "tenant" and pair[1] != tenant], labels
        assert not [pair for pair in labels if "alice" in pair[1] or "acme" in pair[1].lower()], labels
    assert {p.name.split("_")[0] for p in mp_dir.iterdir()} >= {"counter", "histogram"}
