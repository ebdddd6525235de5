"""Access that ended answers nothing (issue 12, item 3): a member removed from the tenant, a user
deactivated or deleted, a server disabled or deleted while a round waits -- the operation page is
404, Send/Decline/Stop are refused with nothing sent to the (real, loopback) demo MCP server, the
operation ends ``denied`` with ``access_revoked: <cause>`` in the audit, and the person's open
WebSocket is closed. The check at every answer holds even when the signals are bypassed."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb.tenancy import access
from mrtrweb import operations
from mrtrweb.models import AuditEvent, McpServer, Membership, Operation
from mrtrweb.site.asgi import application
from tests.answering import DEPLOY_OK, post_answer
from tests.sockets import closed_with, csrf_client, denied_in_audit, open_socket, round_on_socket

pytestmark = [pytest.mark.django_db(transaction=True)]

async def _nothing_answers(client: AsyncClient, op: Operation, mcp) -> None:
    """Every way of acting on the operation is refused (404) and nothing reaches the server."""
    url = f"/mcp/operations/{op.id}"
    assert (await client.get(f"{url}/")).status_code == 404
    assert (await client.get(f"{url}/panel/")).status_code == 404
    for data in (dict(DEPLOY_OK, action="accept", round=str(op.rounds)),
                 dict(DEPLOY_OK, action="send", round=str(op.rounds), review_token="x"),
                 {"action": "decline", "round": str(op.rounds)},
                 {"action": "cancel", "round": str(op.rounds)}):
        assert (await client.post(f"{url}/answer/", data)).status_code == 404, data["action"]
    assert (await client.post(f"{url}/stop/")).status_code == 404
    await operations.wait_idle()
    assert mcp.calls[("deploy", True)] == 0  # no retry ever reached the MCP server


async def test_removed_member_is_refused_everything_and_her_round_is_denied(seeded):
    mcp = seeded["mcp"]
    client, op, ws = await round_on_socket(seeded)
    # the answer was reviewed before the membership went: Send must still not go out
    review = await client.post(f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    assert review.status_code == 200 and b"review_token" in review.content
    await Membership.objects.filter(tenant=op.tenant, user=op.user_id).adelete()
    await closed_with(ws, access.CLOSE_CODE)
    row = await Operation.objects.aget(pk=op.pk)
    assert row.status == Operation.Status.DENIED and row.error_code == "denied"
    await denied_in_audit(op, access.MEMBERSHIP_REMOVED)
    await _nothing_answers(client, op, mcp)
    # each refused post is in the audit trail (code only)
    refused = [e async for e in AuditEvent.objects.filter(operation_id=op.id, event="rejected",
                                                           code="access_revoked")]
    assert len(refused) == 5 and all("after access ended: membership_removed" in e.reason for e in refused)
    # the index no longer lists it; a new socket gets no push for it
    assert str(op.id) not in (await client.get("/mcp/")).content.decode()


async def test_check_at_every_answer_holds_when_signals_are_bypassed(seeded):
    """A membership removed by raw SQL (no signal): the answer, the page and the push still refuse."""
    mcp = seeded["mcp"]
    client, op, ws = await round_on_socket(seeded)
    membership = await Membership.objects.aget(tenant=op.tenant, user=op.user_id)
    await asyncio.to_thread(lambda: Membership.objects.filter(pk=membership.pk)._raw_delete("default"))
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.AWAITING_INPUT  # no signal ran
    await operations.notify(op)  # a push for it: not sent to the socket any more
    assert await ws.receive_nothing(timeout=0.5)
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    assert resp.status_code == 404
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.DENIED
    await denied_in_audit(op, access.MEMBERSHIP_REMOVED)
    await _nothing_answers(client, op, mcp)
    await ws.disconnect()


async def test_answer_round_itself_refuses_after_access_ended(seeded):
    """The headless client (and any caller) answers through operations.answer_round: refused too."""
    _client_, op, ws = await round_on_socket(seeded)
    await McpServer.objects.filter(pk=op.server_id).aupdate(enabled=False)  # bypasses the signals
    full = await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)
    with pytest.raises(operations.OperationRefused):
        await operations.answer_round(full, {"confirm_deploy": {"action": "decline"}})
    await operations.wait_idle()
    assert seeded["mcp"].calls[("deploy", True)] == 0
    await denied_in_audit(op, access.SERVER_DISABLED)
    await ws.disconnect()


async def test_deactivated_user_is_refused_and_cannot_reconnect(seeded, settings):
    mcp = seeded["mcp"]
    client, op, ws = await round_on_socket(seeded)
    user = seeded["users"]["carol"]
    user.is_active = False
    await user.asave()
    await closed_with(ws, access.CLOSE_CODE)
    await denied_in_audit(op, access.USER_INACTIVE)
    # the session no longer signs her in (ModelBackend): the pages send her to the login page
    resp = await client.post(f"/mcp/operations/{op.id}/answer/", {"action": "decline", "round": "1"})
    assert resp.status_code == 302 and "/login/" in resp["Location"]
    again = open_socket(client)
    assert (await again.connect()) == (False, 4401)
    # and with a backend that signs inactive users in, mrtrweb's own check still refuses
    settings.AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.AllowAllUsersModelBackend"]
    await client.aforce_login(user)
    assert (await open_socket(client).connect()) == (False, access.CLOSE_CODE)
    await _nothing_answers(client, op, mcp)
    assert (await client.get(f"/mcp/servers/{op.server_id}/")).status_code == 404


async def test_disabled_server_ends_the_round(seeded):
    mcp = seeded["mcp"]
    client, op, ws = await round_on_socket(seeded)
    server = await McpServer.objects.aget(pk=op.server_id)
    server.enabled = False
    await server.asave()
    await closed_with(ws, access.CLOSE_CODE)
    await denied_in_audit(op, access.SERVER_DISABLED)
    await _nothing_answers(client, op, mcp)


async def test_deleted_server_ends_the_round_and_the_audit_keeps_it(seeded):
    mcp = seeded["mcp"]
    client, op, ws = await round_on_socket(seeded)
    await McpServer.objects.filter(pk=op.server_id).adelete()
    await closed_with(ws, access.CLOSE_CODE)
    assert not await Operation.objects.filter(pk=op.pk).aexists()  # gone with its server
    await denied_in_audit(op, access.SERVER_REMOVED)
    await _nothing_answers(client, op, mcp)


async def test_deleted_user_ends_the_round(seeded):
    _client_, op, ws = await round_on_socket(seeded)
    await seeded["users"]["carol"].adelete()
    await closed_with(ws, access.CLOSE_CODE)
    await denied_in_audit(op, access.USER_REMOVED)
    assert seeded["mcp"].calls[("deploy", True)] == 0


async def test_access_ending_during_the_call_shows_no_round(seeded):
    """Removed while the server thinks (the call in flight): denied at once; the round the server
    then asks is never shown or answered, nothing more is sent."""
    mcp = seeded["mcp"]
    client = await csrf_client(seeded["users"]["carol"])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/wait_then_ask/", {"arg-seconds": "1"})
    assert resp.status_code == 302
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    ws = open_socket(client)
    assert (await ws.connect())[0]
    await asyncio.sleep(0.3)
    assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.RUNNING
    await Membership.objects.filter(tenant=server.tenant_id, user=seeded["users"]["carol"]).adelete()
    await closed_with(ws, access.CLOSE_CODE)
    await asyncio.sleep(1.5)
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op_id)
    assert op.status == Operation.Status.DENIED
    await denied_in_audit(op, access.MEMBERSHIP_REMOVED)
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="shown").aexists()
    assert mcp.calls[("wait_then_ask", True)] == 0


async def test_other_members_keep_their_rounds(seeded):
    """Only the person who lost access is affected: alice's round in the same tenant stays open."""
    alice_client, alice_op, alice_ws = await round_on_socket(seeded, "alice")
    _carol_client, carol_op, carol_ws = await round_on_socket(seeded, "carol")
    await Membership.objects.filter(tenant=carol_op.tenant, user=carol_op.user_id).adelete()
    await closed_with(carol_ws, access.CLOSE_CODE)
    assert (await Operation.objects.aget(pk=alice_op.pk)).status == Operation.Status.AWAITING_INPUT
    assert await alice_ws.receive_nothing(timeout=0.3)
    resp = await post_answer(alice_client, f"/mcp/operations/{alice_op.id}/answer/",
                             dict(DEPLOY_OK, action="accept", round="1"))
    assert resp.status_code == 302
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=alice_op.pk)).status == Operation.Status.COMPLETED
    await alice_ws.disconnect()


