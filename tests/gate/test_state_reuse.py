"""requestState replay is judged per operation (issue 12, item 8).

An honest server may mint the same opaque ``requestState`` for every caller (tests/honest.py):
two users -- or the same user twice -- each complete their operation, and the reuse is recorded
(code ``request_state_reused`` on the ``received`` row) and shown to the tenant's admins by
``mrtr_reconcile`` and the tenant history. A state that *this* operation already sent back in an
earlier round (tests/hostile.py ``same_state``: the same state again on the retry) is a replay:
the operation is denied ``request_state_replayed`` and nothing more is sent. Browser path
(views), headless path and state-only rounds alike, against real servers on loopback."""

from __future__ import annotations

import io
import json

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.test import AsyncClient

from mrtrweb.headless import client as headless
from mrtrweb import operations
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.models import AuditEvent, McpServer, Operation

from .. import honest, hostile
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def honest_mcp():
    handle = honest.serve()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def hostile_mcp():
    handle = hostile.serve()
    yield handle
    handle.stop()


@pytest.fixture
def servers(seeded, honest_mcp, hostile_mcp):
    acme = seeded["servers"]["acme"].tenant
    honest_mcp.log.clear()
    hostile_mcp.log.clear()
    return {"honest": McpServer.objects.create(tenant=acme, name="Honest", url=honest_mcp.url),
            "hostile": McpServer.objects.create(tenant=acme, name="Hostile", url=hostile_mcp.url)}


async def _client(user) -> AsyncClient:
    c = AsyncClient()
    await c.aforce_login(user)
    return c


async def _browser_confirm_step(user, server) -> Operation:
    """Start ``confirm_step`` in the browser, see its card, accept it (review + Send)."""
    client = await _client(user)
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/confirm_step/", {"arguments": "{}"})
    assert resp.status_code == 302, resp.content[:300]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    await operations.wait_idle()
    assert (await client.get(f"/mcp/operations/{op_id}/")).status_code == 200
    op = await Operation.objects.aget(pk=op_id)
    assert op.status == "awaiting_input", (op.status, op.error_code, op.error_message)
    resp = await post_answer(client, f"/mcp/operations/{op_id}/answer/",
                             {"action": "accept", "round": "1", "in-q-ok": "on"})
    assert resp.status_code == 302, resp.content[:500]
    await operations.wait_idle()
    return await Operation.objects.aget(pk=op_id)


def _text(op: Operation) -> str:
    return " ".join(c.get("text", "") for c in (op.result or {}).get("content", []))


async def _received(op_id) -> list[tuple[int, str, str]]:
    return [(e.round_number, e.code, e.state_digest) async for e in
            AuditEvent.objects.filter(operation_id=op_id, event="received").order_by("sequence")]


def _reconcile() -> dict:
    out = io.StringIO()
    call_command("mrtr_reconcile", "--json", "--dry-run", stdout=out)
    return json.loads(out.getvalue())


async def test_two_users_with_the_same_deterministic_state_both_complete(seeded, servers, honest_mcp):
    alice, carol = seeded["users"]["alice"], seeded["users"]["carol"]
    first = await _browser_confirm_step(alice, servers["honest"])
    second = await _browser_confirm_step(carol, servers["honest"])
    for op in (first, second):
        assert (op.status, op.error_code) == ("completed", ""), op.error_message
        assert _text(op) == "confirmed: accept ok=True"
    # each retry echoed the (same) state once: two originals, two retries
    calls = honest_mcp.log.tool_calls("confirm_step")
    assert [c.params.get("requestState") for c in calls if c.is_retry] == ["step-1", "step-1"]
    assert len(calls) == 4
    # the first operation's round is plain; the second's records the reuse (a digest, not the state)
    ((n1, code1, digest1),) = await _received(first.id)
    ((n2, code2, digest2),) = await _received(second.id)
    assert (code1, code2) == ("", operations.STATE_REUSED)
    assert digest1 == digest2 and digest1.startswith("sha256:") and "step-1" not in digest1
    assert not await AuditEvent.objects.filter(event="denied").aexists()


async def test_the_same_user_twice_headless_and_a_state_only_round(seeded, servers, honest_mcp):
    alice, carol = seeded["users"]["alice"], seeded["users"]["carol"]
    server = servers["honest"]
    policy = ConsentPolicy.parse("accept-defaults")
    outcomes = [await headless.arun(url=server.url, user=user, tenant=server.tenant, method="tools/call",
                                    params={"name": tool, "arguments": {}}, consent=policy)
                for tool, user in (("confirm_step", alice), ("confirm_step", alice),
                                   ("busy_then_done", alice), ("busy_then_done", carol))]
    assert [(o.status, o.error_code) for o in outcomes] == [("completed", "")] * 4
    assert [o.result["content"][0]["text"] for o in outcomes] == ["confirmed: accept ok=True"] * 2 + ["done"] * 2
    codes = [[code for _, code, _ in await _received(o.operation_id)] for o in outcomes]
    assert codes == [[""], [operations.STATE_REUSED], [""], [operations.STATE_REUSED]]


