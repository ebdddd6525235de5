"""What the one-hop round path must still hold (issue 16's attacker pass): access ended while an
answer's audit event is written stops its retry; an answer is sent only as the retry of the round
the person answered; an answer to a card no socket pushed does not wait for a receipt; the access
check's compiled query keeps the ORM's path where stand-ins would freeze other values."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from mrtrweb.tenancy import access
from mrtrweb.audit import events as audit
from mrtrweb import operations
from mrtrweb.gate import GateRejection
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.answering import post_answer
from tests.sockets import round_on_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _full(op: Operation) -> Operation:
    return await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)


async def test_access_ended_while_the_answer_is_recorded_stops_its_retry(seeded, monkeypatch):
    csrf_client, op, ws = await round_on_socket(seeded)
    real = audit.record

    def record(operation, event, **kw):
        if event == "submitted":  # a bulk disable (no signal) lands while the answer is recorded
            McpServer.objects.filter(pk=operation.server_id).update(enabled=False)
        return real(operation, event, **kw)

    monkeypatch.setattr(audit, "record", record)
    # on PostgreSQL the event is appended in the consume's own statement (mrtrweb.audit.joined): the
    # disable lands as that append is made ready, right before the statement
    from mrtrweb.audit.joined import JoinedAppend

    made_ready = JoinedAppend.__init__

    def ready(self, operation, event, **kw):
        if event == "submitted":
            McpServer.objects.filter(pk=operation.server_id).update(enabled=False)
        made_ready(self, operation, event, **kw)

    monkeypatch.setattr(JoinedAppend, "__init__", ready)
    # the retry's row move checks access in its WHERE (right before the retry would leave): refused there
    with pytest.raises(operations.OperationRefused) as refused:
        await operations.answer_round(await _full(op), {"confirm_deploy": {"action": "decline"}},
                                      round_number=op.rounds)
    assert refused.value.code == "denied"
    await operations.wait_idle()
    assert seeded["mcp"].calls[("deploy", True)] == 0  # the retry never reached the server
    ended = await Operation.objects.aget(pk=op.pk)
    assert ended.status == Operation.Status.DENIED
    assert await AuditEvent.objects.filter(operation_id=op.pk, event="denied",
                                           reason__startswith=access.ACCESS_REVOKED).aexists()
    await ws.disconnect()


async def test_an_answer_to_another_round_than_the_open_one_is_refused_and_nothing_is_sent(seeded):
    csrf_client, op, ws = await round_on_socket(seeded)
    full = await _full(op)
    with pytest.raises(operations.OperationRefused) as refused:
        await operations.answer_round(full, {"confirm_deploy": {"action": "decline"}}, round_number=op.rounds + 1)
    assert refused.value.code == "inactive_mrtr_round"
    # the gate refuses it too, before consuming anything (the check at respond time)
    with pytest.raises(GateRejection) as gate_refused:
        await sync_to_async(operations.get_gate().respond)(
            operations.handle_of(full), retry_id="r-other", user=str(full.user_id), tenant=str(full.tenant_id),
            round_number=op.rounds + 1, responses={"confirm_deploy": {"action": "decline"}})
    assert gate_refused.value.code == "inactive_mrtr_round"
    await operations.wait_idle()
    assert seeded["mcp"].calls[("deploy", True)] == 0
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.AWAITING_INPUT  # still answerable
    await operations.answer_round(full, {"confirm_deploy": {"action": "decline"}}, round_number=op.rounds)
    await operations.wait_idle()
    assert seeded["mcp"].calls[("deploy", True)] == 1
    await ws.disconnect()


async def test_an_answer_to_a_card_no_socket_pushed_does_not_wait_for_a_receipt(seeded, monkeypatch):
    from mrtrweb.views import answers

    from tests.sockets import csrf_client

    monkeypatch.setattr(answers, "RECEIPT_WAIT_S", 600.0)  # were it waited for, the POST would hang
    client = await csrf_client(seeded["users"]["carol"])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "2"})
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT
    # never displayed: no page, no socket, so no receipt is being written
    answer = await asyncio.wait_for(post_answer(client, f"/mcp/operations/{op.id}/answer/",
                                                {"action": "decline", "round": str(op.rounds)}), 30)
    assert answer.status_code == 409
    await operations.wait_idle()
    assert seeded["mcp"].calls[("deploy", True)] == 0
    assert (await Operation.objects.aget(pk=op.pk)).error_code == "denied"


def test_the_access_query_keeps_the_orms_path_when_other_values_would_be_frozen(seeded, monkeypatch):
    from django.utils import timezone

    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    real = access._query

    def filtered(user_id, tenant_id, server_id):  # a manager that filters on the time, say
        return real(user_id, tenant_id, server_id).filter(date_joined__lte=timezone.now())

    monkeypatch.setattr(access, "_query", filtered)
    monkeypatch.setattr(access, "_COMPILED", {})
    assert access._compiled("default", True) is None  # a time among the parameters: not compiled
    assert access.denial(alice.pk, server.tenant_id, server.pk) == ""
    monkeypatch.setattr(access, "_query", real)
    monkeypatch.setattr(access, "_COMPILED", {})
    assert access._compiled("default", True) is not None
    assert access.denial(alice.pk, server.tenant_id, server.pk) == ""
    assert access.denial(alice.pk, server.tenant_id + 999, None) in (access.MEMBERSHIP_REMOVED, access.TENANT_REMOVED)


async def test_an_answers_reads_are_one_statement_and_agree_with_the_orms(seeded):
    """Issue 30: checking an answer reads the operation, its server, tenant and user, the owner's
    access and the round's audit trail in one statement (:mod:`mrtrweb.operations.answer_reads`);
    what it finds is what the three ORM queries find, before and after the consent receipt."""
    from asgiref.sync import sync_to_async
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from mrtrweb.consent.panels import record_shown
    from mrtrweb.operations.answers import _check_answer

    carol, server = seeded["users"]["carol"], seeded["servers"]["acme"]
    op = await operations.start_operation(user=carol, server=server, method="tools/call", name="wait_then_ask",
                                          params={"name": "wait_then_ask", "arguments": {"seconds": 0}})
    await operations.wait_idle()
    op = await operations.load_operation(op.pk)
    assert op.status == Operation.Status.AWAITING_INPUT

    def both():
        with CaptureQueriesContext(connection) as ctx:
            one = _check_answer(op.pk, op)
        assert len(ctx.captured_queries) == 1, [q["sql"][:80] for q in ctx.captured_queries]
        orm = _check_answer(op.pk)
        for checked in (one, orm):
            assert checked.op.server.pk == server.pk and checked.op.user == carol
            assert checked.op.tenant.pk == server.tenant_id
        assert (one.refusal, one.cause, one.legacy, one.url_round, one.digests, one.op.rounds) == \
            (orm.refusal, orm.cause, orm.legacy, orm.url_round, orm.digests, orm.op.rounds)
        return one

    assert (await sync_to_async(both)()).refusal == "missing_consent_receipt"
    rnd = (await sync_to_async(operations.get_gate().state)(operations.handle_of(op))).round
    await sync_to_async(record_shown)(op, rnd)
    checked = await sync_to_async(both)()
    assert checked.refusal == "" and checked.digests["schema_digests"]
    await McpServer.objects.filter(pk=server.pk).aupdate(enabled=False)  # no signal: only the check sees it
    assert (await sync_to_async(both)()).cause == "server_disabled"