async def test_a_removed_member_no_longer_sees_her_timeline(seeded):
    client, op, ws = await round_on_socket(seeded)
    assert (await client.get(f"/mcp/history/operations/{op.id}/")).status_code == 200
    await Membership.objects.filter(tenant=op.tenant, user=op.user_id).adelete()
    await closed_with(ws, access.CLOSE_CODE)
    assert (await client.get(f"/mcp/history/operations/{op.id}/")).status_code == 404


async def test_deleting_a_tenant_ends_its_calls_and_closes_sockets(seeded):
    """A tenant can be deleted only before its audit trail starts (PROTECT): a call just started
    there is abandoned and its members' sockets are closed."""
    from mrtrweb.models import Tenant

    user = seeded["users"]["carol"]
    tenant = await Tenant.objects.acreate(name="Short-lived", slug="short")
    await Membership.objects.acreate(tenant=tenant, user=user)
    server = await McpServer.objects.acreate(tenant=tenant, name="S", url=seeded["mcp"].url)
    op = await Operation.objects.acreate(tenant=tenant, user=user, server=server, method="tools/call", name="echo",
                                         params={}, request_id="mrtr-x", latest_request_id="mrtr-x")
    ws = open_socket(await csrf_client(user))
    assert (await ws.connect())[0]
    await tenant.adelete()
    await closed_with(ws, access.CLOSE_CODE)
    assert not await Operation.objects.filter(pk=op.pk).aexists()


