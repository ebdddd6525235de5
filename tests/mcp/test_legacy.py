"""Legacy servers (2025-11-25): elicitation sent by the server *during* an open ``tools/call``
goes through the same card, gate checks and audit as an MRTR round, while the call is held open.

Everything runs against the real legacy demo server (:mod:`mrtrweb.demo.legacy`, the SDK's
``MCPServer`` restricted to 2025-11-25) on loopback, through the Django app in-process. The
server's :class:`~mrtrweb.demo.server.CallLog` records every request it got and every response the
client sent to its own requests, so each test can check what exactly reached the server.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import time

import pytest
from asgiref.sync import sync_to_async
from mcp.server.mcpserver import Context, MCPServer
from django.template.loader import render_to_string
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.mcp import McpCallError, McpConnection
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.answering import post_answer, post_review
from tests.caches import clear_cache
from tests.legacy_rounds import DEPLOY_OK, held_start, legacy_until, responses_until

pytestmark = [pytest.mark.django_db(transaction=True)]

async def _client(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def _reload(op: Operation) -> Operation:
    return await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)


async def _post_answer(client: AsyncClient, op: Operation, action: str, fields: dict[str, object] | None = None):
    """THE one place that answers a card (look at it first, as a person does: that writes the
    consent receipt; then post the answer)."""
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200
    data: dict[str, object] = {"action": action, "round": str(op.rounds)}
    data.update(fields or {})
    return await post_answer(client, f"/mcp/operations/{op.id}/answer/", data)


async def _events(op: Operation) -> list[AuditEvent]:
    return [e async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]


def _result_text(op: Operation) -> str:
    return op.result["content"][0]["text"]


async def _finish_idle() -> None:
    await operations.wait_idle(timeout=15)


async def test_form_elicitation_through_the_card(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1
    assert mcp.log.responses() == []  # the server's request is held, unanswered

    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Deploy to prod? (legacy server, call held open)" in page
    assert 'name="in-elicitation-ticket"' in page
    ctx = await sync_to_async(operations_panel_context)(op)
    hold = ctx["legacy_hold"]
    assert hold["method"] == "elicitation/create" and hold["round"] == 1
    left = hold["deadline"].timestamp() - time.time()
    assert 0 < left <= operations.legacy_hold_s()
    notice = await sync_to_async(render_to_string)("mrtrweb/_legacy_notice.html", ctx)
    # the notice shows the round's one deadline (the card's and the Waiting list's), which the hold's
    # own deadline matches to within the moment between the two being taken (a second's boundary may
    # fall between them)
    shown = ctx["op"].round_expires_at or hold["deadline"]
    assert abs(shown.timestamp() - hold["deadline"].timestamp()) < 1.0
    assert "holding its call open" in notice and shown.astimezone(dt.timezone.utc).strftime("%H:%M:%S") in notice
    assert 'class="legacy-notice"' in page and "holding its call open" in page  # the notice is on the page
    assert "on its open tools/call legacy_deploy call" in page and "as the retry of" not in page

    resp = await _post_answer(client, op, "accept", DEPLOY_OK)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.COMPLETED, op.error_message
    assert _result_text(op) == "Deployed 2 replica(s) to prod (ticket CHG-1042)."
    # exactly one ElicitResult reached the server, with the validated content; exactly one tools/call
    [response] = mcp.log.responses()
    assert response.error is None
    assert response.result == {"action": "accept", "content": {"confirm": True, "ticket": "CHG-1042", "replicas": 2}}
    assert [r.method for r in mcp.log.records() if r.method == "tools/call"] == ["tools/call"]

    await _finish_idle()
    events = await _events(op)
    assert [e.event for e in events] == ["received", "shown", "submitted", "completed"]
    received, shown, submitted, completed = events
    assert received.code == submitted.code == operations.LEGACY
    assert received.request_id == op.request_id  # the round answered the call's own id
    assert received.schema_digests["elicitation"].startswith("sha256:")
    assert shown.display_digest.startswith("sha256:")
    assert submitted.actions == {"elicitation": "accept"}
    assert submitted.retry_id.startswith("mrtr-legacy-") and submitted.retry_id == op.latest_request_id
    for event in events:  # digests only: no answer value in any audit row
        row = json.dumps({f.attname: str(getattr(event, f.attname)) for f in AuditEvent._meta.fields})
        assert "CHG-1042" not in row
    await _finish_idle()


def operations_panel_context(op):
    from mrtrweb.consent.panels import panel_context

    return panel_context(op)


async def test_schema_invalid_answer_is_refused_and_the_round_stays_open(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "staging"})
    bad = dict(DEPLOY_OK, **{"in-elicitation-ticket": "ab", "in-elicitation-replicas": "11"})
    resp = await _post_answer(client, op, "accept", bad)
    assert resp.status_code == 400
    await asyncio.sleep(0.5)  # the holder polls every 0.25 s: nothing may reach the server
    assert mcp.log.responses() == []
    op = await _reload(op)
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="submitted").aexists()
    resp = await _post_answer(client, op, "accept", DEPLOY_OK)
    assert resp.status_code == 302
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Deployed 2 replica(s) to staging (ticket CHG-1042)."
    assert len(mcp.log.responses()) == 1
    await _finish_idle()


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel_reach_the_server_as_such(legacy, action):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    resp = await _post_answer(client, op, action)
    assert resp.status_code == 302
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    [response] = mcp.log.responses()
    assert response.result == {"action": action}
    assert _result_text(op) == f"Deployment: {action}; nothing was deployed."
    await _finish_idle()
    events = [e.event for e in await _events(op)]
    assert events == ["received", "shown", "submitted", "cancelled" if action == "cancel" else "completed"]
    await _finish_idle()


async def test_timeout_tells_the_server_cancel_and_reads_expired(legacy, settings):
    settings.MRTRWEB = {"LEGACY_HOLD_S": 1.5}
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    held = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()  # shown, never answered
    # one deadline: the hold's, on the card's notice, in the Waiting list, and in the outcome
    waiting_op = await _reload(op)
    deadline = waiting_op.round_expires_at.astimezone(dt.timezone.utc)
    iso = deadline.isoformat(timespec="seconds").replace("+00:00", "Z")
    notice = re.search(r'Answer before <time class="when" datetime="([^"]+)"', held)
    assert notice and notice.group(1) == iso, (notice and notice.group(1), iso)
    waiting = (await client.get("/mcp/waiting/")).content.decode()
    assert f'datetime="{iso}"' in waiting
    assert deadline - waiting_op.created_at < dt.timedelta(seconds=30)  # the hold's 1.5 s, not the round's TTL
    [response] = await responses_until(mcp, 1)
    assert response.result == {"action": "cancel"}
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.DENIED  # stored as before (audit, metrics); read as expired
    assert "held its call open for your answer until" in op.error_message and "told cancel" in op.error_message
    assert deadline.strftime("%H:%M:%S UTC") in op.error_message
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "held its call open for your answer until" in page
    assert '<strong class="status-label">Expired</strong>' in page and "This round expired" in page
    assert "Denied" not in page
    denied = await AuditEvent.objects.aget(operation_id=op.id, event="denied")
    assert denied.reason == "timeout" and denied.round_number == 1
    late = await _post_answer(client, op, "accept", DEPLOY_OK)
    assert late.status_code == 409
    await _finish_idle()
    assert len(mcp.log.responses()) == 1  # the late answer sent nothing
    assert (await _reload(op)).status == Operation.Status.DENIED  # the tool's result came after: ignored


async def test_stop_while_held_tells_the_server_cancel(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    resp = await client.post(f"/mcp/operations/{op.id}/stop/")
    assert resp.status_code == 302
    [response] = await responses_until(mcp, 1)
    assert response.result == {"action": "cancel"}
    op = await _reload(op)
    assert op.status == Operation.Status.DENIED
    denied = await AuditEvent.objects.aget(operation_id=op.id, event="denied")
    assert denied.reason == "cancelled"
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="submitted").aexists()
    await _finish_idle()
    assert len(mcp.log.responses()) == 1


async def test_second_answer_is_409_and_the_server_saw_one_result(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    first = await _post_answer(client, op, "accept", DEPLOY_OK)
    second = await _post_answer(client, op, "decline")
    assert first.status_code == 302 and second.status_code == 409
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    await _finish_idle()
    [response] = mcp.log.responses()
    assert response.result["action"] == "accept"
    assert _result_text(op).startswith("Deployed 2 replica(s)")


async def test_concurrent_answers_deliver_exactly_once(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    await client.get(f"/mcp/operations/{op.id}/")
    url = f"/mcp/operations/{op.id}/answer/"
    review, token = await post_review(client, url, dict(DEPLOY_OK, round="1"))  # reviewed once, sent 4 times
    assert review.status_code == 200 and token and mcp.log.responses() == []
    data = dict(DEPLOY_OK, action="send", round="1", review_token=token)
    statuses = sorted(r.status_code for r in await asyncio.gather(*(client.post(url, data) for _ in range(4))))
    assert statuses == [302, 409, 409, 409]
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    await _finish_idle()
    assert len(mcp.log.responses()) == 1
    assert await AuditEvent.objects.filter(operation_id=op.id, event="submitted").acount() == 1


async def test_answer_from_another_user_is_404_and_nothing_is_sent(legacy):
    alice, bob = legacy["users"]["alice"], legacy["users"]["bob"]
    server, mcp = legacy["servers"]["acme"], legacy["mcp"]
    op = await held_start(await _client(alice), server, "legacy_deploy", {"env": "prod"})
    intruder = await _client(bob)
    resp = await intruder.post(f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    assert resp.status_code == 404
    await asyncio.sleep(0.5)
    assert mcp.log.responses() == []
    op = await _reload(op)
    assert op.status == Operation.Status.AWAITING_INPUT
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="submitted").aexists()
    await operations.stop_operation(op)
    await responses_until(mcp, 1)
    await _finish_idle()


async def test_two_elicitations_in_one_call_are_two_rounds(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_trip", {"destination": "Lisbon"})
    assert op.rounds == 1
    assert (await _post_answer(client, op, "accept", {"in-elicitation-nights": "3"})).status_code == 302
    op = await legacy_until(op, lambda o: o.rounds == 2 and o.status == Operation.Status.AWAITING_INPUT)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "3 night(s) in Lisbon: choose your seat." in page
    resp = await _post_answer(client, op, "accept", {"in-elicitation-seat": "aisle", "in-elicitation-confirm": "on"})
    assert resp.status_code == 302
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Booked 3 night(s) in Lisbon, aisle seat."
    assert [r.result for r in mcp.log.responses()] == [
        {"action": "accept", "content": {"nights": 3}},
        {"action": "accept", "content": {"seat": "aisle", "confirm": True}},
    ]
    assert len(mcp.log.tool_calls()) == 1
    await _finish_idle()
    events = await _events(op)
    assert [(e.event, e.round_number) for e in events] == [
        ("received", 1), ("shown", 1), ("submitted", 1), ("received", 2), ("shown", 2), ("submitted", 2),
        ("completed", 2)]
    # round 2 was judged against round 1's retry id: the gate's binding moved on
    assert events[3].request_id == events[2].retry_id
    await _finish_idle()


async def test_url_elicitation(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_connect", {"provider": "github"})
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "https://auth.example.test/connect?provider=github" in page
    assert (await _post_answer(client, op, "accept")).status_code == 302
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Connecting github: the person opened the sign-in page."
    [response] = mcp.log.responses()
    assert response.result == {"action": "accept"}
    await _finish_idle()


async def test_sampling_is_refused_by_default_and_audited(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_summarize", {"text": "a long text"})
    assert op.status == Operation.Status.FAILED
    assert op.error_code == "unapproved_deprecated_client_request"
    [response] = await responses_until(mcp, 1)
    assert response.result is None and "unapproved_deprecated_client_request" in response.error["message"]
    rejected = await AuditEvent.objects.aget(operation_id=op.id, event="rejected")
    assert rejected.code == "unapproved_deprecated_client_request" and rejected.round_number == 1
    await _finish_idle()
    assert (await _reload(op)).status == Operation.Status.FAILED  # the tool's later result is ignored


async def test_sampling_allowed_for_the_server_goes_through_the_card(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    server.allow_sampling = True
    await server.asave()
    client = await _client(alice)
    op = await held_start(client, server, "legacy_summarize", {"text": "numbers went up"})
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_message
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Summarize: numbers went up" in page and 'name="in-sampling-approve"' in page
    resp = await _post_answer(client, op, "accept", {"in-sampling-approve": "on",
                                                     "in-sampling-reply": "They rose."})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Summary: They rose."
    [response] = mcp.log.responses()
    assert response.result["role"] == "assistant" and response.result["content"]["text"] == "They rose."
    await _finish_idle()
    events = await _events(op)
    assert [e.event for e in events] == ["received", "shown", "submitted", "completed"]
    assert events[2].actions == {"sampling": "result"}
    assert all("They rose" not in json.dumps(e.actions) + e.reason for e in events)


async def test_declined_sampling_is_an_error_to_the_server_and_denies(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    server.allow_sampling = True
    await server.asave()
    client = await _client(alice)
    op = await held_start(client, server, "legacy_summarize", {"text": "numbers went up"})
    resp = await _post_answer(client, op, "decline")
    assert resp.status_code == 302
    [response] = await responses_until(mcp, 1)
    assert response.result is None and "did not approve" in response.error["message"]
    op = await _reload(op)
    assert op.status == Operation.Status.DENIED and op.error_code == "denied"
    await _finish_idle()
    assert (await AuditEvent.objects.aget(operation_id=op.id, event="denied")).reason == "deprecated_request_refused"


async def test_roots_allowed_for_the_server_go_through_the_card(legacy):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    server.allow_roots = True
    server.roots = [{"uri": "file:///srv/projects", "name": "projects"}]
    await server.asave()
    client = await _client(alice)
    op = await held_start(client, server, "legacy_roots", {})
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_message
    resp = await _post_answer(client, op, "accept")
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Roots: file:///srv/projects"
    [response] = mcp.log.responses()
    assert response.result == {"roots": [{"uri": "file:///srv/projects", "name": "projects"}]}
    await _finish_idle()


async def test_a_request_during_two_calls_goes_to_the_call_whose_stream_it_came_on(legacy_mcp):
    """One connection, two calls in flight, each asked during its call on its own response stream:
    each request reaches the handler of its own call (never the other's), and each call ends with
    its own answer. The two handlers hold their answers until both were asked, so the two requests
    are open at the same time."""
    legacy_mcp.log.clear()
    asked: dict[str, list[str]] = {"a": [], "b": []}
    both_asked = asyncio.Event()

    def handler(env: str, ticket: str):
        async def answer(method, params):
            asked[env].append(params["message"])
            if all(asked.values()):
                both_asked.set()
            await asyncio.wait_for(both_asked.wait(), 10)
            return {"action": "accept", "content": {"confirm": True, "ticket": ticket}}
        return answer

    async with McpConnection(legacy_mcp.url, timeout_s=10) as conn:
        assert conn.protocol_version == "2025-11-25"
        results = await asyncio.gather(
            conn.send("tools/call", {"name": "legacy_deploy", "arguments": {"env": "a"}}, "two-1",
                      on_server_request=handler("a", "CHG-A")),
            conn.send("tools/call", {"name": "legacy_deploy", "arguments": {"env": "b"}}, "two-2",
                      on_server_request=handler("b", "CHG-B")))
    assert asked == {"a": ["Deploy to a? (legacy server, call held open)"],
                     "b": ["Deploy to b? (legacy server, call held open)"]}
    assert [r["content"][0]["text"] for r in results] == ["Deployed 1 replica(s) to a (ticket CHG-A).",
                                                          "Deployed 1 replica(s) to b (ticket CHG-B)."]
    assert sorted(r.result["content"]["ticket"] for r in legacy_mcp.log.responses()) == ["CHG-A", "CHG-B"]


async def test_the_held_call_outlives_the_call_timeout(legacy_mcp):
    """While a request of the server is being answered, the call's own timeout is paused."""
    legacy_mcp.log.clear()

    async def slow(method, params):
        await asyncio.sleep(1.5)
        return {"action": "accept", "content": {"confirm": True, "ticket": "CHG-7"}}

    async with McpConnection(legacy_mcp.url, timeout_s=1.0) as conn:
        raw = await conn.send("tools/call", {"name": "legacy_deploy", "arguments": {"env": "x"}}, "slow-1",
                              on_server_request=slow)
    assert raw["content"][0]["text"] == "Deployed 1 replica(s) to x (ticket CHG-7)."


async def test_answer_from_another_worker_reaches_the_held_call(legacy):
    """The answer may be posted to another ASGI worker than the one holding the call: here it is
    built on another thread with its own event loop, sharing only the database and the binding
    cache (as two workers share PostgreSQL and Redis); the holder picks it up from the cache."""
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "eu"})
    await client.get(f"/mcp/operations/{op.id}/")  # the consent receipt

    def other_worker():
        async def answer():
            mine = await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)
            return await operations.answer_round(mine, {"elicitation": {
                "action": "accept", "content": {"confirm": True, "ticket": "CHG-9", "replicas": 3}}})
        return asyncio.run(answer())

    retry = await asyncio.to_thread(other_worker)
    assert retry.actions == {"elicitation": "accept"}
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Deployed 3 replica(s) to eu (ticket CHG-9)."
    assert len(mcp.log.responses()) == 1
    await _finish_idle()


