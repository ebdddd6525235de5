"""The headless consent receipt written in the answer's own thread hop (answers._first_then_answer),
and a late headless answer to a round a browser answered first (it never ends the browser's operation)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from mrtrweb import operations
from mrtrweb.audit import events as audit
from mrtrweb.consent.panels import record_shown
from mrtrweb.headless import answering, client as headless
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.models import AuditEvent, Operation
from tests.answering import waiting_round

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _events(op_id) -> list[tuple[str, int, str]]:
    return [(e.event, e.round_number, e.reason) async for e in
            AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")]


async def _open_round(op):
    state = await sync_to_async(operations.get_gate().state)(operations.handle_of(op))
    return state.round


async def test_a_receipt_the_audit_refuses_in_the_answers_hop_sends_nothing(seeded, monkeypatch):
    """The receipt's write fails inside the answer's hop: denied for the missing receipt, no retry."""
    real = audit.record
    taken = []

    def failing(op, event, **kw):
        if event == "shown":
            raise audit.AuditUnavailable("refused by the test")
        return real(op, event, **kw)

    monkeypatch.setattr(audit, "record", failing)
    real_first = operations.answers._first_then_answer

    def spy(first, *args):
        taken.append(True)
        return real_first(first, *args)

    monkeypatch.setattr(operations.answers, "_first_then_answer", spy)
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    outcome = await headless.arun(url=server.url, user=alice, tenant=server.tenant, method="tools/call",
                                  params={"name": "wait_then_ask", "arguments": {"seconds": 0}},
                                  consent=ConsentPolicy.parse("accept-defaults"))
    assert taken, "the round came with its change: the receipt must have gone in the answer's hop"
    assert outcome.status == "denied"
    events = await _events(outcome.operation_id)
    assert ("denied", 1, "missing_consent_receipt") in events
    assert not any(e == "submitted" for e, _, _ in events)
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls("wait_then_ask")] == [False]


async def test_a_receipt_a_socket_wrote_first_is_kept_and_the_answer_goes_once(seeded):
    client, op = await waiting_round(seeded, shown=True)  # the browser's card: its receipt written
    rnd = await _open_round(op)

    def receipt():
        record_shown(op, rnd, reason="headless: scripted consent policy decline", first=True)

    await operations.answer_round(op, {k: {"action": "decline"} for k in rnd.requests},
                                  round_number=rnd.number, first=receipt)
    await operations.wait_idle()
    events = await _events(op.pk)
    assert [e for e, n, _ in events if n == rnd.number].count("shown") == 1  # the once guard: one receipt
    assert [e for e, n, _ in events if n == rnd.number].count("submitted") == 1
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls("connect_account")].count(True) == 1


async def test_a_receipt_for_another_round_than_the_one_answered_sends_nothing(seeded):
    client, op = await waiting_round(seeded)  # no receipt yet
    rnd = await _open_round(op)

    def receipt():
        record_shown(op, rnd, reason="headless: test", first=True)

    with pytest.raises(operations.OperationRefused) as exc:
        await operations.answer_round(op, {k: {"action": "decline"} for k in rnd.requests},
                                      round_number=rnd.number + 1, first=receipt)
    assert exc.value.code == "inactive_mrtr_round"
    assert not await AuditEvent.objects.filter(operation_id=op.pk, event="submitted").aexists()
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.AWAITING_INPUT


async def test_a_late_headless_answer_never_denies_what_a_browser_answered(seeded):
    """The browser's answer won the round's consume; the headless client's answer to the same round is refused by the gate, and
    must leave the operation to the browser's retry."""
    client, op = await waiting_round(seeded, shown=True)
    rnd = await _open_round(op)
    await operations.answer_round(op, {k: {"action": "decline"} for k in rnd.requests}, round_number=rnd.number)
    await answering.send_answer(op, rnd, {k: {"action": "cancel"} for k in rnd.requests}, {}, [])
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status != Operation.Status.DENIED, (op.status, op.error_code)
    assert not await AuditEvent.objects.filter(operation_id=op.pk, event="denied").aexists()


async def test_the_running_change_comes_before_any_change_the_drive_makes(seeded):
    client, op = await waiting_round(seeded, shown=True)
    rnd = await _open_round(op)
    with operations.watching(op.pk) as changes:
        await operations.answer_round(op, {k: {"action": "decline"} for k in rnd.requests}, round_number=rnd.number)
        await operations.wait_idle()
        seen = []
        while not changes.empty():
            seen.append(changes.get_nowait())
    assert seen and seen[0].op.status == Operation.Status.RUNNING and seen[0].round is None
    assert all(c.op.status != Operation.Status.RUNNING for c in seen[1:] if c.settled)
