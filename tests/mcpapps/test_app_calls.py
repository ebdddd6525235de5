"""An app's requests, decided on the server (issue 31 item 4, mrtrweb.appcalls), without a browser:
the host's endpoints driven with Django's client against our app server (tests/apps_server.py),
the app rendered first through the product's own two endpoints.

The server decides: no call before the product rendered the app, none for another person's page,
CSRF on every POST, a confirmation taken once (a second Confirm or a Decline sends nothing), at
most three waiting for the person at once, the 50-tool bound, the per-call time limit (the operation stopped, the app told), a download once and
only for its person."""

from __future__ import annotations

import json

import pytest

from mrtrweb import operations
from mrtrweb.models import McpServer, Operation
from tests.mcpapps.app_requests import ask as _ask, client_for as _client, rendered as _rendered

pytestmark = [pytest.mark.django_db(transaction=True)]



async def test_nothing_before_the_product_rendered_the_app(seeded, own, sandbox):
    host, client = await _rendered(seeded, own, render=False)
    status, body = await _ask(client, host, {"method": "tools/call", "name": "lookup", "arguments": {}})
    assert (status, body["error"]) == (403, "not_rendered")
    assert own.log.tool_calls("lookup") == []


async def test_only_the_pages_person_and_only_with_csrf(seeded, own, sandbox):
    host, client = await _rendered(seeded, own)
    carol = await _client(seeded["users"]["carol"])  # same tenant, not her page
    answer = await carol.post(f"/mcp/operations/{host.id}/app/requests/", json.dumps({"method": "tools/call",
                              "name": "lookup"}), content_type="application/json")
    assert answer.status_code == 404
    strict = await _client(seeded["users"]["alice"], csrf=True)
    answer = await strict.post(f"/mcp/operations/{host.id}/app/requests/", json.dumps({"method": "tools/call",
                               "name": "lookup"}), content_type="application/json")
    assert answer.status_code == 403
    assert own.log.tool_calls("lookup") == []
    for bad in ([1], {"method": "tools/call", "name": "lookup", "arguments": [1]}, {"method": "tools/list"},
                {"method": "resources/read", "uri": 5}):
        status, body = await _ask(client, host, bad)
        assert (status, body["error"]) == (400, "bad_request"), bad
    answer = await client.post(f"/mcp/operations/{host.id}/app/requests/", b"{not json",
                               content_type="application/json")
    assert answer.status_code == 400 and answer.json()["error"] == "bad_request"
    # nested past the JSON decoder's depth (RecursionError, not ValueError): refused, never a 500
    deep = b'{"method": "tools/call", "name": "lookup", "arguments": {"q": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    answer = await client.post(f"/mcp/operations/{host.id}/app/requests/", deep, content_type="application/json")
    assert answer.status_code == 400 and answer.json()["error"] == "bad_request"


async def test_arguments_are_checked_against_the_tools_input_schema(seeded, own, sandbox, caplog, settings):
    """The person's own check (JsonArgumentsForm): wrong types, a property the schema closes out,
    a value past maxLength, arguments past 256 KB; refused with -32602 before anything is held or
    sent, the reason logged without the arguments."""
    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_CALLS_PER_SECOND": 50}  # each refused one counts too
    host, client = await _rendered(seeded, own)
    secretish = "arg-value-8812"
    caplog.set_level("INFO", logger="mrtrweb.appcalls")
    for name, arguments, where in (("lookup", {"q": 5}, "q: type"), ("lookup", {"q": "x", "extra": secretish},
                                   "(root): additionalProperties"), ("lookup", {"q": "y" * 201}, "q: maxLength"),
                                  ("transfer", {"amount": "five"}, "amount: type"),
                                  ("transfer", {"amount": 1.5}, "amount: type")):
        status, body = await _ask(client, host, {"method": "tools/call", "name": name, "arguments": arguments})
        assert (status, body["error"], body["rpc"]) == (400, "bad_arguments", -32602), (arguments, body)
        assert body["message"].startswith("The app's arguments do not fit the tool's input schema; nothing was sent.")
        assert f"at {where}" in body["message"], body["message"]
    status, body = await _ask(client, host, {"method": "tools/call", "name": "lookup",
                                             "arguments": {"q": "z" * (256 * 1024)}})
    assert (status, body["error"], body["rpc"]) == (413, "bad_arguments", -32602)
    assert own.log.tool_calls("lookup") == [] and own.log.tool_calls("transfer") == []
    assert not await Operation.objects.exclude(pk=host.pk).filter(name__in=["lookup", "transfer"]).aexists()
    refusals = [r.getMessage() for r in caplog.records if "inputSchema" in r.getMessage()]
    assert len(refusals) == 5 and "schema_mismatch" in refusals[0]
    assert not any(secretish in r.getMessage() for r in caplog.records)
    # the arguments that fit go through
    status, body = await _ask(client, host, {"method": "tools/call", "name": "lookup", "arguments": {"q": "fits"}})
    assert status == 200 and body["status"] == "started"
    status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {"amount": 3}})
    assert status == 200 and body["status"] == "confirm"
    await operations.wait_idle()
    assert [c.params["arguments"] for c in own.log.tool_calls("lookup")] == [{"q": "fits"}]