async def test_answer_while_the_holding_worker_is_gone(legacy, trusted_worker):
    """The worker holding the server's call died (no lease): an answer cannot reach the
    server any more, so it is refused (nothing consumed, nothing sent) and the operation is
    interrupted; the reaper does the same without an answer."""
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "eu"})
    await Operation.objects.filter(pk=op.pk).aupdate(worker="gone-host:1:deadbeef")
    resp = await _post_answer(client, op, "accept", DEPLOY_OK)
    assert resp.status_code == 409  # interrupted: the round can no longer be answered
    assert "worker handling this call stopped" in resp.content.decode()
    op = await _reload(op)
    assert op.status == Operation.Status.INTERRUPTED and op.error_code == "worker_lost"
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="submitted").aexists()
    # the call really was held here, on a live worker: it sees the operation ended and says cancel
    [response] = await responses_until(mcp, 1)
    assert response.result == {"action": "cancel"}
    await _finish_idle()


async def test_the_reaper_interrupts_a_call_held_by_a_dead_worker(legacy, trusted_worker):
    from django.utils import timezone

    from mrtrweb.operations import reap_interrupted

    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    held = await held_start(client, server, "legacy_deploy", {"env": "eu"})
    await Operation.objects.filter(pk=held.pk).aupdate(worker="gone-host:1:deadbeef",
                                                       updated_at=timezone.now() - timezone.timedelta(minutes=5))
    assert await reap_interrupted(held.pk) == 1
    held = await _reload(held)
    assert held.status == Operation.Status.INTERRUPTED
    await responses_until(mcp, 1)
    await _finish_idle()


