"""Sampling and roots, the explicit exception (AID-H-028.008), in-process against the real demo MCP
server: denied by default with a visible explanation; per-server allowance by a tenant admin;
roots shown then sent exactly; sampling shown escaped, approved explicitly, answered by the
sampling provider and validated by the gate; refusing ends the operation without a retry."""

from __future__ import annotations

import pytest
from django.test import AsyncClient
from django.utils.html import escape

from mrtrweb import operations
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.answering import answer_card, post_answer, reload_op, signed_client, start_call

pytestmark = [pytest.mark.django_db(transaction=True)]

ROOTS = [{"uri": "file:///home/alice/projects", "name": "Projects <main>"}, {"uri": "file:///srv/data"}]


async def _allow(server, **fields) -> None:
    await McpServer.objects.filter(pk=server.pk).aupdate(**fields)


def _retries(mcp, tool: str):
    return [r for r in mcp.log.tool_calls(tool) if r.is_retry]


def bad_provider(request_params, *, user, operation, form_data):
    """A sampling provider whose result is not a CreateMessageResult (no model, text missing)."""
    return {"role": "assistant", "content": {"type": "text"}}


class EchoProvider:
    """A provider (class form) that answers with the last user message, without any card field."""

    def provide(self, request_params, *, user, operation, form_data):
        text = request_params["messages"][-1]["content"]["text"]
        return {"role": "assistant", "content": {"type": "text", "text": f"echo: {text}"}, "model": "echo-1"}


# --------------------------------------------------------------------------------- denied by default


@pytest.mark.parametrize("tool,args", [("summarize_with_sampling", {"text": "hello"}), ("list_my_roots", {})])
async def test_denied_by_default_with_a_visible_explanation(seeded, tool, args):
    users, server, mcp = seeded["users"], seeded["servers"]["acme"], seeded["mcp"]
    carol = await signed_client(users["carol"])  # a member, not an admin
    op = await start_call(carol, server, tool, args)
    assert op.status == Operation.Status.FAILED and op.error_code == "unapproved_deprecated_client_request"
    page = (await carol.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "sampling/createMessage" in page and "roots/list" in page
    assert "deprecated capabilities" in page and "not allowed for this server" in page
    assert "For this server: sampling not allowed, roots not allowed." in page
    assert "A tenant admin can allow sampling or roots for this server, per server" in page
    assert f"/mcp/servers/{server.pk}/settings/" not in page  # carol is no admin: no link
    assert _retries(mcp, tool) == [] and len(mcp.log.tool_calls(tool)) == 1
    rejected = [e async for e in AuditEvent.objects.filter(operation_id=op.id, event="rejected")]
    assert [e.code for e in rejected] == ["unapproved_deprecated_client_request"]
    alice = await signed_client(users["alice"])  # the tenant admin gets a link to the settings
    op = await start_call(alice, server, tool, args)
    page = (await alice.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert f'href="/mcp/servers/{server.pk}/settings/"' in page


async def test_allowing_one_does_not_allow_the_other(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_roots=True, roots=ROOTS)
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "x"})
    assert op.status == Operation.Status.FAILED and op.error_code == "unapproved_deprecated_client_request"
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "For this server: sampling not allowed, roots allowed." in page
    assert _retries(mcp, "summarize_with_sampling") == []


# --------------------------------------------------------------------------------- roots


async def test_allowed_roots_are_shown_then_sent_exactly(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_roots=True, roots=ROOTS)
    client = await signed_client(alice)
    op = await start_call(client, server, "list_my_roots", {})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert 'data-kind="roots"' in page and "roots/list" in page
    assert "file:///home/alice/projects" in page and "file:///srv/data" in page
    assert "Projects &lt;main&gt;" in page and "Projects <main>" not in page
    assert "Decline or Cancel ends the operation" in page
    resp = await answer_card(client, op, "accept")
    assert resp.status_code == 302
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    retries = _retries(mcp, "list_my_roots")
    assert len(retries) == 1 and retries[0].params["inputResponses"] == {"roots": {"roots": ROOTS}}
    assert op.result["content"][0]["text"] == \
        "Roots: file:///home/alice/projects (Projects <main>); file:///srv/data"
    submitted = await AuditEvent.objects.aget(operation_id=op.id, event="submitted")
    assert submitted.actions == {"roots": "result"} and "alice" not in repr(submitted.__dict__)


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_refusing_roots_ends_the_operation_without_a_retry(seeded, action):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_roots=True, roots=ROOTS)
    client = await signed_client(alice)
    op = await start_call(client, server, "list_my_roots", {})
    resp = await answer_card(client, op, action)
    assert resp.status_code == 302
    op = await reload_op(op)
    assert op.status == Operation.Status.DENIED
    assert op.error_message == operations.DENY_MESSAGES["deprecated_request_refused"]
    assert _retries(mcp, "list_my_roots") == []
    denied = await AuditEvent.objects.aget(operation_id=op.id, event="denied")
    assert denied.reason == "deprecated_request_refused"
    late = await answer_card(client, op, "accept", round_no=1)  # the round is gone
    assert late.status_code == 409 and _retries(mcp, "list_my_roots") == []


