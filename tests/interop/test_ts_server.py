"""Interop: mrtrweb against an MRTR server written with the official TypeScript SDK
(``@modelcontextprotocol/server@2.4.0``, ``tests/ts_server/``), started on loopback by
:func:`tests.ts_peer.ts_server`.

In-process (the Django app through its ASGI test client, as in ``tests/operations/test_flow.py``): every tool
of the TypeScript server is started, each round answered, and the operation completes with the
result the TypeScript server really produced; the server's own log shows each retry carried the
``requestState`` the server minted for that round and reached it exactly once. The server speaks
2026-07-28 only, seals its states with the SDK's ``createRequestStateCodec`` and refuses tampered
and replayed states: checked here through the product's own connection adapter.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from typing import Any

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.gate import Gate, GateRejection, Policy
from mrtrweb.gate.store import InMemoryBindingStore
from mrtrweb.mcp import McpCallError, McpConnection, origin_of
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.answering import post_answer, post_review
from tests.ts_peer import PROTOCOL_META, PROTOCOL_VERSION, ts_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]

TS_SERVER_NAME = "TypeScript server"


@pytest.fixture
def ts(seeded, ts_server):  # noqa: F811
    """Tenant acme gets a "TypeScript server" pointing at the TypeScript MRTR server."""
    server = McpServer.objects.create(tenant=seeded["servers"]["acme"].tenant, name=TS_SERVER_NAME,
                                      url=ts_server.url)
    ts_server.clear()
    return {"alice": seeded["users"]["alice"], "server": server, "peer": ts_server}


# -- the person's steps (one place each, so a review step can be added here) ------------------------


async def _client(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def _start(client: AsyncClient, server: McpServer, tool: str, args: dict[str, str]) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    await operations.wait_idle()
    return await _load(op_id)


async def _load(op_id: Any) -> Operation:
    return await Operation.objects.select_related("server").aget(pk=op_id)


async def _answer(client: AsyncClient, op: Operation, action: str, fields: dict[str, object] | None = None):
    """Look at the card (as a person does), then post the answer to the open round; returns the
    response and the reloaded operation."""
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200
    data: dict[str, object] = {"action": action, "round": str(op.rounds)}
    data.update(fields or {})
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", data)
    await operations.wait_idle()
    return resp, await _load(op.id)


# -- checks on what the TypeScript server received ------------------------------------------------


def _assert_modern(peer) -> None:
    """The product negotiated 2026-07-28 (``server/discover``, no ``initialize``) and every request
    the server got carried that version in its ``_meta`` envelope and ``MCP-Protocol-Version``."""
    assert peer.rpc_requests("server/discover") and not peer.rpc_requests("initialize")
    http = peer.entries("request")
    assert http
    for entry in http:
        assert entry["protocolHeader"] == PROTOCOL_VERSION, entry
        assert entry["body"]["params"]["_meta"][PROTOCOL_META] == PROTOCOL_VERSION, entry
    assert peer.entries("sdk-error") == []


def _assert_rounds(peer, tool: str, answers: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """``tool`` was called once, then retried once per minted state, each retry echoing exactly
    the state minted for its round (and, where given, carrying exactly ``answers[i]`` as its
    ``inputResponses``); each state was consumed once. Returns the retries."""
    calls = peer.tool_calls(tool)
    minted = peer.minted(tool)
    assert len(minted) == len(answers), [m["payload"] for m in minted]
    first, retries = calls[0], calls[1:]
    assert "requestState" not in first["params"] and "inputResponses" not in first["params"]
    assert len(retries) == len(minted), [r["params"] for r in retries]
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == len(ids)  # each request is new, under its own id
    for retry, state, answer in zip(retries, minted, answers, strict=True):
        params = retry["params"]
        assert params["requestState"] == state["requestState"]
        assert params["arguments"] == first["params"]["arguments"]
        if answer is None:  # a requestState-only round: the state alone is echoed
            assert "inputResponses" not in params, params
        else:
            assert params["inputResponses"] == answer
    consumed = [e["nonce"] for e in peer.entries("consumed") if e["tool"] == tool]
    assert sorted(consumed) == sorted(m["nonce"] for m in minted)  # every state once
    assert peer.entries("refused") == []
    return retries


def _result_text(op: Operation) -> str:
    assert op.status == Operation.Status.COMPLETED, (op.status, op.error_code, op.error_message)
    assert op.result.get("isError") is not True, op.result
    return op.result["content"][0]["text"]


# -- the tools ---------------------------------------------------------------------------------


PROFILE_FIELDS = {
    "in-profile-confirm": "on",
    "in-profile-name": "Ada Lovelace",
    "in-profile-email": "ada@example.test",
    "in-profile-quantity": "4",
    # budget left at its default (99.5) by the person: the default is what is sent
    "in-profile-budget": "99.5",
    "in-profile-color": "blue",
    "in-profile-extras": ["gift-wrap", "insurance"],
}


async def test_form_round_several_field_types(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "form", {"subject": "tea"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert TS_SERVER_NAME in page and "Order tea: who orders, and what?" in page
    # the SDK-converted zod schema renders with its defaults pre-filled
    assert 'name="in-profile-quantity"' in page and 'value="2"' in page
    assert 'value="99.5"' in page and 'type="email"' in page
    assert 'value="green" selected' in page or 'value="green"  selected' in page

    resp, op = await _answer(client, op, "accept", PROFILE_FIELDS)
    assert resp.status_code == 302
    assert _result_text(op) == ("Order of tea for Ada Lovelace <ada@example.test>: confirm=true, quantity=4, "
                                "budget=99.5, color=blue, extras=gift-wrap+insurance.")
    _assert_rounds(peer, "form", [{"profile": {"action": "accept", "content": {
        "confirm": True, "name": "Ada Lovelace", "email": "ada@example.test", "quantity": 4, "budget": 99.5,
        "color": "blue", "extras": ["gift-wrap", "insurance"]}}}])
    _assert_modern(peer)


async def test_form_round_defaults_filled_when_left_empty(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "form", {"subject": "coffee"})
    resp, op = await _answer(client, op, "accept", {"in-profile-name": "Grace Hopper",
                                                   "in-profile-email": "grace@example.test"})
    assert resp.status_code == 302
    assert _result_text(op) == ("Order of coffee for Grace Hopper <grace@example.test>: confirm=false, quantity=2, "
                                "budget=99.5, color=green, extras=express.")
    # the gate filled the defaults of the fields left empty before sending (an unticked box is false)
    _assert_rounds(peer, "form", [{"profile": {"action": "accept", "content": {
        "confirm": False, "name": "Grace Hopper", "email": "grace@example.test", "quantity": 2, "budget": 99.5,
        "color": "green", "extras": ["express"]}}}])


async def test_form_round_invalid_answer_not_sent(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "form", {"subject": "tea"})
    bad = dict(PROFILE_FIELDS, **{"in-profile-name": "A", "in-profile-quantity": "11"})
    resp, op = await _answer(client, op, "accept", bad)
    assert resp.status_code == 400
    assert op.status == Operation.Status.AWAITING_INPUT
    assert peer.retries("form") == []
    resp, op = await _answer(client, op, "accept", PROFILE_FIELDS)
    assert resp.status_code == 302 and "for Ada Lovelace" in _result_text(op)
    assert len(peer.retries("form")) == 1


async def test_form_round_declined(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "form", {"subject": "tea"})
    _resp, op = await _answer(client, op, "decline")
    assert _result_text(op) == "Order declined; nothing was done."
    _assert_rounds(peer, "form", [{"profile": {"action": "decline"}}])


async def test_url_round(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "url", {"provider": "github"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    [state] = peer.minted("url")
    elicitation = state["payload"]["elicitation"]
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert f"https://auth.example.test/ts-connect?provider=github&amp;e={elicitation}" in page
    assert "Sign in to github to connect your account." in page
    _resp, op = await _answer(client, op, "accept")
    assert _result_text(op) == f"Account at github connected (elicitation {elicitation})."
    _assert_rounds(peer, "url", [{"signin": {"action": "accept"}}])
    _assert_modern(peer)


async def test_state_only_round_echoed(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "state_only", {"ticket": "JOB-77"})
    op = await _load(op.id)
    [state] = peer.minted("state_only")
    assert state["keys"] == []
    assert _result_text(op) == f"Job JOB-77 done after a state-only round (state nonce {state['payload']['nonce']})."
    _assert_rounds(peer, "state_only", [None])
    _assert_modern(peer)
    events = [e.event async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("pk")]
    assert events[0] == "received" and events[-1] == "completed", events


async def test_multi_round_each_with_its_own_state(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "multi_round", {"destination": "Oslo"})
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1, (op.error_code, op.error_message)
    # the first input_required came on an SSE stream, after a progress notification
    [streamed] = [e for e in peer.entries("response") if "text/event-stream" in e["contentType"]]
    assert "notifications/progress" in streamed["body"] and '"input_required"' in streamed["body"]
    resp, op = await _answer(client, op, "accept", {"in-dates-start": "2026-12-01", "in-dates-nights": "4"})
    assert resp.status_code == 302
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 2, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "4 night(s) in Oslo from 2026-12-01: choose your seat." in page
    resp, op = await _answer(client, op, "accept", {"in-seat-seat": "window"})  # meal: unticked
    assert resp.status_code == 302
    assert _result_text(op) == "Booked 4 night(s) in Oslo from 2026-12-01, window seat, meal not included."
    first, second = peer.minted("multi_round")
    assert first["requestState"] != second["requestState"]
    assert second["payload"] == {"tool": "multi_round", "nonce": second["payload"]["nonce"], "step": 2,
                                 "destination": "Oslo", "start": "2026-12-01", "nights": 4}
    _assert_rounds(peer, "multi_round", [
        {"dates": {"action": "accept", "content": {"start": "2026-12-01", "nights": 4}}},
        {"seat": {"action": "accept", "content": {"seat": "window", "meal": False}}},
    ])
    _assert_modern(peer)
    events = [e.event async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("pk")]
    assert events.count("received") == 2 and events.count("submitted") == 2 and events[-1] == "completed"


async def test_double_submit_reaches_the_server_once(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "url", {"provider": "gitlab"})
    await client.get(f"/mcp/operations/{op.id}/")
    url = f"/mcp/operations/{op.id}/answer/"
    review, token = await post_review(client, url, {"round": "1"})  # reviewed once, then sent twice
    assert review.status_code == 200 and token and peer.retries("url") == []
    data = {"action": "send", "round": "1", "review_token": token}
    first, second = await asyncio.gather(client.post(url, data), client.post(url, data))
    await operations.wait_idle()
    assert sorted([first.status_code, second.status_code]) == [302, 409]
    assert "Account at gitlab connected" in _result_text(await _load(op.id))
    _assert_rounds(peer, "url", [{"signin": {"action": "accept"}}])


# -- the server's own guards, through the product's connection adapter -------------------------------


async def test_server_refuses_tampered_and_replayed_state(ts_server):  # noqa: F811
    ts_server.clear()
    async with McpConnection(ts_server.url) as conn:
        assert conn.protocol_version == PROTOCOL_VERSION
        args = {"name": "state_only", "arguments": {"ticket": "T-1"}}
        asked = await conn.send("tools/call", args, f"mrtr-{uuid.uuid4()}")
        assert asked["resultType"] == "input_required" and "inputRequests" not in asked
        state = asked["requestState"]
        body, mac = state.rsplit(".", 1)
        tampered = f"{body}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
        with pytest.raises(McpCallError) as refused:
            await conn.send("tools/call", {**args, "requestState": tampered}, f"mrtr-{uuid.uuid4()}")
        assert (refused.value.rpc_code, refused.value.rpc_message) == (-32602, "Invalid or expired requestState")
        done = await conn.send("tools/call", {**args, "requestState": state}, f"mrtr-{uuid.uuid4()}")
        assert done["content"][0]["text"].startswith("Job T-1 done")
        with pytest.raises(McpCallError) as replayed:
            await conn.send("tools/call", {**args, "requestState": state}, f"mrtr-{uuid.uuid4()}")
        assert replayed.value.rpc_code == -32602
        # a state minted for one tool is not accepted by another
        other = await conn.send("tools/call", {"name": "url", "arguments": {"provider": "x"}}, f"mrtr-{uuid.uuid4()}")
        wrong = await conn.send("tools/call", {**args, "requestState": other["requestState"]}, f"mrtr-{uuid.uuid4()}")
        assert wrong.get("isError") is True and wrong["content"][0]["text"] == "requestState belongs to another tool"
    reasons = [e["reason"] for e in ts_server.entries("refused")]
    assert reasons == ["mac", "replay", "state of another tool"], reasons


# -- more of the protocol: cancel, two requests in one round, SSE, prompts/get, resources/read -------


async def test_form_round_cancelled(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "form", {"subject": "tea"})
    _resp, op = await _answer(client, op, "cancel")
    assert _result_text(op) == "Order cancelled; nothing was done."
    _assert_rounds(peer, "form", [{"profile": {"action": "cancel"}}])


async def test_two_requests_in_one_round(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "two_questions", {"topic": "db-down"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Incident db-down: how urgent is it?" in page and "Verify your identity." in page
    assert "P2: next business day" in page and "https://verify.example.test/ts-verify?topic=db-down" in page
    resp, op = await _answer(client, op, "accept", {"in-contact-priority": "p1", "in-contact-note": "disk full"})
    assert resp.status_code == 302
    assert _result_text(op) == 'Incident db-down: contact priority p1, note "disk full"; verify accept.'
    _assert_rounds(peer, "two_questions", [{"contact": {"action": "accept", "content": {"priority": "p1",
                                                                                        "note": "disk full"}},
                                            "verify": {"action": "accept"}}])


async def test_state_only_final_answer_streamed_with_progress(ts):
    """The retry of the state-only round is answered as an SSE stream (progress, then the result)."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "state_only", {"ticket": "JOB-5"})
    op = await _load(op.id)
    assert _result_text(op).startswith("Job JOB-5 done after a state-only round")
    [retry] = _assert_rounds(peer, "state_only", [None])
    assert retry["params"]["_meta"]["progressToken"]
    [streamed] = [e for e in peer.entries("response") if "text/event-stream" in e["contentType"]]
    assert streamed["body"].count("notifications/progress") == 2 and retry["id"] in streamed["body"]