async def test_the_reaper_leaves_mrtr_rounds_alone(seeded, trusted_worker):
    """An MRTR round waits in the binding store, not on a worker: its worker's death changes nothing."""
    from django.utils import timezone

    from mrtrweb.operations import reap_interrupted

    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = await _client(alice)
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "1"})
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    op = await legacy_until(op, lambda o: o.status != Operation.Status.RUNNING)
    assert op.status == Operation.Status.AWAITING_INPUT
    await Operation.objects.filter(pk=op.pk).aupdate(worker="gone-host:1:deadbeef",
                                                     updated_at=timezone.now() - timezone.timedelta(minutes=5))
    assert await reap_interrupted(op.pk) == 0
    assert (await _reload(op)).status == Operation.Status.AWAITING_INPUT
    await _finish_idle()


def test_legacy_hold_setting_checks(settings):
    from django.core.checks import run_checks

    def ids():
        return {m.id for m in run_checks()}

    assert not {"mrtrweb.E006", "mrtrweb.W013"} & ids()
    settings.MRTRWEB = {"LEGACY_HOLD_S": 295}  # beyond the held call's SSE read timeout (300 s) less 10 s
    assert "mrtrweb.E006" in ids()
    settings.MRTRWEB = {"LEGACY_HOLD_S": 295, "CALL_TIMEOUT_S": 600}  # the read timeout follows CALL_TIMEOUT_S
    assert "mrtrweb.E006" not in ids()
    settings.MRTRWEB = {"LEGACY_HOLD_S": 200, "TTL_S": 100}
    assert "mrtrweb.W013" in ids()
    settings.MRTRWEB = {"LEGACY_HOLD_S": 0}
    assert "mrtrweb.E001" in ids()


