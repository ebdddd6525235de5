"""An answer whose consume, ``submitted`` event and row move are one statement (issue 30,
:mod:`mrtrweb.audit.joined`) when that statement's outcome is unknown: the connection broke after
the database may have committed it (its reply lost). Whatever it wrote, nothing is sent and the
operation is not left ``running`` for good with no retry in flight (session 20's review); also the
read-back of the joined event, access ended right before the statement, and the result's and the
end's joined statements lost after commit. PostgreSQL only (elsewhere nothing is joined); run with ``tests.services_settings``."""

from __future__ import annotations

import asyncio

import pytest
from django.db import OperationalError, connection, connections

from mrtrweb import operations
from mrtrweb.audit.joined import JoinedAppend
from mrtrweb.models import AuditEvent, Operation
from tests.sockets import round_on_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("the append joins the consume's statement on PostgreSQL only")


async def _full(op: Operation) -> Operation:
    return await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)


async def test_a_joined_answer_whose_reply_is_lost_after_commit_sends_nothing_and_is_ended_by_the_heartbeat(
        seeded, monkeypatch, settings, trusted_worker):
    """The consume, the ``submitted`` event and the row to running committed, the reply lost: the
    answer is refused as the store's failure and nothing is sent; the row names this worker with no
    task following it, and the heartbeat's own check ends it (docs/round.md: "the heartbeat's check
    ends it") -- it is not left ``running`` for good."""
    from mrtrweb.operations import untracked

    csrf_client, op, ws = await round_on_socket(seeded)
    took = JoinedAppend.took
    lost: list[str] = []

    def reply_lost(self, values):
        took(self, values)  # the statement ran and committed ...
        if self.name == "submitted":  # ... and the connection broke before its reply came back
            lost.append(self.name)
            connections["default"].connection.close()
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(JoinedAppend, "took", reply_lost)
    with pytest.raises(operations.OperationRefused) as refused:
        await operations.answer_round(await _full(op), {"confirm_deploy": {"action": "decline"}},
                                      round_number=op.rounds)
    await operations.wait_idle()
    assert lost == ["submitted"] and refused.value.code == "binding_store_unavailable"
    assert seeded["mcp"].calls[("deploy", True)] == 0  # nothing was sent
    # the statement did commit: its event written, the row running and naming this worker ...
    assert await AuditEvent.objects.filter(operation_id=op.pk, event="submitted").aexists()
    stranded = await Operation.objects.aget(pk=op.pk)
    assert stranded.status == Operation.Status.RUNNING and stranded.worker
    # ... with nothing following it: the heartbeat's check ends it once its row is quiet
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "HEARTBEAT_S": 0.2}
    untracked._last_check, _ = -1e9, untracked._missing_since.clear()
    ended = 0
    for _ in range(20):
        untracked._last_check = -1e9
        ended += await untracked.check_own()
        if ended:
            break
        await asyncio.sleep(0.25)
    final = await Operation.objects.aget(pk=op.pk)
    assert ended == 1 and (final.status, final.error_code) == (Operation.Status.INTERRUPTED, "untracked")
    assert seeded["mcp"].calls[("deploy", True)] == 0
    await ws.disconnect()


async def test_a_joined_submitted_event_that_reads_back_altered_sends_nothing(seeded, monkeypatch):
    """The ``submitted`` event made in the consume's statement is read back before the retry may
    leave: read back altered (another row's hash, a changed field), the answer is denied and
    nothing is sent -- though the statement moved the row to running."""
    from mrtrweb.audit import events as audit_events

    csrf_client, op, ws = await round_on_socket(seeded)
    real = audit_events.read_event
    checked: list[str] = []

    def altered(conn, pk):
        row = real(conn, pk)
        if row is not None and row["event"] == "submitted":
            checked.append(row["event"])
            row = dict(row, retry_id=row["retry_id"] + "x")  # its content no longer matches its hash
        return row

    monkeypatch.setattr(audit_events, "read_event", altered)
    made_there: list[str] = []
    event = JoinedAppend.event

    def joined_event(self):
        made_there.append(self.name)  # the event was made in the consume's statement, checked here
        return event(self)

    monkeypatch.setattr(JoinedAppend, "event", joined_event)
    with pytest.raises(operations.OperationRefused) as refused:
        await operations.answer_round(await _full(op), {"confirm_deploy": {"action": "decline"}},
                                      round_number=op.rounds)
    await operations.wait_idle()
    assert made_there == ["submitted"] and checked == ["submitted"] and refused.value.code == "audit_unavailable"
    assert seeded["mcp"].calls[("deploy", True)] == 0
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.DENIED
    await ws.disconnect()


@pytest.mark.parametrize("ends", ["user_inactive", "membership_removed", "server_disabled"])
async def test_access_ended_right_before_the_joined_consume_sends_nothing(seeded, monkeypatch, ends):
    """The owner's access ends (no signal: a bulk update) after the answer's checks read it and right
    before the consume's statement with the ``submitted`` event and the row's move: the move's own
    ``WHERE`` refuses it, nothing is sent, the operation ends for the access."""
    from django.contrib.auth import get_user_model

    from mrtrweb.models import McpServer, Membership

    csrf_client, op, ws = await round_on_socket(seeded)
    made_ready = JoinedAppend.__init__

    def ready(self, operation, event, **kw):
        if event == "submitted":
            if ends == "user_inactive":
                get_user_model().objects.filter(pk=operation.user_id).update(is_active=False)
            elif ends == "membership_removed":
                Membership.objects.filter(tenant=operation.tenant_id, user=operation.user_id)._raw_delete("default")
            else:
                McpServer.objects.filter(pk=operation.server_id).update(enabled=False)
        made_ready(self, operation, event, **kw)

    monkeypatch.setattr(JoinedAppend, "__init__", ready)
    with pytest.raises(operations.OperationRefused) as refused:
        await operations.answer_round(await _full(op), {"confirm_deploy": {"action": "decline"}},
                                      round_number=op.rounds)
    await operations.wait_idle()
    assert refused.value.code == "denied"
    assert seeded["mcp"].calls[("deploy", True)] == 0
    ended = await Operation.objects.aget(pk=op.pk)
    assert ended.status in Operation.TERMINAL and ended.status != Operation.Status.RUNNING
    await ws.disconnect()


@pytest.mark.parametrize("event", ["received", "completed"])
async def test_a_joined_received_or_completed_statement_lost_after_commit_leaves_nothing_open(seeded, monkeypatch,
                                                                                              event):
    """The result's claim, record, ``received`` event and row to awaiting -- or the end's row,
    binding close and ``completed`` event -- one statement whose reply is lost after it committed:
    the headless round ends (no operation left live), nothing more is sent."""
    from mrtrweb.headless import client as headless
    from mrtrweb.headless.client import ConsentPolicy

    took = JoinedAppend.took
    lost: list[str] = []

    def reply_lost(self, values):
        took(self, values)
        if self.name == event and not lost:
            lost.append(self.name)
            connections["default"].connection.close()
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(JoinedAppend, "took", reply_lost)
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    outcome = await headless.arun(url=server.url, user=alice, tenant=server.tenant, method="tools/call",
                                  params={"name": "wait_then_ask", "arguments": {"seconds": 0}},
                                  consent=ConsentPolicy.parse("accept-defaults"))
    await operations.wait_idle()
    assert lost == [event]
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert op.status in Operation.TERMINAL, (outcome, op.status)
    if event == "received":
        assert seeded["mcp"].calls[("wait_then_ask", True)] == 0  # no retry