async def test_prompt_round(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    page = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert 'data-prompt="briefing"' in page and 'data-template="ts://reports/{team}"' in page
    resp = await client.post(f"/mcp/servers/{server.pk}/prompts/briefing/", {"arg-topic": "the outage"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    await operations.wait_idle()
    op = await _load(resp["Location"].rstrip("/").split("/")[-1])
    assert op.method == "prompts/get" and op.status == Operation.Status.AWAITING_INPUT, (op.error_code,
                                                                                         op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Who is the briefing on the outage for?" in page
    assert f"Your answer goes to {TS_SERVER_NAME} as the retry of prompts/get briefing." in page
    resp, op = await _answer(client, op, "accept", {"in-audience-audience": "executives"})
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert op.result["messages"] == [{"role": "user", "content": {"type": "text",
                                                                  "text": "Brief executives on the outage."}}]
    retries = [b for b in peer.rpc_requests("prompts/get") if "requestState" in b["params"]]
    [minted] = peer.minted("briefing")
    assert len(retries) == 1 and retries[0]["params"]["requestState"] == minted["requestState"]
    assert retries[0]["params"]["inputResponses"] == {"audience": {"action": "accept",
                                                                   "content": {"audience": "executives"}}}
    _assert_modern(peer)


async def test_resource_template_round(ts):
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    url = f"/mcp/servers/{server.pk}/resources/?template=ts%3A%2F%2Freports%2F%7Bteam%7D"
    resp = await client.post(url, {"arg-team": "core ops"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    await operations.wait_idle()
    op = await _load(resp["Location"].rstrip("/").split("/")[-1])
    assert op.method == "resources/read" and op.name == "ts://reports/core%20ops"
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    bad, op = await _answer(client, op, "accept", {"in-period-since": "2026-02-30"})
    assert bad.status_code == 400
    assert not [b for b in peer.rpc_requests("resources/read") if "requestState" in b["params"]]
    resp, op = await _answer(client, op, "accept", {"in-period-since": "2026-01-05"})
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert op.result["contents"] == [{"uri": "ts://reports/core%20ops", "mimeType": "text/plain",
                                      "text": "Report for team core ops since 2026-01-05: 7 changes."}]
    retries = [b for b in peer.rpc_requests("resources/read") if "requestState" in b["params"]]
    [minted] = peer.minted("team_report")
    assert len(retries) == 1 and retries[0]["params"]["requestState"] == minted["requestState"]
    assert retries[0]["params"]["uri"] == "ts://reports/core%20ops"
    _assert_modern(peer)


async def test_expired_state_refused_by_the_server_fails_the_operation(ts):
    """The person answers after the server's state expired: the server refuses the retry with
    -32602, which reached it exactly once; the operation fails with the server's error."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "short_lived", {"what": "deploy now"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    await asyncio.sleep(2.5)  # the state lives one second
    _resp, op = await _answer(client, op, "accept", {"in-ok-ok": "on"})
    assert op.status == Operation.Status.FAILED and op.error_code == "jsonrpc_error", (op.status, op.error_code)
    [minted] = peer.minted("short_lived")
    [retry] = peer.retries("short_lived")
    assert retry["params"]["requestState"] == minted["requestState"]
    assert peer.response_to(retry["id"])["error"]["code"] == -32602
    assert [e["reason"] for e in peer.entries("refused")] == ["expired"]
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "The MCP server answered with an error." in page
    events = [e.event async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("pk")]
    assert events[-2:] == ["submitted", "failed"], events


# -- the deprecated requests (sampling/createMessage, roots/list) ----------------------------------
#
# The TypeScript SDK refuses to put a sampling/createMessage or roots/list request into an
# input_required result unless the request's io.modelcontextprotocol/clientCapabilities declares
# `sampling` / `roots` (JSON-RPC -32021, HTTP 400). mrtrweb declares them only to a server whose
# tenant admin allowed them. The SDK's roots/list request carries no `params` (optional in the
# 2026-07-28 schema), which the gate's contract refuses (invalid_named_input_request).


ROOTS = [{"uri": "file:///home/alice/projects", "name": "Projects"}, {"uri": "file:///srv/data"}]


async def _start_json(client: AsyncClient, server: McpServer, tool: str, arguments: str) -> Operation:
    """Start a tool whose arguments form is the JSON editor (an empty input schema)."""
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {"arguments": arguments})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    await operations.wait_idle()
    return await _load(resp["Location"].rstrip("/").split("/")[-1])


async def test_roots_not_allowed_server_refuses_for_want_of_the_capability(ts):
    """Not allowed for this server: mrtrweb does not declare `roots`, and the TypeScript server
    refuses to ask (-32021) rather than sending a round the client cannot answer."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start_json(client, server, "roots", "{}")
    assert op.status == Operation.Status.FAILED and op.error_code == "jsonrpc_error", (op.status, op.error_code)
    [call] = peer.tool_calls("roots")
    assert "roots" not in call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    error = peer.response_to(call["id"])["error"]
    assert error["code"] == -32021 and error["data"] == {"requiredCapabilities": {"roots": {}}}
    assert peer.retries("roots") == [] and peer.minted("roots") != []  # the tool asked, the SDK refused


async def test_roots_round_allowed_but_params_less_request_refused_by_contract(ts):
    """Allowed for this server: mrtrweb declares `roots`, and the TypeScript SDK then asks
    ``{"method": "roots/list"}`` without `params` (optional in the 2026-07-28 schema). The gate's
    contract (mrtr-gate.md §1 row 7) demands object `params` on every input request, so the round is
    refused as `invalid_named_input_request`: the operation fails with that code, nothing is sent back."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_roots=True, roots=ROOTS)
    client = await _client(alice)
    op = await _start_json(client, server, "roots", "{}")
    [call] = peer.tool_calls("roots")
    assert "roots" in call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert op.status == Operation.Status.FAILED and op.error_code == "invalid_named_input_request", \
        (op.status, op.error_code, op.error_message)
    assert peer.retries("roots") == []


async def test_sampling_round_allowed(ts):
    """Allowed for this server: mrtrweb declares `sampling` to it, the TypeScript server asks, and
    the person's approved reply is the retry's answer."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=True)
    client = await _client(alice)
    op = await _start(client, server, "sampling", {"text": "the outage"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Summarize: the outage" in page and "Answer in one sentence." in page
    _resp, op = await _answer(client, op, "accept", {"in-summary-approve": "on", "in-summary-reply": "All fixed."})
    assert _result_text(op) == "Summary by human (endTurn): All fixed."
    reply = {"role": "assistant", "content": {"type": "text", "text": "All fixed."}, "model": "human",
             "stopReason": "endTurn"}
    _assert_rounds(peer, "sampling", [{"summary": reply}])


def _raw_call(url: str, tool: str, arguments: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
    """One 2026-07-28 tools/call straight over HTTP (not through mrtrweb), declaring ``capabilities``."""
    body = {"jsonrpc": "2.0", "id": "raw-1", "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            PROTOCOL_META: PROTOCOL_VERSION, "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": capabilities}}}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION, "Mcp-Method": "tools/call", "Mcp-Name": tool})
    with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 (loopback)
        return json.loads(resp.read())["result"]


def test_sdk_roots_request_without_params_refused_by_the_gate(ts_server):  # noqa: F811
    """Declaring `roots`, the TypeScript server asks ``{"method": "roots/list"}`` (no params: optional
    in the 2026-07-28 schema). The gate contract (§1 row 7) demands object params, even where roots
    are allowed: refused as `invalid_named_input_request` (a known interop gap, kept by contract)."""
    result = _raw_call(ts_server.url, "roots", {}, {"roots": {}})
    assert result["resultType"] == "input_required"
    assert result["inputRequests"] == {"roots": {"method": "roots/list"}}
    gate = Gate(InMemoryBindingStore(), Policy(allow_deprecated={"roots/list"}))
    gate.register(request_id="raw-1", server_id="1", origin=origin_of(ts_server.url), user="alice",
                  tenant="acme", method="tools/call", params={"name": "roots", "arguments": {}})
    with pytest.raises(GateRejection) as refused:
        gate.receive(tenant="acme", user="alice", request_id="raw-1", origin=origin_of(ts_server.url),
                     result=result)
    assert refused.value.code == "invalid_named_input_request"


async def test_stop_closes_the_call_in_flight(ts):
    """Stop while a call runs: on 2026-07-28 Streamable HTTP the product closes the request's POST;
    the TypeScript server sees its client go away and the handler's abort signal fire."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/slow/", {"arg-seconds": "20"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    for _ in range(100):  # the call reached the server and it is working
        if peer.tool_calls("slow"):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.6)
    assert (await client.post(f"/mcp/operations/{op_id}/stop/")).status_code == 302
    for _ in range(100):
        op = await _load(op_id)
        if op.status != Operation.Status.RUNNING:
            break
        await asyncio.sleep(0.1)
    await operations.wait_idle()
    assert op.status == Operation.Status.DENIED and "cancelled" in op.error_message, (op.status, op.error_message)
    [call] = peer.tool_calls("slow")
    for _ in range(50):  # the server notices within its 200 ms step
        if peer.entries("aborted"):
            break
        await asyncio.sleep(0.1)
    [closed] = peer.entries("client-closed")
    [aborted] = peer.entries("aborted")
    assert aborted["id"] == call["id"] and aborted["step"] < 100
    assert closed["seq"] in {e["seq"] for e in peer.entries("request") if e["body"].get("id") == call["id"]}


async def test_pattern_checked_with_ecma_semantics_before_sending(ts):
    """The server's zod regexes reach the gate as ECMA-262 ``pattern``s: an answer V8 refuses (a
    no-break space for ``\\S``) is refused on the card and never sent; a valid one completes."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start_json(client, server, "pattern_check", "{}")
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.result, peer.entries()[-3:])
    schema = peer.response_to(peer.tool_calls("pattern_check")[0]["id"])["result"]["inputRequests"]["code"]
    assert schema["params"]["requestedSchema"]["properties"]["code"]["pattern"] == "^\\S{2,20}$"
    for code, label in (("AB\u00a0CD", "ok"), ("AB-CD", "two\rlines")):
        resp, op = await _answer(client, op, "accept", {"in-code-code": code, "in-code-label": label})
        assert resp.status_code == 400, (code, label)
        assert op.status == Operation.Status.AWAITING_INPUT and peer.retries("pattern_check") == []
    resp, op = await _answer(client, op, "accept", {"in-code-code": "AB-CD", "in-code-label": "caf\u00e9 \u00a0ok"})
    assert resp.status_code == 302
    assert _result_text(op) == "Code AB-CD accepted (caf\u00e9 \u00a0ok)."
    _assert_rounds(peer, "pattern_check", [{"code": {"action": "accept", "content": {
        "code": "AB-CD", "label": "caf\u00e9 \u00a0ok"}}}])


async def test_every_field_defaulted(ts):
    """A card whose every field has a default (the case a scripted accept-defaults policy completes);
    the browser test accepts it untouched."""
    alice, server, peer = ts["alice"], ts["server"], ts["peer"]
    client = await _client(alice)
    op = await _start(client, server, "defaults_form", {"item": "pizza"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    # what a browser posts for the card as shown: the pre-filled defaults (the ticked box included)
    shown = {"in-order-accept": "on", "in-order-nickname": "guest", "in-order-email": "guest@example.test",
             "in-order-seats": "1", "in-order-tip": "2.5", "in-order-size": "m",
             "in-order-toppings": ["cheese", "basil"]}
    _resp, op = await _answer(client, op, "accept", shown)
    assert _result_text(op) == ("pizza for guest <guest@example.test>: accept=true, seats=1, tip=2.5, size=m, "
                                "toppings=cheese+basil.")
    _assert_rounds(peer, "defaults_form", [{"order": {"action": "accept", "content": {
        "accept": True, "nickname": "guest", "email": "guest@example.test", "seats": 1, "tip": 2.5, "size": "m",
        "toppings": ["cheese", "basil"]}}}])