async def test_changing_the_allowance_mid_round_denies_the_answer(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_roots=True, roots=ROOTS)
    client = await signed_client(alice)
    op = await start_call(client, server, "list_my_roots", {})
    await client.get(f"/mcp/operations/{op.id}/")  # the card is shown
    await _allow(server, allow_roots=False)
    resp = await answer_card(client, op, "accept")
    assert resp.status_code == 409  # the round can no longer be answered; nothing of ours is down
    assert "can no longer be answered" in resp.content.decode()
    assert escape(operations.DENY_MESSAGES["server_config_changed"]) in resp.content.decode()
    op = await reload_op(op)
    assert op.status == Operation.Status.DENIED
    assert (await AuditEvent.objects.aget(operation_id=op.id, event="denied")).reason == "server_config_changed"
    assert _retries(mcp, "list_my_roots") == []


async def test_changing_the_roots_mid_round_denies_the_answer(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_roots=True, roots=ROOTS)
    client = await signed_client(alice)
    op = await start_call(client, server, "list_my_roots", {})
    await client.get(f"/mcp/operations/{op.id}/")
    await _allow(server, roots=[{"uri": "file:///etc"}])  # not what the person saw
    resp = await answer_card(client, op, "accept")
    assert resp.status_code == 409 and (await reload_op(op)).status == Operation.Status.DENIED
    assert _retries(mcp, "list_my_roots") == []


# --------------------------------------------------------------------------------- sampling


async def test_sampling_card_needs_approval_then_sends_the_written_reply(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_sampling=True)
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "<script>alert(1)</script> notes"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert 'data-kind="sampling"' in page and "sampling/createMessage" in page
    assert "Summarize: &lt;script&gt;alert(1)&lt;/script&gt; notes" in page and "<script>alert(1)" not in page
    assert "You are a concise summarizer. Answer in one sentence." in page
    assert '<dd class="max-tokens">200</dd>' in page
    assert '<code class="model-hint">claude-sonnet</code>' in page and "intelligence 0.8" in page
    assert 'name="in-summary-approve"' in page and "I approve this sampling request" in page
    assert 'name="in-summary-reply"' in page

    # Accept without the approval box: refused on the card, nothing sent, the round stays open.
    resp = await answer_card(client, op, "accept", {"in-summary-reply": "A reply"})
    assert resp.status_code == 400
    assert "Tick “I approve this sampling request” to answer it" in resp.content.decode()
    assert (await reload_op(op)).status == Operation.Status.AWAITING_INPUT
    assert _retries(mcp, "summarize_with_sampling") == []
    # Approved, but no reply written: refused too.
    resp = await answer_card(client, op, "accept", {"in-summary-approve": "on"})
    assert resp.status_code == 400 and _retries(mcp, "summarize_with_sampling") == []

    resp = await answer_card(client, op, "accept", {"in-summary-approve": "on", "in-summary-reply": "Short <b>notes</b>."})
    assert resp.status_code == 302
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    retries = _retries(mcp, "summarize_with_sampling")
    assert len(retries) == 1
    assert retries[0].params["inputResponses"] == {"summary": {
        "role": "assistant", "content": {"type": "text", "text": "Short <b>notes</b>."}, "model": "human",
        "stopReason": "endTurn"}}
    assert op.result["content"][0]["text"] == "Summary (human): Short <b>notes</b>."
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "Summary (human): Short &lt;b&gt;notes&lt;/b&gt;." in page


async def test_declining_sampling_ends_the_operation_without_a_retry(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_sampling=True)
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "t"})
    resp = await answer_card(client, op, "decline")
    assert resp.status_code == 302 and (await reload_op(op)).status == Operation.Status.DENIED
    assert _retries(mcp, "summarize_with_sampling") == []


async def test_an_invalid_provider_result_is_refused(seeded, settings):
    settings.MRTRWEB = {"SAMPLING_PROVIDER": "tests.operations.test_deprecated.bad_provider"}
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_sampling=True)
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "t"})
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert 'name="in-summary-reply"' not in page  # this provider adds no field to the card
    resp = await answer_card(client, op, "accept", {"in-summary-approve": "on"})
    assert resp.status_code == 400
    page = resp.content.decode()
    assert "invalid_deprecated_response" in page and "nothing was sent" in page
    assert (await reload_op(op)).status == Operation.Status.AWAITING_INPUT
    assert _retries(mcp, "summarize_with_sampling") == []
    rejected = [e.code async for e in AuditEvent.objects.filter(operation_id=op.id, event="rejected")]
    assert rejected == ["invalid_deprecated_response"]


