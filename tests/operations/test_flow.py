"""The main job through the Django app (in-process ASGI test client) against the real demo MCP
server on loopback: start a call, get the round, answer it, see the result; isolation between
users; exactly-once retries; audit rows without secrets."""

from __future__ import annotations

import asyncio
import re

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation
from tests.answering import DEPLOY_OK, answer_card, post_review, reload_op, signed_client, start_call

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_one_round_form_end_to_end(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await start_call(client, server, "deploy", {"env": "production", "replicas": "3"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    # who asks, for what, and what happens next
    assert "Demo server" in page and server.origin in page
    assert "tools/call" in page and "deploy" in page
    assert "Deploy 3 replica(s) to production?" in page
    assert "Your answer goes to Demo server as the retry of tools/call deploy." in page
    assert 'name="in-confirm_deploy-window"' in page and 'value="2"' in page  # default pre-filled
    assert 'type="email"' in page and "Europe (Ireland)" in page

    resp = await answer_card(client, op, "accept", DEPLOY_OK)
    assert resp.status_code == 302
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    text = op.result["content"][0]["text"]
    assert "Deployed 3 replica(s) to production" in text and "region us-east-1" in text and "window 3h" in text
    assert mcp.calls[("deploy", True)] == 1 and mcp.calls[("deploy", False)] == 1
    # the product chose the ids: UUID strings, different for the call and its retry
    ids = [r.request_id for r in mcp.log.tool_calls("deploy")]
    assert len(set(ids)) == 2 and all(isinstance(i, str) and i.startswith("mrtr-") for i in ids)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Deployed 3 replica(s)" in page


async def test_invalid_answer_is_not_sent_and_round_stays_open(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await start_call(client, server, "deploy", {"env": "staging", "replicas": "1"})
    bad = dict(DEPLOY_OK, **{"in-confirm_deploy-ticket": "x", "in-confirm_deploy-email": "not an address"})
    resp = await answer_card(client, op, "accept", bad)
    assert resp.status_code == 400
    page = resp.content.decode()
    assert "Enter at least 3 characters" in page or "at least 3 characters" in page
    assert (await reload_op(op)).status == Operation.Status.AWAITING_INPUT
    assert mcp.calls[("deploy", True)] == 0
    # an address Django accepts but the gate's real format check refuses never leaves either
    bad = dict(DEPLOY_OK, **{"in-confirm_deploy-email": "ops@localhost"})
    resp = await answer_card(client, op, "accept", bad)
    assert resp.status_code == 400 and mcp.calls[("deploy", True)] == 0
    resp = await answer_card(client, op, "accept", DEPLOY_OK)
    assert resp.status_code == 302
    assert (await reload_op(op)).status == Operation.Status.COMPLETED
    assert mcp.calls[("deploy", True)] == 1


async def test_decline_is_sent_as_the_answer(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await start_call(client, server, "deploy", {"env": "staging", "replicas": "1"})
    await answer_card(client, op, "decline")
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED
    assert "declined" in op.result["content"][0]["text"].lower()
    retry = [r for r in mcp.log.tool_calls("deploy") if r.is_retry]
    assert len(retry) == 1


async def test_double_submit_sends_once(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await start_call(client, server, "deploy", {"env": "staging", "replicas": "1"})
    await client.get(f"/mcp/operations/{op.id}/")  # the card is shown
    url = f"/mcp/operations/{op.id}/answer/"
    review, token = await post_review(client, url, dict(DEPLOY_OK, round="1"))  # reviewed once, then sent twice
    assert review.status_code == 200 and token and mcp.calls[("deploy", True)] == 0
    first, second = await asyncio.gather(
        client.post(url, dict(DEPLOY_OK, action="send", round="1", review_token=token)),
        client.post(url, dict(DEPLOY_OK, action="send", round="1", review_token=token)),
    )
    await operations.wait_idle()
    assert sorted([first.status_code, second.status_code]) == [302, 409]
    assert mcp.calls[("deploy", True)] == 1
    assert (await reload_op(op)).status == Operation.Status.COMPLETED
    late = await answer_card(client, op, "accept", DEPLOY_OK, round_no=1)
    assert late.status_code == 409 and mcp.calls[("deploy", True)] == 1


async def test_two_rounds_threaded_through_request_state(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await start_call(client, server, "book_trip", {"destination": "Lisbon"})
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1
    await answer_card(client, op, "accept", {"in-dates-start": "2026-12-01", "in-dates-nights": "3"})
    op = await reload_op(op)
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 2, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Choose your seat" in page
    await answer_card(client, op, "accept", {"in-seat-seat": "aisle", "in-seat-confirm": "on"})
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert "Booked 3 night(s) in Lisbon from 2026-12-01, aisle seat." in op.result["content"][0]["text"]


async def test_url_mode_round(seeded):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = await signed_client(alice)
    op = await start_call(client, server, "connect_account", {"provider": "github"})
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "https://auth.example.test/connect?provider=github" in page
    assert 'rel="noopener noreferrer"' in page and 'target="_blank"' in page
    assert re.search(r'<mark class="host" dir="ltr">auth\.example\.test</mark>', page)
    await answer_card(client, op, "accept")
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED
    assert "connected" in op.result["content"][0]["text"]


async def test_state_only_round_is_retried_without_asking(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await start_call(client, server, "busy_report", {"topic": "sales"})
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 2, (op.error_code, op.error_message)
    await answer_card(client, op, "accept", {"in-format-format": "csv"})
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED
    assert "ready as csv" in op.result["content"][0]["text"]
    assert mcp.calls[("busy_report", True)] == 2


async def test_round_limit_stops_an_endless_server(seeded, settings):
    settings.MRTRWEB = {"MAX_ROUNDS": 3, "STATE_ONLY_BACKOFF_S": 0.01, "STATE_ONLY_BACKOFF_CAP_S": 0.02}
    operations.reset_gate()
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await start_call(client, server, "endless", {})
    op = await reload_op(op)
    assert op.status == Operation.Status.FAILED and op.error_code == "mrtr_round_limit_exceeded"
    assert mcp.calls[("endless", True)] == 3  # three retries, the fourth round refused
    events = [e.event async for e in AuditEvent.objects.filter(operation_id=op.id)]
    assert events.count("received") == 3 and "rejected" in events and events[-1] == "failed"


async def test_other_users_cannot_see_or_answer(seeded):
    users, server, mcp = seeded["users"], seeded["servers"]["acme"], seeded["mcp"]
    alice = await signed_client(users["alice"])
    op = await start_call(alice, server, "deploy", {"env": "staging", "replicas": "1"})
    for name in ("carol", "bob"):  # same tenant, other tenant
        other = await signed_client(users[name])
        assert (await other.get(f"/mcp/operations/{op.id}/")).status_code == 404
        assert (await other.get(f"/mcp/operations/{op.id}/panel/")).status_code == 404
        resp = await answer_card(other, op, "accept", DEPLOY_OK, round_no=1)
        assert resp.status_code == 404
    assert (await (await signed_client(users["bob"])).get(f"/mcp/servers/{server.pk}/")).status_code == 404
    assert mcp.calls[("deploy", True)] == 0
    assert (await reload_op(op)).status == Operation.Status.AWAITING_INPUT


async def test_login_and_csrf_required(seeded):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    anon = AsyncClient()
    resp = await anon.get(f"/mcp/servers/{server.pk}/")
    assert resp.status_code == 302 and "/accounts/login/" in resp["Location"]
    strict = AsyncClient(enforce_csrf_checks=True)
    await strict.aforce_login(alice)
    resp = await strict.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": "hi"})
    assert resp.status_code == 403


async def test_audit_rows_hold_digests_only(seeded):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = await signed_client(alice)
    op = await start_call(client, server, "deploy", {"env": "production", "replicas": "2"})
    await answer_card(client, op, "accept", DEPLOY_OK)
    rows = [r async for r in AuditEvent.objects.filter(operation_id=op.id).values()]
    assert [r["event"] for r in rows] == ["received", "shown", "submitted", "completed"]
    submitted = rows[2]
    assert submitted["actions"] == {"confirm_deploy": "accept"} and submitted["retry_id"].startswith("mrtr-")
    assert rows[0]["state_digest"].startswith("sha256:") and rows[0]["schema_digests"]["confirm_deploy"]
    blob = repr(rows)
    for secret in ("CHG-1042", "ops@example.test", "us-east-1", "alice"):
        assert secret not in blob
    assert all(r["user_digest"].startswith("hmac-sha256:") for r in rows)
    with pytest.raises(PermissionError):
        await AuditEvent.objects.filter(operation_id=op.id).aupdate(code="x")