async def test_headless_refuses_an_inactive_user(seeded):
    from mrtrweb.headless import client as headless

    user = seeded["users"]["carol"]
    await type(user).objects.filter(pk=user.pk).aupdate(is_active=False)
    user = await type(user).objects.aget(pk=user.pk)
    tenant = seeded["servers"]["acme"].tenant
    with pytest.raises(headless.HeadlessError) as err:
        await headless.arun(url=seeded["mcp"].url, user=user, tenant=tenant, method="tools/call",
                            params={"name": "echo", "arguments": {"text": "hi"}}, consent=headless.ConsentPolicy("decline"))
    assert err.value.code == "not_a_member"
    assert not seeded["mcp"].log.tool_calls()


async def test_a_membership_moved_to_another_tenant_ends_the_old_tenants_rounds(seeded):
    mcp = seeded["mcp"]
    client, op, ws = await round_on_socket(seeded)
    membership = await Membership.objects.aget(tenant=op.tenant, user=op.user_id)
    membership.tenant = seeded["servers"]["globex"].tenant
    await membership.asave()
    await closed_with(ws, access.CLOSE_CODE)
    await denied_in_audit(op, access.MEMBERSHIP_REMOVED)
    await _nothing_answers(client, op, mcp)


async def test_progress_and_updates_stop_at_once_even_without_signals(seeded):
    """A call in flight whose server is disabled behind the signals' back: the progress pushes stop
    (each push re-checks access), then the call's next step is refused."""
    client = await csrf_client(seeded["users"]["carol"])
    server = seeded["servers"]["acme"]
    ws = open_socket(client)
    assert (await ws.connect())[0]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/long_task/", {"arg-seconds": "4"})
    assert resp.status_code == 302
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    first = await ws.receive_json_from(timeout=5)
    assert first["type"] == "progress" and first["id"] == op_id
    await McpServer.objects.filter(pk=server.pk).aupdate(enabled=False)
    await asyncio.sleep(0.1)
    assert await ws.receive_nothing(timeout=2.5)  # progress at 1 s, 2 s ... not pushed any more
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op_id)
    assert op.status == Operation.Status.DENIED  # the result came back to an operation nobody may see
    await denied_in_audit(op, access.SERVER_DISABLED)
    assert await ws.receive_nothing(timeout=0.3)
    await ws.disconnect()


async def test_a_legacy_call_held_for_her_is_told_cancel(legacy):
    """A 2025-11-25 server holding its call open for the person's answer: when her access ends the
    server is told cancel (never an answer), and the operation ends denied."""
    from tests.legacy_rounds import responses_until, held_start, legacy_until

    mcp, server = legacy["mcp"], legacy["servers"]["acme"]
    client = await csrf_client(legacy["users"]["carol"])
    op = await held_start(client, server, "legacy_deploy", {"env": "prod"})
    assert op.status == Operation.Status.AWAITING_INPUT and mcp.log.responses() == []
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    await Membership.objects.filter(tenant=server.tenant_id, user=op.user_id).adelete()
    [response] = await responses_until(mcp, 1)
    assert response.result == {"action": "cancel"}
    op = await legacy_until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.DENIED
    await denied_in_audit(op, access.MEMBERSHIP_REMOVED)
    resp = await client.post(f"/mcp/operations/{op.id}/answer/", {"action": "decline", "round": "1"})
    assert resp.status_code == 404
    await operations.wait_idle(timeout=15)
    assert len(mcp.log.responses()) == 1


