"""URL-required errors (MCP 2025-11-25, ``URLElicitationRequiredError``, JSON-RPC error -32042):
the URL elicitations in ``error.data`` become a URL-mode round of the operation (the same gate
checks, card, consent receipt, review and audit as any URL round); once the person says they are
done (accept) the original request is sent again, once, under a new JSON-RPC id with the same
params; decline or cancel ends the operation and nothing is sent again.

Against a real server: an SDK ``MCPServer`` restricted to 2025-11-25 (:class:`LegacyOnly`) whose
tools raise the SDK's own ``UrlElicitationRequiredError`` (or, for the malformed cases, an
``MCPError`` -32042 with bad ``data``), served over Streamable HTTP on loopback behind the
:class:`WireRecorder` that records every request it got.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.test import AsyncClient
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

from mrtrweb.headless import client as headless
from mrtrweb import operations
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.answering import post_answer, post_review, until
from tests.url_required_mcp import LINK_URL, MALFORMED, url_required_server

pytestmark = [pytest.mark.django_db(transaction=True)]

@pytest.fixture(scope="module")
def url_mcp():
    handle = url_required_server()
    yield handle
    handle.stop()


@pytest.fixture
def url_server(seeded, url_mcp):
    url_mcp.log.clear()
    url_mcp.asked.clear()
    acme = seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant_id=acme.tenant_id, name="URL-required server", url=url_mcp.url)
    return {"alice": seeded["users"]["alice"], "server": server, "mcp": url_mcp, "tenant": acme.tenant}


async def _client(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def _until(op: Operation, what, timeout: float = 15.0) -> Operation:
    return await until(op, what, timeout)


async def _start(client: AsyncClient, server: McpServer, tool: str, args: dict[str, str]) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    return await _until(op, lambda o: o.status != Operation.Status.RUNNING)


async def _answer(client: AsyncClient, op: Operation, action: str):
    page = await client.get(f"/mcp/operations/{op.id}/")  # the card is displayed: the consent receipt
    assert page.status_code == 200
    return await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": action, "round": str(op.rounds)})


async def _events(op: Operation) -> list[AuditEvent]:
    return [e async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]


async def test_done_sends_the_original_request_again_once(url_server):
    alice, server, mcp = url_server["alice"], url_server["server"], url_server["mcp"]
    client = await _client(alice)
    op = await _start(client, server, "link_account", {"provider": "github"})
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1, op.error_message
    [first] = mcp.log.tool_calls("link_account")

    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert f'<code dir="ltr">{LINK_URL}github</code>' in page.replace("&amp;", "&")
    assert "Link your github account first." in page
    assert "When you are done, tools/call link_account is sent to URL-required server again, unchanged" in page
    assert "Decline or Cancel ends the operation: nothing is sent to the server." in page
    assert 'rel="noopener noreferrer"' in page

    resp, token = await post_review(client, f"/mcp/operations/{op.id}/answer/", {"round": "1"})
    review = resp.content.decode()
    assert token and "You confirm that you are done at auth.example.test." in review
    assert "receives “accept”" not in review  # the server gets no answer: the request comes again
    assert "Send sends tools/call link_account to URL-required server again, unchanged" in review
    assert len(mcp.log.tool_calls()) == 1  # the review sent nothing

    assert (await _answer(client, op, "accept")).status_code == 302
    op = await _until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.COMPLETED, op.error_message
    assert op.result["content"][0]["text"] == "Linked github (asked 2 times)."
    first_again, second = mcp.log.tool_calls("link_account")
    assert first_again == first
    assert second.request_id != first.request_id
    def sent(r):  # the SDK's _meta.progressToken is the request's own id
        return {k: v for k, v in r.params.items() if k != "_meta"}

    assert sent(second) == sent(first) == {"name": "link_account", "arguments": {"provider": "github"}}
    assert second.params["_meta"] == {"progressToken": second.request_id}
    assert not second.is_retry  # neither inputResponses nor requestState: the request, again
    assert mcp.log.responses() == []  # and no answer to any server request

    await operations.wait_idle()
    events = await _events(op)
    assert [(e.event, e.code, e.round_number) for e in events] == [
        ("received", "url_elicitation_required", 1), ("shown", "", 1), ("submitted", "url_elicitation_required", 1),
        ("completed", "", 1)]
    received, _, submitted, _ = events
    assert received.request_id == op.request_id == first.request_id
    assert submitted.actions == {"url-1": "accept"} and submitted.retry_id == second.request_id
    # a second Send of the same round sends nothing
    again = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert again.status_code in (404, 409) or "no longer open" in again.content.decode()
    assert len(mcp.log.tool_calls()) == 2


@pytest.mark.parametrize("action, reason", [("decline", "url_declined"), ("cancel", "url_cancelled")])
async def test_decline_or_cancel_ends_it_and_nothing_is_sent_again(url_server, action, reason):
    alice, server, mcp = url_server["alice"], url_server["server"], url_server["mcp"]
    client = await _client(alice)
    op = await _start(client, server, "link_account", {"provider": "gitlab"})
    assert op.status == Operation.Status.AWAITING_INPUT
    assert (await _answer(client, op, action)).status_code == 302
    op = await _until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.DENIED and op.error_code == "denied"
    assert op.error_message == operations.DENY_MESSAGES[reason]
    await asyncio.sleep(0.5)
    assert len(mcp.log.tool_calls()) == 1 and mcp.log.responses() == []
    events = await _events(op)
    assert [(e.event, e.code, e.reason) for e in events][2:] == [
        ("submitted", "url_elicitation_required", ""), ("denied", "denied", reason)]
    assert events[2].actions == {"url-1": action}
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert operations.DENY_MESSAGES[reason] in page


async def test_two_pages_on_one_card_both_done_before_the_request_goes_again(url_server):
    alice, server, mcp = url_server["alice"], url_server["server"], url_server["mcp"]
    client = await _client(alice)
    op = await _start(client, server, "two_pages", {})
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "https://auth.example.test/sign-in" in page and "https://pay.example.test/checkout" in page
    assert page.count('class="open-url"') == 2
    assert (await _answer(client, op, "accept")).status_code == 302
    op = await _until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.COMPLETED and op.result["content"][0]["text"] == "Both done."
    assert len(mcp.log.tool_calls("two_pages")) == 2
    submitted = [e for e in await _events(op) if e.event == "submitted"]
    assert [e.actions for e in submitted] == [{"url-1": "accept", "url-2": "accept"}]


async def test_the_gate_refuses_an_unsafe_url_as_for_any_url_round(url_server):
    alice, server, mcp = url_server["alice"], url_server["server"], url_server["mcp"]
    client = await _client(alice)
    op = await _start(client, server, "plain_http_page", {})
    assert op.status == Operation.Status.FAILED and op.error_code == "unsafe_url_elicitation"
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "http://auth.example.test/link" not in page  # never shown, never a link
    events = await _events(op)
    assert [(e.event, e.code) for e in events] == [("rejected", "unsafe_url_elicitation"),
                                                   ("failed", "unsafe_url_elicitation")]
    assert len(mcp.log.tool_calls()) == 1


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_malformed_error_data_fails_clearly(url_server, kind, caplog):
    alice, server, mcp = url_server["alice"], url_server["server"], url_server["mcp"]
    client = await _client(alice)
    with caplog.at_level(logging.INFO, logger="mrtrweb.operations"):
        op = await _start(client, server, "malformed", {"kind": kind})
    reason = MALFORMED[kind][1]
    assert op.status == Operation.Status.FAILED and op.error_code == "invalid_url_required_error"
    assert op.error_message == f"{operations.message_for('invalid_url_required_error')} Reason: {reason}."
    assert f"URL-required error refused: {reason}" in caplog.text
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200
    assert "its list of pages is malformed; nothing was opened" in page.content.decode()
    [failed] = await _events(op)
    assert (failed.event, failed.code, failed.reason) == ("failed", "invalid_url_required_error", reason)
    assert len(mcp.log.tool_calls()) == 1


@pytest.mark.parametrize("url_done, status, calls", [(True, "completed", 2), (False, "denied", 1)])
async def test_headless_url_done_or_declined(url_server, url_done, status, calls):
    from mrtrweb.management.commands.mrtr_client import exit_code

    mcp = url_server["mcp"]
    outcome = await headless.arun(url=mcp.url, user=url_server["alice"], tenant=url_server["tenant"],
                                  method="tools/call", params={"name": "link_account", "arguments": {"provider": "x"}},
                                  consent=headless.ConsentPolicy.parse("accept-defaults", url_done=url_done),
                                  timeout_s=30)
    assert outcome.status == status and outcome.rounds == 1
    assert len(mcp.log.tool_calls()) == calls
    if url_done:
        assert outcome.result["content"][0]["text"] == "Linked x (asked 2 times)."
        assert exit_code(outcome) == 0
    else:
        op = await Operation.objects.aget(pk=outcome.operation_id)
        assert op.error_message == operations.DENY_MESSAGES["url_declined"]
        assert exit_code(outcome) == 4
    await headless.close_connections()