async def test_a_request_during_a_call_without_handler_is_refused(legacy_mcp):
    """A call sent without ``on_server_request`` (e.g. by code that cannot hold a round) takes no
    server request: the server gets an error, the call is not held."""
    legacy_mcp.log.clear()
    async with McpConnection(legacy_mcp.url, timeout_s=10) as conn:
        with pytest.raises(McpCallError) as failure:
            await conn.send("tools/call", {"name": "legacy_deploy", "arguments": {"env": "a"}}, "bare-1")
    assert "does not take server requests" in failure.value.rpc_message
    [response] = legacy_mcp.log.responses()
    assert response.error["code"] == -32600


async def test_two_operations_on_one_legacy_server_each_get_their_own_call(legacy):
    """Two operations of one person on one legacy server at once: each call runs on its own
    connection, so each server request is matched to its operation (never refused as ambiguous)."""
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    first = await held_start(client, server, "legacy_deploy", {"env": "one"})
    second = await held_start(client, server, "legacy_deploy", {"env": "two"})
    assert first.status == second.status == Operation.Status.AWAITING_INPUT
    assert mcp.log.responses() == []
    assert (await _post_answer(client, second, "accept", DEPLOY_OK)).status_code == 302
    second = await legacy_until(second, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(second) == "Deployed 2 replica(s) to two (ticket CHG-1042)."
    assert (await _reload(first)).status == Operation.Status.AWAITING_INPUT  # still held
    assert (await _post_answer(client, first, "decline")).status_code == 302
    first = await legacy_until(first, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(first) == "Deployment: decline; nothing was deployed."
    assert sorted(r.result["action"] for r in mcp.log.responses()) == ["accept", "decline"]
    await _finish_idle()
    assert len(operations.pool()) == 1  # the per-operation connections were closed after their call
    assert len(operations.pool()._locks) == 1  # and forgotten


@pytest.fixture(scope="module")
def hostile_legacy():
    """A 2025-11-25 server whose elicitations the gate must refuse: an http:// URL, a nested schema."""
    from mrtrweb.demo.legacy import LegacyOnly
    from mrtrweb.demo.server import MCP_PATH, serve_asgi_in_thread

    mcp = MCPServer(name="hostile-legacy", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def plain_http_link(ctx: Context) -> str:
        result = await ctx.elicit_url("Open this", "http://auth.example.test/connect", "e-1")
        return f"link: {result.action}"

    @mcp.tool(structured_output=False)
    async def nested_form(ctx: Context) -> str:
        result = await ctx.request_context.session.elicit_form(
            "Where?", {"type": "object", "properties": {"address": {"type": "object", "properties": {
                "city": {"type": "string"}}}}}, related_request_id=ctx.request_id)
        return f"form: {result.action}"

    handle = serve_asgi_in_thread(LegacyOnly(mcp.streamable_http_app(streamable_http_path=MCP_PATH)))
    yield handle
    handle.stop()


@pytest.mark.parametrize("tool, code", [("plain_http_link", "unsafe_url_elicitation"),
                                        ("nested_form", "invalid_form_requestedSchema")])
async def test_the_gate_refuses_what_it_refuses_for_mrtr(seeded, hostile_legacy, tool, code):
    """The gate's checks apply to a server's request during the call as to an MRTR round: refused,
    audited as rejected, never on a card; the server gets an error naming the refusal."""
    alice, acme = seeded["users"]["alice"], seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Hostile legacy", url=hostile_legacy.url)
    hostile_legacy.log.clear()
    client = await _client(alice)
    op = await held_start(client, server, tool, {})
    assert op.status == Operation.Status.FAILED and op.error_code == code
    [response] = await responses_until(hostile_legacy, 1)
    assert response.result is None and code in response.error["message"]
    events = await _events(op)
    assert [(e.event, e.code) for e in events][:1] == [("rejected", code)]
    assert not [e for e in events if e.event in ("received", "shown", "submitted")]
    await _finish_idle()


async def test_sampling_and_roots_are_declared_only_where_allowed(legacy):
    """The client declares sampling/roots to a server only where a tenant admin allowed them
    (elicitation always); a request for an undeclared one is still refused and audited (above)."""
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)

    async def declared() -> set[str]:
        op = await held_start(client, server, "echo", {"text": "hi"})
        assert op.status == Operation.Status.COMPLETED
        await _finish_idle()
        return set(mcp.log.records("initialize")[-1].params["capabilities"])

    assert await declared() == {"elicitation"}
    server.allow_sampling = True
    await server.asave()
    assert await declared() == {"elicitation", "sampling"}
    server.allow_roots = True
    await server.asave()
    assert await declared() == {"elicitation", "sampling", "roots"}


# ------------------------------------------------ issue 14: the hand-over survives an emptied cache
async def test_the_cache_emptied_before_the_holder_takes_the_answer_loses_nothing(legacy, monkeypatch):
    """The answer is handed over in the database (a sealed LegacyAnswer row; the settle key is a
    claim in the database store): the cache emptied -- Redis restarted without persistence --
    between the answer and the holder taking it, the server still gets the answer, once."""
    from mrtrweb.models import BindingClaim, LegacyAnswer

    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    take, holder_may_take, polls = operations.legacy._take_answer, asyncio.Event(), []

    def held_back(op_, round_number):  # the holder polls as always, but takes nothing until told
        polls.append(round_number)
        return take(op_, round_number) if holder_may_take.is_set() else None

    monkeypatch.setattr(operations.legacy, "_take_answer", held_back)
    resp = await _post_answer(client, op, "accept", DEPLOY_OK)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert await LegacyAnswer.objects.filter(operation_id=op.id, round_number=1).aexists()
    assert await BindingClaim.objects.aexists()  # the settle key, in the database
    clear_cache()  # everything the cache held is gone
    started = len(polls)
    deadline = time.monotonic() + 10
    while len(polls) < started + 2:  # the holder keeps polling: the answer waits for it
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert mcp.log.responses() == []
    holder_may_take.set()
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.COMPLETED, op.error_message
    assert _result_text(op) == "Deployed 2 replica(s) to prod (ticket CHG-1042)."
    [response] = mcp.log.responses()  # once
    assert response.result == {"action": "accept", "content": {"confirm": True, "ticket": "CHG-1042", "replicas": 2}}
    assert not await LegacyAnswer.objects.aexists()  # taken by a delete
    assert await AuditEvent.objects.filter(operation_id=op.id, event="submitted").acount() == 1
    await _finish_idle()


async def test_a_handed_over_answer_is_sealed_for_its_round(legacy, monkeypatch, caplog):
    """A LegacyAnswer row holds no answer value; its payload copied to another round, or
    altered, is ignored (logged, no traceback); the holder then takes its own, once."""
    import logging

    from mrtrweb.runtime import handover
    from mrtrweb.models import LegacyAnswer

    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    take = operations.legacy._take_answer
    monkeypatch.setattr(operations.legacy, "_take_answer", lambda op_, n: None)  # the holder takes nothing yet
    assert (await _post_answer(client, op, "accept", DEPLOY_OK)).status_code == 302
    row = await LegacyAnswer.objects.aget(operation_id=op.id)
    assert "CHG-1042" not in row.payload and "accept" not in row.payload and "replicas" not in row.payload
    await LegacyAnswer.objects.acreate(operation_id=op.id, round_number=2, payload=row.payload,
                                       expires_at=row.expires_at)
    await LegacyAnswer.objects.acreate(operation_id=op.id, round_number=3, payload=row.payload[:-6] + "AAAAAA",
                                       expires_at=row.expires_at)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="mrtrweb.operations"):
        assert await sync_to_async(handover.take_answer)(op, 2) is None
        assert await sync_to_async(handover.take_answer)(op, 3) is None
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"legacy answer of operation {op.id} was sealed for another round; ignored",
        f"legacy answer of operation {op.id} cannot be opened (keys changed or altered); ignored"]
    assert all(r.exc_info is None for r in caplog.records)
    assert mcp.log.responses() == []
    monkeypatch.setattr(operations.legacy, "_take_answer", take)
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Deployed 2 replica(s) to prod (ticket CHG-1042)."
    assert len(mcp.log.responses()) == 1
    assert not await LegacyAnswer.objects.aexists()
    await _finish_idle()


async def test_a_legacy_round_on_the_cache_store(legacy, settings):
    """With BINDING_STORE = "cache" the settle key is the cache key it always was; the answer is
    handed over in the database all the same."""
    from django.core.cache import caches

    from mrtrweb.models import BindingClaim

    settings.MRTRWEB = {"BINDING_STORE": "cache"}
    operations.reset_gate()
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await _client(alice)
    op = await held_start(client, server, "legacy_deploy", {"env": "eu"})
    resp = await _post_answer(client, op, "accept", DEPLOY_OK)
    assert resp.status_code == 302
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert _result_text(op) == "Deployed 2 replica(s) to eu (ticket CHG-1042)."
    assert len(mcp.log.responses()) == 1
    assert not await BindingClaim.objects.aexists()
    assert await sync_to_async(caches["default"].get)(f"mrtrweb:legacy:{op.id}:1:settle") == "answer"
    second = await _post_answer(client, op, "decline")
    assert second.status_code == 409
    await _finish_idle()
    operations.reset_gate()