async def test_an_operation_that_gets_back_its_own_earlier_state_is_denied(seeded, servers, hostile_mcp):
    """hostile ``same_state`` answers the retry with the state the retry just sent back."""
    server = servers["hostile"]
    outcome = await headless.arun(url=server.url, user=seeded["users"]["alice"], tenant=server.tenant,
                                  method="tools/call", params={"name": "same_state", "arguments": {}},
                                  consent=ConsentPolicy.parse("accept-defaults"))
    assert (outcome.status, outcome.rounds) == ("denied", 2)
    events = [(e.event, e.round_number, e.reason) async for e in
              AuditEvent.objects.filter(operation_id=outcome.operation_id).order_by("sequence")]
    assert events == [("received", 1, ""), ("shown", 1, "headless: scripted consent policy accept-defaults"),
                      ("submitted", 1, ""), ("received", 2, ""), ("denied", 2, "request_state_replayed")]
    # the original and the one retry of round 1; nothing was sent for the replayed round
    assert len(hostile_mcp.log.tool_calls("same_state")) == 2
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert "already sent back" in op.error_message


@pytest.mark.parametrize("tool, denied_at", [("ping_pong", 3), ("busy_forever", 2)])
async def test_a_state_from_any_earlier_round_of_the_operation_is_a_replay(seeded, servers, honest_mcp, tool,
                                                                          denied_at):
    """States A, B, then A again (form rounds); the same state on a state-only round."""
    server = servers["honest"]
    outcome = await headless.arun(url=server.url, user=seeded["users"]["alice"], tenant=server.tenant,
                                  method="tools/call", params={"name": tool, "arguments": {}},
                                  consent=ConsentPolicy.parse("accept-defaults"))
    assert (outcome.status, outcome.rounds) == ("denied", denied_at)
    last = await AuditEvent.objects.filter(operation_id=outcome.operation_id).order_by("-sequence").afirst()
    assert (last.event, last.round_number, last.reason) == ("denied", denied_at, "request_state_replayed")
    # the original and one retry per earlier round; nothing for the replayed one
    assert len(honest_mcp.log.tool_calls(tool)) == denied_at


async def test_reconcile_and_history_show_reuse_and_replay(seeded, servers, hostile_mcp):
    alice, carol = seeded["users"]["alice"], seeded["users"]["carol"]
    first = await _browser_confirm_step(alice, servers["honest"])
    second = await _browser_confirm_step(carol, servers["honest"])
    replay = await headless.arun(url=servers["hostile"].url, user=alice, tenant=servers["hostile"].tenant,
                                 method="tools/call", params={"name": "same_state", "arguments": {}},
                                 consent=ConsentPolicy.parse("accept-defaults"))
    assert replay.status == "denied"

    report = await sync_to_async(_reconcile)()
    (reused,) = report["reused_states"]
    assert [o["operation"] for o in reused["operations"]] == sorted([str(first.id), str(second.id)])
    assert [o["rounds"] for o in reused["operations"]] == [[1], [1]] and reused["users"] == 2
    assert reused["state_digest"] == (await _received(first.id))[0][2]
    replayed_digest = (await _received(replay.operation_id))[0][2]
    assert report["replayed_states"] == [{"tenant": servers["hostile"].tenant_id, "operation": replay.operation_id,
                                          "state_digest": replayed_digest, "rounds": [1, 2]}]
    assert report["unsettled"] == 0  # reuse is not an anomaly that needs settling
    text = io.StringIO()
    await sync_to_async(call_command)("mrtr_reconcile", "--dry-run", stdout=text)
    assert "    1  requestState digests received by more than one operation (allowed, recorded)" in text.getvalue()
    assert "    1  requestState digests an operation received again after sending them back (denied)" \
        in text.getvalue()

    # the tenant admin's history: the notice, the filter on the code, the row with its reason
    admin = await _client(alice)
    page = (await admin.get("/mcp/tenants/acme/history/")).content.decode()
    assert "1 round received a requestState that another operation of this tenant had also received" in page
    assert "?code=request_state_reused" in page
    page = (await admin.get("/mcp/tenants/acme/history/", {"code": operations.STATE_REUSED})).content.decode()
    assert page.count('data-event="received"') == 1 and str(second.id) in page
    assert operations.STATE_REUSED_REASON in page
    timeline = (await admin.get(f"/mcp/history/operations/{second.id}/")).content.decode()
    assert operations.STATE_REUSED in timeline
    # carol (not an admin) does not read about other people's operations in her own pages
    member = await _client(carol)
    for url in ("/mcp/history/", f"/mcp/history/operations/{second.id}/"):
        resp = await member.get(url)
        assert resp.status_code == 200 and str(second.id) in resp.content.decode()
        assert operations.STATE_REUSED not in resp.content.decode()