async def test_an_operation_ended_while_its_answer_is_recorded_sends_nothing(seeded):
    """The operation ends (access revoked, stopped) after every check passed but before its answer
    left: the retry is not sent and the row is not revived."""
    _client_, op, ws = await round_on_socket(seeded)
    # ended behind the answer's back: the row only (its binding still open, as in the instant
    # between another worker's revoke and its closing of the binding)
    await Operation.objects.filter(pk=op.pk).aupdate(status=Operation.Status.DENIED)
    full = await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)
    full.status = Operation.Status.AWAITING_INPUT  # what the answering side read a moment before
    with pytest.raises(operations.OperationRefused):
        await operations.build_and_record(full, {"confirm_deploy": {"action": "decline"}})
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.DENIED
    assert seeded["mcp"].calls[("deploy", True)] == 0
    await ws.disconnect()


def test_access_and_the_server_row_in_one_statement_agree_with_denial(seeded):
    """:func:`access.denial_and_server` (issue 30: a phase reads the owner's access and the server's
    row together) gives :func:`access.denial`'s cause in every state, and the server's row as it
    is now, in one statement."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    alice, bob, server = seeded["users"]["alice"], seeded["users"]["bob"], seeded["servers"]["acme"]
    other = seeded["servers"]["globex"]

    def both(user_id, tenant_id, server_id):
        with CaptureQueriesContext(connection) as ctx:
            cause, row = access.denial_and_server(user_id, tenant_id, server_id)
        assert cause == access.denial(user_id, tenant_id, server_id)
        return cause, row, len(ctx.captured_queries)

    McpServer.objects.filter(pk=server.pk).update(name="Renamed just now", auth_secret_digest="")
    cause, row, statements = both(alice.pk, server.tenant_id, server.pk)
    assert (cause, statements) == ("", 1)
    fresh = McpServer.objects.get(pk=server.pk)
    assert row.name == "Renamed just now" and row.pk == server.pk
    assert {f.attname: getattr(row, f.attname) for f in McpServer._meta.concrete_fields} == \
        {f.attname: getattr(fresh, f.attname) for f in McpServer._meta.concrete_fields}
    assert both(bob.pk, server.tenant_id, server.pk)[0] == access.MEMBERSHIP_REMOVED
    assert both(alice.pk, server.tenant_id, other.pk)[:2] == (access.SERVER_REMOVED, None)  # another tenant's
    assert both(alice.pk, server.tenant_id, 10**6)[:2] == (access.SERVER_REMOVED, None)
    assert both(10**6, server.tenant_id, server.pk)[0] == access.USER_REMOVED
    McpServer.objects.filter(pk=server.pk).update(enabled=False)
    cause, row, _ = both(alice.pk, server.tenant_id, server.pk)
    assert cause == access.SERVER_DISABLED and row.enabled is False
    type(alice).objects.filter(pk=alice.pk).update(is_active=False)
    assert both(alice.pk, server.tenant_id, server.pk)[0] == access.USER_INACTIVE


async def test_a_final_result_after_access_ended_completes_nothing(seeded):
    """The completion's row move carries the access check in its own ``WHERE`` (issue 30,
    :func:`mrtrweb.operations.runtime.mark_ended`): a server disabled behind the signals' back
    while the call runs leaves the operation denied for that cause, its result not kept, no
    ``completed`` event."""
    carol, server = seeded["users"]["carol"], seeded["servers"]["acme"]
    assert access.allowed_condition("default") is not None  # the one-statement path, not the check first
    op = await operations.start_operation(user=carol, server=server, method="tools/call", name="long_task",
                                          params={"name": "long_task", "arguments": {"seconds": 1}})
    await asyncio.sleep(0.3)
    await McpServer.objects.filter(pk=server.pk).aupdate(enabled=False)  # no signal: only the checks see it
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.DENIED and op.result is None
    await denied_in_audit(op, access.SERVER_DISABLED)
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="completed").aexists()