async def test_a_confirmation_is_taken_once_and_a_decline_sends_nothing(seeded, own, sandbox):
    host, client = await _rendered(seeded, own)
    status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {"amount": 1}})
    assert status == 200 and body["status"] == "confirm" and "Confirm the call" in body["card"]
    decide = body["card"].split('action="')[1].split('"')[0]
    carol = await _client(seeded["users"]["carol"])
    assert (await carol.post(decide, {"decision": "confirm"})).status_code == 404  # not her page
    first = await client.post(decide, {"decision": "confirm"})
    assert first.status_code == 200 and first.json()["status"] == "started"
    again = await client.post(decide, {"decision": "confirm"})
    assert again.status_code == 410 and again.json()["error"] == "expired"
    await operations.wait_idle()
    assert len(own.log.tool_calls("transfer")) == 1
    # declined: nothing sent
    status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {"amount": 2}})
    decide = body["card"].split('action="')[1].split('"')[0]
    declined = await client.post(decide, {"decision": "decline"})
    assert declined.status_code == 409 and declined.json()["error"] == "declined"
    assert (await client.post(decide, {"decision": "confirm"})).status_code == 410
    assert len(own.log.tool_calls("transfer")) == 1


async def test_an_app_cannot_pile_up_confirmation_cards(seeded, own, sandbox, settings):
    """At most MAX_WAITING_CONFIRMATIONS calls of one app wait for the person; the next is refused
    (429 too_many_waiting, nothing held or sent) until the person decides one."""
    from mrtrweb.appcalls.calls import MAX_WAITING_CONFIRMATIONS
    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_CALLS_PER_SECOND": 50}
    host, client = await _rendered(seeded, own)
    cards = []
    for amount in range(MAX_WAITING_CONFIRMATIONS):
        status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {"amount": amount}})
        assert status == 200 and body["status"] == "confirm", body
        cards.append(body["card"].split('action="')[1].split('"')[0])
    status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {"amount": 99}})
    assert (status, body["error"], body["rpc"]) == (429, "too_many_waiting", -32001), body
    assert "decide those first" in body["message"]
    # a read-only call never waits, so it is not held back
    status, body = await _ask(client, host, {"method": "tools/call", "name": "lookup", "arguments": {"q": "ro"}})
    assert status == 200 and body["status"] == "started"
    # deciding one frees its place
    assert (await client.post(cards[0], {"decision": "decline"})).status_code == 409
    status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {"amount": 7}})
    assert status == 200 and body["status"] == "confirm"
    await operations.wait_idle()
    assert own.log.tool_calls("transfer") == []


async def test_the_number_of_tools_an_app_may_call(seeded, own, sandbox, settings):
    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_MAX_TOOLS": 3}  # open_panel, lookup, transfer
    host, client = await _rendered(seeded, own)
    status, body = await _ask(client, host, {"method": "tools/call", "name": "filler_00"})
    assert (status, body["error"]) == (403, "too_many_tools")
    status, body = await _ask(client, host, {"method": "tools/call", "name": "lookup"})
    assert status == 200 and body["status"] == "started"
    await operations.wait_idle()
    assert own.log.tool_calls("filler_00") == [] and len(own.log.tool_calls("lookup")) == 1


