"""Regressions found by the second attack pass on the running demo (issue 12's kinds):

* kind 11 (unbounded): the number of input requests in one round is not bounded (only the fields
  of one form are, ``MAX_PROPERTIES``): a round of 2,000 requests of 5 choice fields each made a
  card page of 5.4 MB that took 13 s to render (measured on the demo); 20,000 requests never
  rendered (over 5 minutes, the demo's process at 2 GB); and receiving such a round stalls every
  user's pages (kind 1): 20,000 requests of one field, 1.1 s; of 5 choice fields, 2.0 s (another
  user's sign-in page, measured on the demo; in-process, the test below: 2.1 s for 5 choice
  fields, one field stays under the bound);
* a card the product shows cannot be answered: a round of more than 1,000 fields in all (here
  1,200 requests of one field) is shown, but its Accept is a bare ``400 Bad Request`` (Django's
  ``DATA_UPLOAD_MAX_NUMBER_FIELDS``): the person can only decline. Both are now refused by the gate
  (``MAX_INPUT_REQUESTS``, ``MAX_ROUND_FIELDS``), and a response body is at most 8 MiB
  (``MAX_RESPONSE_BYTES``), so the SDK's parse of it on the event loop is bounded.
(A third finding, ``accept-defaults`` accepting a form with no fields at all, is a judgment call
left to the next session: its test is not here.)

The hostile server here is a raw JSON-RPC endpoint (Streamable HTTP, JSON responses), as
``tests/views/test_attack_pass.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import AsyncClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mrtrweb import conf, operations
from mrtrweb.headless import client as headless
from mrtrweb.text import names
from mrtrweb.bench import hostile
from mrtrweb.gate import Gate
from mrtrweb.mcp import MAX_RESPONSE_BYTES, sending
from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.models import McpServer, Operation

from ..offloop import spy

pytestmark = [pytest.mark.django_db(transaction=True)]

SHOWN = conf.DEFAULTS["MAX_SHOWN_CHARS"]
MB = 1024 * 1024

DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
            "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}


_many = hostile.many_requests_round


#: tool name -> its first round (each tool's retry completes)
ROUNDS = {
    "many_requests": json.dumps(_many(1000, 5, True)),
    "many_fields_in_all": json.dumps(_many(1200, 1, False)),
    "very_many_requests": json.dumps(_many(20000, 5, True)),  # about 16 MB: over MAX_RESPONSE_BYTES
    "very_many_one_field": json.dumps(_many(20000, 1, False)),  # about 4 MB: read, then judged by the gate
    "confirm_drop": json.dumps({"resultType": "input_required", "requestState": "c", "inputRequests": {
        "confirm": {"method": "elicitation/create", "params": {
            "message": "Drop the production database? Accept to drop it.",
            "requestedSchema": {"type": "object", "properties": {}}}}}}),
}
#: the inputResponses of every retry the server received
RETRIES: list[Any] = []
DONE = {"content": [{"type": "text", "text": "done"}], "isError": False}


async def endpoint(request: Request) -> Response:
    try:
        message = await request.json()
    except ValueError:
        return PlainTextResponse("bad json", status_code=400)
    if "id" not in message:
        return Response(status_code=202)
    rid, method = message["id"], message.get("method")
    params = message.get("params") or {}
    if method == "server/discover":
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": DISCOVER})
    if method == "tools/list":
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {
            "tools": [{"name": n, "description": "d", "inputSchema": {"type": "object", "properties": {}}} for n in ROUNDS],
            "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}})
    if method == "tools/call" and params.get("name") in ROUNDS:
        if params.get("inputResponses"):
            RETRIES.append(params["inputResponses"])
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": DONE})
        return Response('{"jsonrpc":"2.0","id":%s,"result":%s}' % (json.dumps(rid), ROUNDS[params["name"]]),
                        media_type="application/json")
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})


@pytest.fixture(scope="module")
def many_mcp():
    handle = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]))
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, many_mcp):
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Many requests", url=many_mcp.url)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server


async def _start(client: AsyncClient, server: McpServer, tool: str) -> Operation:
    resp = await client.post(names.call_url("tool", server.pk, tool), {})
    assert resp.status_code == 302, resp.content.decode()[:300]
    await operations.wait_idle()
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def test_a_round_of_many_input_requests_is_refused_or_its_card_bounded(setup):
    client, server = setup
    op = await _start(client, server, "many_requests")
    if op.status != Operation.Status.AWAITING_INPUT:  # refused by the gate with its own code: fine
        assert op.error_code, (op.status, op.error_code)
        return
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200
    # today: 1,000 requests of 5 fields make a 2.7 MB page (2,000: 5.4 MB and 13 s on the demo;
    # 20,000: never rendered); a card is bounded as a result is (MAX_SHOWN_CHARS, with generous
    # room for the card's own markup)
    assert len(page.content) < MB, len(page.content)


async def test_a_card_the_product_shows_can_be_accepted(setup):
    client, server = setup
    op = await _start(client, server, "many_fields_in_all")
    if op.status != Operation.Status.AWAITING_INPUT:  # refused by the gate with its own code: fine
        assert op.error_code, (op.status, op.error_code)
        return
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200 and 'name="in-k1199-f0"' in page.content.decode()
    answer = {"round": str(op.rounds), "action": "accept", **{f"in-k{i}-f0": "x" for i in range(1200)}}
    resp = await client.post(f"/mcp/operations/{op.id}/answer/", answer)
    # today: 400 Bad Request (TooManyFieldsSent): the card is shown but can only be declined
    assert resp.status_code != 400, resp.content.decode()[:300]
    assert resp.status_code in (200, 302), resp.status_code


@pytest.mark.parametrize("tool, code, judged", [
    ("very_many_requests", "transport_error", False),  # cut at MAX_RESPONSE_BYTES while read, never parsed
    ("very_many_one_field", "invalid_named_input_request", True),  # parsed, refused by MAX_INPUT_REQUESTS
])
async def test_a_round_of_very_many_input_requests_does_not_stall_the_event_loop(setup, monkeypatch, tool, code,
                                                                                 judged):
    """A round of 20,000 input requests is never checked on the event loop: the gate judges a
    round (``Gate.receive``) off the loop, and a round too large to read (16 MB) is cut at
    ``MAX_RESPONSE_BYTES`` before anything parses it. Structural, not timed (issue 25): how long
    the loop waits is the benchmark's (``loopstall``)."""
    client, server = setup
    receive = spy(monkeypatch, Gate, "receive")
    said = spy(monkeypatch, sending, "classify")
    resp = await client.post(names.call_url("tool", server.pk, tool), {})
    await operations.wait_idle()
    assert resp.status_code == 302
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert (op.status, op.error_code) == (Operation.Status.FAILED, code), (op.status, op.error_code)
    # the finding: a gap of 2.1 s while the round (20,000 requests of 5 choice fields, about 16 MB) was read and
    # checked on the event loop: every user waited
    if judged:
        receive.assert_ran_off_the_loop()
        assert len(receive.calls[0][1]["result"]["inputRequests"]) == 20000
    else:  # the body was refused by its size while read: never decoded, never judged
        assert receive.on_loop == []
        assert [e.message for e in said.outcomes] == [f"tools/call: the response is larger than {MAX_RESPONSE_BYTES} bytes"]
