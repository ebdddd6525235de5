"""The initiator of an operation (person, app, model): recorded on the operation and in every audit
event of it, covered by the chain's hash; a person's own events hash as before (empty fields);
an unknown initiator or a detail of the wrong shape never starts anything."""

from __future__ import annotations

import io

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connection

from mrtrweb import operations
from mrtrweb.audit import events as audit
from mrtrweb.models import AuditEvent, Operation
from mrtrweb.operations.initiators import InitiatorError

from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]

DETAIL = {"app_of": "00000000-0000-0000-0000-000000000001", "tool": "deploy-ui", "app_digest": "sha256:" + "a" * 64}


async def _run(seeded, **initiator) -> Operation:
    from django.test import AsyncClient

    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    op = await operations.start_operation(user=alice, server=server, method="tools/call", name="book_trip",
                                          params={"name": "book_trip", "arguments": {"destination": "Oslo"}},
                                          **initiator)
    await operations.wait_idle()
    op = await Operation.objects.select_related("server").aget(pk=op.pk)
    assert op.status == "awaiting_input", (op.status, op.error_code)
    client = AsyncClient()
    await client.aforce_login(alice)
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "decline", "round": str(op.rounds)})
    await operations.wait_idle()
    return await Operation.objects.aget(pk=op.pk)


async def test_an_apps_call_is_recorded_as_the_apps_in_every_event(seeded):
    op = await _run(seeded, initiator="app", initiator_detail=DETAIL)
    assert op.initiator == "app" and op.initiator_detail == DETAIL
    mine = await _run(seeded)
    assert mine.initiator == "person" and mine.initiator_detail == {}

    rows = [r async for r in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]
    assert [r.event for r in rows][:3] == ["received", "shown", "submitted"]
    assert rows and all(r.initiator == "app" and r.initiator_detail == DETAIL for r in rows)
    persons = [r async for r in AuditEvent.objects.filter(operation_id=mine.id)]
    assert persons and all(r.initiator == "" and r.initiator_detail == {} for r in persons)
    # the hash covers it: the chain verifies, and a changed initiator is found
    out = io.StringIO()
    await sync_to_async(call_command)("mrtr_audit_verify", stdout=out)
    assert "OK acme" in out.getvalue()

    def tamper():
        with connection.cursor() as cur:
            table = AuditEvent._meta.db_table
            cur.execute(f"UPDATE {table} SET initiator = 'person' WHERE id = %s", [rows[0].pk])
    await sync_to_async(tamper)()
    out = io.StringIO()
    with pytest.raises(Exception):
        await sync_to_async(call_command)("mrtr_audit_verify", stdout=out)
    assert "OK acme" not in out.getvalue()


async def test_the_hash_of_a_persons_event_has_no_initiator_fields(seeded):
    mine = await _run(seeded)
    row = await AuditEvent.objects.filter(operation_id=mine.id).afirst()
    from mrtrweb.audit.chain import _canonical  # noqa: PLC2701 -- the text the hash covers
    assert '"initiator' not in _canonical(row.__dict__) and audit.event_hash(row.__dict__) == row.hash
    app_row = dict(row.__dict__, initiator="app", initiator_detail=DETAIL)
    assert '"initiator":"app"' in _canonical(app_row) and audit.event_hash(app_row) != row.hash


@pytest.mark.parametrize("initiator,detail", [
    ("robot", None), ("person", {"tool": "x"}), ("app", {"Bad Key": "x"}), ("app", {"tool": 5}),
    ("app", {f"k{i}": "v" for i in range(9)}),
])
async def test_a_bad_initiator_starts_nothing(seeded, initiator, detail):
    before = await Operation.objects.acount()
    with pytest.raises(InitiatorError):
        await operations.start_operation(user=seeded["users"]["alice"], server=seeded["servers"]["acme"],
                                         method="tools/call", name="book_trip",
                                         params={"name": "book_trip", "arguments": {}},
                                         initiator=initiator, initiator_detail=detail)
    assert await Operation.objects.acount() == before and not seeded["mcp"].log.tool_calls()


async def test_the_tenant_history_shows_the_initiator_and_filters_by_it(seeded):
    """Issue 31 item 5: the tenant history says who made each call (person / app / model) and
    filters by it; an app call's rows say whether the person confirmed it."""
    from django.test import AsyncClient

    app_op = await _run(seeded, initiator="app", initiator_detail={**DETAIL, "confirmation": "person"})
    mine = await _run(seeded)
    admin = AsyncClient()
    await admin.aforce_login(seeded["users"]["alice"])  # acme's admin

    async def ops_listed(params: dict) -> tuple[set[str], str]:
        page = await admin.get("/mcp/tenants/acme/history/", params)
        assert page.status_code == 200
        html = page.content.decode()
        return {str(o) for o in (app_op.id, mine.id) if f"/mcp/history/operations/{o}/" in html}, html

    listed, html = await ops_listed({"initiator": "app"})
    assert listed == {str(app_op.id)}
    assert 'data-initiator="app">made by: app</span>' in html and "confirmed by the person" in html
    listed, html = await ops_listed({"initiator": "person"})
    assert listed == {str(mine.id)} and "made by:" not in html
    listed, _ = await ops_listed({"initiator": "model"})
    assert listed == set()
    listed, _ = await ops_listed({"tool": "book_trip"})  # anyone
    assert listed == {str(app_op.id), str(mine.id)}
    page = await admin.get("/mcp/tenants/acme/history/", {"initiator": "robot"})
    assert page.status_code == 200 and "Some filters need attention" in page.content.decode()