async def test_a_provider_class_answers_after_approval(seeded, settings):
    settings.MRTRWEB = {"SAMPLING_PROVIDER": "tests.operations.test_deprecated.EchoProvider"}
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    await _allow(server, allow_sampling=True)
    client = await signed_client(alice)
    op = await start_call(client, server, "summarize_with_sampling", {"text": "t"})
    resp = await answer_card(client, op, "accept")
    assert resp.status_code == 400 and _retries(mcp, "summarize_with_sampling") == []  # not approved
    resp = await answer_card(client, op, "accept", {"in-summary-approve": "on"})
    assert resp.status_code == 302
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED and op.result["content"][0]["text"] == "Summary (echo-1): echo: Summarize: t"


# --------------------------------------------------------------------------------- settings page


async def test_settings_page_is_for_tenant_admins_only(seeded):
    users, server, other = seeded["users"], seeded["servers"]["acme"], seeded["servers"]["globex"]
    url = f"/mcp/servers/{server.pk}/settings/"
    alice = await signed_client(users["alice"])
    page = (await alice.get(url)).content.decode()
    assert 'name="allow_sampling"' in page and 'name="allow_roots"' in page and 'name="roots"' in page
    assert "deprecated capabilities" in page
    resp = await alice.post(url, {"allow_roots": "on", "roots": '[{"uri": "file:///data", "name": "Data"}]'})
    assert resp.status_code == 200 and "Saved." in resp.content.decode()
    saved = await McpServer.objects.aget(pk=server.pk)
    assert saved.allow_roots and not saved.allow_sampling and saved.roots == [{"uri": "file:///data", "name": "Data"}]
    # only file:// URIs
    for bad in ('[{"uri": "https://example.com/x"}]', '[{"uri": "file:///ok", "name": 3}]', '{"uri": "file:///x"}',
                '[{"uri": "file:///x", "extra": 1}]', "not json"):
        resp = await alice.post(url, {"allow_sampling": "on", "roots": bad})
        assert resp.status_code == 400, bad
    saved = await McpServer.objects.aget(pk=server.pk)
    assert not saved.allow_sampling and saved.roots == [{"uri": "file:///data", "name": "Data"}]
    # a member of the tenant and a user of another tenant: 404, nothing changes
    for name in ("carol", "bob"):
        client = await signed_client(users[name])
        assert (await client.get(url)).status_code == 404
        assert (await client.post(url, {"allow_sampling": "on", "roots": "[]"})).status_code == 404
    bob = await signed_client(users["bob"])  # globex's admin: his own server only
    assert (await bob.get(f"/mcp/servers/{other.pk}/settings/")).status_code == 200
    assert not (await McpServer.objects.aget(pk=server.pk)).allow_sampling
    # alice administers acme, not globex
    assert (await alice.get(f"/mcp/servers/{other.pk}/settings/")).status_code == 404
    assert (await AsyncClient().get(url)).status_code == 302  # login required


async def test_settings_page_is_csrf_protected(seeded):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    strict = AsyncClient(enforce_csrf_checks=True)
    await strict.aforce_login(alice)
    url = f"/mcp/servers/{server.pk}/settings/"
    resp = await strict.post(url, {"allow_sampling": "on", "roots": "[]"})
    assert resp.status_code == 403
    assert not (await McpServer.objects.aget(pk=server.pk)).allow_sampling
    page = (await strict.get(url)).content.decode()
    token = strict.cookies["csrftoken"].value
    assert 'name="csrfmiddlewaretoken"' in page
    resp = await strict.post(url, {"allow_sampling": "on", "roots": "[]", "csrfmiddlewaretoken": token})
    assert resp.status_code == 200
    assert (await McpServer.objects.aget(pk=server.pk)).allow_sampling


async def test_the_admin_allows_sampling_then_it_is_asked(seeded):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    resp = await client.post(f"/mcp/servers/{server.pk}/settings/", {"allow_sampling": "on", "roots": "[]"})
    assert resp.status_code == 200
    op = await start_call(client, server, "summarize_with_sampling", {"text": "t"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)


async def test_misconfigured_provider_never_gives_a_500(seeded, settings):
    """An open sampling round whose provider path does not import: the page says so (no 500)."""
    from django.test import AsyncClient

    from mrtrweb.models import McpServer, Operation

    server = seeded["servers"]["acme"]
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=True)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/summarize_with_sampling/", {"arg-text": "hello"})
    from mrtrweb import operations

    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == "awaiting_input", (op.error_code, op.error_message)
    settings.MRTRWEB = {"SAMPLING_PROVIDER": "mrtrweb.no_such_module.Provider"}
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert answer.status_code in (400, 503) and seeded["mcp"].calls[("summarize_with_sampling", True)] == 0