async def test_a_call_over_its_time_limit_is_stopped_and_the_app_told(seeded, own, sandbox, settings):
    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_CALL_TIMEOUT_S": 1}
    host, client = await _rendered(seeded, own)
    status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {}})
    decide = body["card"].split('action="')[1].split('"')[0]
    started = (await client.post(decide, {"decision": "confirm"})).json()["operation"]
    import asyncio

    for _ in range(100):  # its round waits for the person, who does not answer
        op = await Operation.objects.aget(pk=started)
        if op.status != "running":
            break
        await asyncio.sleep(0.05)
    assert op.status == "awaiting_input"
    for _ in range(100):  # the worker's timer stops it
        op = await Operation.objects.aget(pk=started)
        if op.status not in Operation.LIVE:
            break
        await asyncio.sleep(0.05)
    assert op.status == "denied" and op.initiator == "app"
    seen = (await client.get(f"/mcp/operations/{host.id}/app/calls/{started}/")).json()
    assert seen["status"] == "denied" and "time limit of an app's call" in seen["message"]
    assert [r.is_retry for r in own.log.tool_calls("transfer")] == [False]  # nothing sent for its round
    # a confirmation past the time limit starts nothing
    status, body = await _ask(client, host, {"method": "tools/call", "name": "transfer", "arguments": {}})
    decide = body["card"].split('action="')[1].split('"')[0]
    await asyncio.sleep(1.2)
    late = await client.post(decide, {"decision": "confirm"})
    assert late.status_code == 410 and late.json()["error"] == "expired"
    assert len(own.log.tool_calls("transfer")) == 1


async def test_an_app_operation_is_read_only_through_its_own_host(seeded, own, sandbox):
    host, client = await _rendered(seeded, own)
    mine = await operations.start_operation(user=seeded["users"]["alice"], server=host.server, method="tools/call",
                                            name="open_panel", params={"name": "open_panel", "arguments": {}})
    await operations.wait_idle()
    # the person's own call is no app's: its result is not handed to the app
    assert (await client.get(f"/mcp/operations/{host.id}/app/calls/{mine.id}/")).status_code == 404


async def test_a_download_once_and_only_for_its_person(seeded, own, sandbox, settings):
    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_MAX_DOWNLOAD_BYTES": 10}
    host, client = await _rendered(seeded, own)
    body = {"method": "ui/download-file", "contents": [{"type": "resource", "resource": {
        "uri": "file:///../../etc/pass wd", "mimeType": "text/html", "text": "<b>hi</b>"}}]}
    status, offered = await _ask(client, host, body)
    assert status == 200 and "Nothing is saved until you click" in offered["card"]
    url = offered["card"].split('class="app-download" href="')[1].split('"')[0]
    carol = await _client(seeded["users"]["carol"])
    assert (await carol.get(url)).status_code == 404
    got = await client.get(url)
    assert got.status_code == 200 and got.content == b"<b>hi</b>"
    assert got["Content-Type"] == "application/octet-stream" and got["X-Content-Type-Options"] == "nosniff"
    assert got["Content-Disposition"] == 'attachment; filename="pass_wd"'
    assert (await client.get(url)).status_code == 404
    too_big = {"method": "ui/download-file", "contents": [{"type": "resource", "resource": {
        "uri": "x", "blob": "QUJDREVGR0hJSktM"}}]}  # 12 bytes
    status, refused = await _ask(client, host, too_big)
    assert (status, refused["error"]) == (400, "bad_download")


async def test_apps_turned_off_or_put_under_approval_after_rendering_call_nothing(seeded, own, sandbox):
    host, client = await _rendered(seeded, own)
    server = host.server
    for change in ({"apps_require_approval": True}, {"apps_require_approval": False, "apps_enabled": False}):
        await McpServer.objects.filter(pk=server.pk).aupdate(**change)
        status, body = await _ask(client, host, {"method": "tools/call", "name": "lookup"})
        assert (status, body["error"]) == (403, "apps_off"), change
    assert own.log.tool_calls("lookup") == []
