"""The audit trail: hash chain and tamper detection, retention behind a signed checkpoint, deny
conditions, reconciliation, and no secret in any stored row."""

from __future__ import annotations

import datetime
import io
import json
import time

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import AsyncClient
from django.utils import timezone

from mrtrweb.audit import events as audit
from mrtrweb import conf, operations
from mrtrweb.models import AuditCheckpoint, AuditEvent, McpServer, Operation
from mrtrweb.audit.reconcile import reconcile

from .. import hostile
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]

DEPLOY_OK = {"in-confirm_deploy-confirm": "on", "in-confirm_deploy-ticket": "CHG-7781",
             "in-confirm_deploy-email": "secret.person@example.test", "in-confirm_deploy-window": "5",
             "in-confirm_deploy-region": "ap-south-1"}


async def _client(user) -> AsyncClient:
    c = AsyncClient()
    await c.aforce_login(user)
    return c


async def _start(client, server, tool, args) -> Operation:
    data = {f"arg-{k}": v for k, v in args.items()}
    data["arguments"] = "{}"  # the JSON editor of the hostile server's tools (ignored by schema forms)
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", data)
    assert resp.status_code == 302, resp.content[:300]
    await operations.wait_idle()
    return await Operation.objects.select_related("server").aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def _answer(client, op, action="accept", fields=None, view=True):
    if view:
        assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": action, "round": str(op.rounds),
                                                                           **(fields or {})})
    await operations.wait_idle()
    return resp


async def _reload(op):
    return await Operation.objects.select_related("server").aget(pk=op.pk)


def _verify() -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("mrtr_audit_verify", stdout=out)
        return 0, out.getvalue()
    except CommandError:
        return 1, out.getvalue()


async def _some_history(seeded) -> Operation:
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = await _client(alice)
    op = await _start(client, server, "deploy", {"env": "production", "replicas": "2"})
    await _answer(client, op, "accept", DEPLOY_OK)
    op2 = await _start(client, server, "book_trip", {"destination": "Oslo"})
    await _answer(client, op2, "decline")
    bob = await _client(seeded["users"]["bob"])
    op3 = await _start(bob, seeded["servers"]["globex"], "connect_account", {"provider": "x"})
    await _answer(bob, op3, "accept")
    return op


async def test_events_are_chained_and_verified(seeded):
    op = await _some_history(seeded)
    assert (await _reload(op)).status == "completed"
    rows = [r async for r in AuditEvent.objects.filter(tenant=seeded["servers"]["acme"].tenant).order_by("sequence")]
    assert [r.sequence for r in rows] == list(range(1, len(rows) + 1))
    assert all(b.prev_hash == a.hash for a, b in zip(rows, rows[1:])) and rows[0].prev_hash == audit.GENESIS
    events = [r.event for r in rows if r.operation_id == op.id]
    assert events == ["received", "shown", "submitted", "completed"]
    shown = next(r for r in rows if r.event == "shown")
    assert shown.display_digest.startswith("sha256:") and shown.user_digest == audit.keyed_digest(
        f"user:{seeded['users']['alice'].pk}")
    code, out = await sync_to_async(_verify)()
    assert code == 0 and "OK acme" in out and "OK globex" in out


def _raw(sql: str, *params) -> None:
    with connection.cursor() as cur:
        cur.execute(sql, params)


@pytest.mark.parametrize("tamper", ["edit", "delete_middle", "delete_last", "reorder", "forge_hash"])
async def test_tampering_is_detected(seeded, tamper):
    await _some_history(seeded)
    tenant = seeded["servers"]["acme"].tenant
    rows = [r async for r in AuditEvent.objects.filter(tenant=tenant).order_by("sequence")]
    a, b = rows[2], rows[3]
    if tamper == "edit":
        await sync_to_async(_raw)("UPDATE mrtrweb_auditevent SET actions = %s WHERE id = %s",
                                  json.dumps({"confirm_deploy": "decline"}), b.pk)
        expect = f"sequence {b.sequence}) was altered"
    elif tamper == "delete_middle":
        await sync_to_async(_raw)("DELETE FROM mrtrweb_auditevent WHERE id = %s", b.pk)
        expect = f"link {b.sequence} is missing"
    elif tamper == "delete_last":
        await sync_to_async(_raw)("DELETE FROM mrtrweb_auditevent WHERE id = %s", rows[-1].pk)
        expect = "events at the end were removed"
    elif tamper == "reorder":  # swap the places of two events in the chain
        await sync_to_async(_raw)("UPDATE mrtrweb_auditevent SET sequence = %s WHERE id = %s", 100000, a.pk)
        await sync_to_async(_raw)("UPDATE mrtrweb_auditevent SET sequence = %s WHERE id = %s", a.sequence, b.pk)
        await sync_to_async(_raw)("UPDATE mrtrweb_auditevent SET sequence = %s WHERE id = %s", b.sequence, a.pk)
        expect = f"sequence {a.sequence}) does not link"
    else:  # recompute the edited row's own hash: the next link still breaks
        await sync_to_async(_raw)("UPDATE mrtrweb_auditevent SET code = 'x' WHERE id = %s", b.pk)
        edited = await AuditEvent.objects.aget(pk=b.pk)
        await sync_to_async(_raw)("UPDATE mrtrweb_auditevent SET hash = %s WHERE id = %s",
                                  audit.event_hash(edited.__dict__), b.pk)
        expect = f"sequence {rows[4].sequence}) does not link"
    code, out = await sync_to_async(_verify)()
    assert code == 1 and "BROKEN acme" in out and expect in out, out
    assert "OK globex" in out  # other tenants' chains are independent


async def test_purge_keeps_the_chain_verifiable(seeded):
    await _some_history(seeded)
    tenant = seeded["servers"]["acme"].tenant
    before = await AuditEvent.objects.filter(tenant=tenant).acount()
    out = io.StringIO()
    await sync_to_async(call_command)("mrtr_audit_purge", "--older-than", "0", stdout=out)
    assert f"acme: purged {before} events" in out.getvalue()
    assert await AuditEvent.objects.filter(tenant=tenant).acount() == 0
    cp = await AuditCheckpoint.objects.aget(tenant=tenant)
    assert cp.sequence == before
    client = await _client(seeded["users"]["alice"])  # the chain continues after the checkpoint
    op = await _start(client, seeded["servers"]["acme"], "connect_account", {"provider": "after-purge"})
    await _answer(client, op)
    code, text = await sync_to_async(_verify)()
    assert code == 0 and "OK acme" in text
    await sync_to_async(_raw)("UPDATE mrtrweb_auditcheckpoint SET hash = %s WHERE id = %s", "f" * 64, cp.pk)
    code, text = await sync_to_async(_verify)()
    assert code == 1 and "invalid signature" in text


async def test_deny_missing_consent_receipt(seeded):
    client = await _client(seeded["users"]["alice"])
    op = await _start(client, seeded["servers"]["acme"], "connect_account", {"provider": "no-look"})
    resp = await _answer(client, op, view=False)  # answered without the card ever being displayed
    assert resp.status_code == 409 and "No record shows that this round was displayed" in resp.content.decode()
    op = await _reload(op)
    assert op.status == "denied"
    assert seeded["mcp"].calls[("connect_account", True)] == 0
    last = await AuditEvent.objects.filter(operation_id=op.id).order_by("-sequence").afirst()
    assert (last.event, last.reason) == ("denied", "missing_consent_receipt")


async def test_deny_server_config_changed(seeded):
    client = await _client(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    op = await _start(client, server, "connect_account", {"provider": "cfg"})
    await client.get(f"/mcp/operations/{op.id}/")
    await McpServer.objects.filter(pk=server.pk).aupdate(name="Renamed server")
    resp = await _answer(client, op, view=False)
    assert resp.status_code == 409 and "configuration changed" in resp.content.decode()
    assert (await _reload(op)).status == "denied"
    assert seeded["mcp"].calls[("connect_account", True)] == 0


async def test_deny_timeout(seeded, settings):
    settings.MRTRWEB = {"TTL_S": 1}
    operations.reset_gate()
    client = await _client(seeded["users"]["alice"])
    op = await _start(client, seeded["servers"]["acme"], "connect_account", {"provider": "slow"})
    await client.get(f"/mcp/operations/{op.id}/")
    time.sleep(1.2)
    resp = await _answer(client, op, view=False)
    assert resp.status_code == 409 and "expired" in resp.content.decode()
    assert (await _reload(op)).status == "denied"
    last = await AuditEvent.objects.filter(operation_id=op.id).order_by("-sequence").afirst()
    assert (last.event, last.reason) == ("denied", "timeout")
    assert seeded["mcp"].calls[("connect_account", True)] == 0


async def test_deny_audit_sink_failure(seeded):
    client = await _client(seeded["users"]["alice"])
    op = await _start(client, seeded["servers"]["acme"], "connect_account", {"provider": "sink"})
    await client.get(f"/mcp/operations/{op.id}/")
    # a real failure of the sink: the database refuses every new "submitted" row
    if connection.vendor == "postgresql":
        create = ["CREATE FUNCTION sink_down() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'sink down'; END; "
                  "$$ LANGUAGE plpgsql",
                  "CREATE TRIGGER sink_down BEFORE INSERT ON mrtrweb_auditevent FOR EACH ROW "
                  "WHEN (NEW.event = 'submitted') EXECUTE FUNCTION sink_down()"]
        drop = ["DROP TRIGGER sink_down ON mrtrweb_auditevent", "DROP FUNCTION sink_down()"]
    else:
        create = ["CREATE TRIGGER sink_down BEFORE INSERT ON mrtrweb_auditevent "
                  "WHEN NEW.event = 'submitted' BEGIN SELECT RAISE(ABORT, 'sink down'); END"]
        drop = ["DROP TRIGGER sink_down"]
    for sql in create:
        await sync_to_async(_raw)(sql)
    try:
        resp = await _answer(client, op, view=False)
    finally:
        for sql in drop:
            await sync_to_async(_raw)(sql)
    assert resp.status_code == 503 and "audit trail could not be written" in resp.content.decode()
    assert (await _reload(op)).status == "denied"
    assert seeded["mcp"].calls[("connect_account", True)] == 0


@pytest.fixture(scope="module")
def hostile_mcp():
    handle = hostile.serve()
    yield handle
    handle.stop()


async def test_deny_replayed_request_state(seeded, hostile_mcp):
    server = await McpServer.objects.acreate(tenant=seeded["servers"]["acme"].tenant, name="H", url=hostile_mcp.url)
    client = await _client(seeded["users"]["alice"])
    first = await _start(client, server, "same_state", {})
    assert first.status == "awaiting_input"
    second = await _start(client, server, "same_state", {})  # the same state in another operation: allowed
    assert second.status == "awaiting_input"
    await _answer(client, first, "accept")  # the retry sends it back; the server answers with it again
    first = await _reload(first)
    assert first.status == "denied"
    last = await AuditEvent.objects.filter(operation_id=first.id).order_by("-sequence").afirst()
    assert (last.event, last.round_number, last.reason) == ("denied", 2, "request_state_replayed")
    assert (await _reload(second)).status == "awaiting_input"


def _reconcile(*args) -> tuple[int, dict]:
    out = io.StringIO()
    try:
        call_command("mrtr_reconcile", "--json", *args, stdout=out)
        code = 0
    except CommandError:
        code = 1
    return code, json.loads(out.getvalue())


async def test_reconcile_settles_expired_and_finds_planted_anomalies(seeded, settings, hostile_mcp):
    users, server = seeded["users"], seeded["servers"]["acme"]
    alice = await _client(users["alice"])
    done = await _start(alice, server, "connect_account", {"provider": "done"})
    await _answer(alice, done)
    waiting = await _start(alice, server, "connect_account", {"provider": "waits"})
    bob = await _client(users["bob"])  # another tenant's user tries to answer alice's round
    assert (await bob.post(f"/mcp/operations/{waiting.id}/answer/", {"action": "accept", "round": "1"})).status_code == 404
    h = await McpServer.objects.acreate(tenant=server.tenant, name="H2", url=hostile_mcp.url)
    await _start(alice, h, "same_state", {})
    await _start(alice, h, "same_state", {})
    code, report = await sync_to_async(_reconcile)()
    assert code == 0 and report["pending"] >= 1 and report["expired"] == []
    assert len(report["foreign_attempts"]) == 1 and report["foreign_attempts"][0]["operation"] == str(waiting.id)
    assert len(report["reused_states"]) == 1 and report["replayed_states"] == []

    # a lifetime later (the clock reconcile judges by moved, not the TTL: a TTL lowered
    # after the fact would make the first answer's few seconds under load read as "late")
    later = timezone.now() + datetime.timedelta(seconds=float(conf.get("TTL_S")) + 1)
    report = await sync_to_async(reconcile)(now=later)
    assert report["unsettled"] == 0 and {"operation": str(waiting.id), "round": 1} in report["expired"], report
    assert (await _reload(waiting)).status == "expired"
    report = await sync_to_async(reconcile)(now=later)
    assert report["expired"] == [] and report["unsettled"] == 0, report  # settled once

    # planted: a second answer to an answered round after its lifetime (one second now, and more
    # than that since done's round was received; load only makes it later), and a second outcome
    settings.MRTRWEB = {"TTL_S": 1}
    time.sleep(1.2)
    done = await Operation.objects.select_related("server").aget(pk=done.pk)
    await sync_to_async(audit.record)(done, "submitted", round_number=1, retry_id="mrtr-planted")
    await sync_to_async(audit.record)(done, "failed", round_number=1)
    code, report = await sync_to_async(_reconcile)()
    assert code == 1 and report["unsettled"] >= 2, report
    assert report["duplicate_submissions"][0]["operation"] == str(done.id)
    assert report["multiple_outcomes"][0]["operation"] == str(done.id)
    assert any(s["operation"] == str(done.id) for s in report["late_submissions"])


async def test_no_secret_in_any_stored_audit_row(seeded):
    mcp = seeded["mcp"]
    await _some_history(seeded)
    states = {r.params.get("requestState") for r in mcp.log.tool_calls() if r.params.get("requestState")}
    assert states  # the demo server really sent states
    secrets = {"CHG-7781", "secret.person@example.test", "ap-south-1", "alice", "bob", "Oslo", *states}
    def dump() -> str:
        with connection.cursor() as cur:
            cur.execute("SELECT * FROM mrtrweb_auditevent")
            rows = cur.fetchall()
            cur.execute("SELECT * FROM mrtrweb_auditchainhead")
            rows += cur.fetchall()
        assert len(rows) > 10
        return "\n".join(repr(row) for row in rows)

    blob = await sync_to_async(dump)()
    leaked = [s for s in secrets if s in blob]
    assert not leaked, leaked


async def test_cancel_answer_is_sent_and_outcome_cancelled(seeded):
    client = await _client(seeded["users"]["alice"])
    op = await _start(client, seeded["servers"]["acme"], "connect_account", {"provider": "c"})
    await _answer(client, op, "cancel")
    op = await _reload(op)
    assert op.status == "completed" and "cancel" in op.result["content"][0]["text"].lower()
    assert seeded["mcp"].calls[("connect_account", True)] == 1  # the cancel went to the server
    last = await AuditEvent.objects.filter(operation_id=op.id).order_by("-sequence").afirst()
    assert last.event == "cancelled"


async def test_stopping_an_operation_denies_its_round(seeded):
    client = await _client(seeded["users"]["alice"])
    op = await _start(client, seeded["servers"]["acme"], "connect_account", {"provider": "stop"})
    await client.get(f"/mcp/operations/{op.id}/")
    resp = await client.post(f"/mcp/operations/{op.id}/stop/")
    assert resp.status_code == 302
    assert (await _reload(op)).status == "denied"
    late = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": "1"})
    assert late.status_code == 409
    assert seeded["mcp"].calls[("connect_account", True)] == 0
    events = [(e.event, e.reason) async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]
    assert events[-1] == ("denied", "cancelled")
    other = await _client(seeded["users"]["bob"])
    assert (await other.post(f"/mcp/operations/{op.id}/stop/")).status_code == 404


async def test_superuser_admin_is_read_only(seeded):
    await _some_history(seeded)
    admin = await _client(seeded["users"]["admin"])
    row = await AuditEvent.objects.afirst()
    listing = await admin.get("/admin/mrtrweb/auditevent/")
    assert listing.status_code == 200 and "received" in listing.content.decode()
    change = await admin.get(f"/admin/mrtrweb/auditevent/{row.pk}/change/")
    assert change.status_code == 200 and 'name="_save"' not in change.content.decode()
    assert (await admin.post(f"/admin/mrtrweb/auditevent/{row.pk}/change/", {"code": "x"})).status_code == 403
    assert (await admin.post(f"/admin/mrtrweb/auditevent/{row.pk}/delete/", {"post": "yes"})).status_code == 403
    assert (await admin.get("/admin/mrtrweb/auditevent/add/")).status_code == 403
    assert (await AuditEvent.objects.aget(pk=row.pk)).code == row.code
    with pytest.raises(PermissionError):
        await sync_to_async(row.save)()
    with pytest.raises(PermissionError):
        await sync_to_async(row.delete)()


async def test_every_event_of_a_round_carries_its_digests(seeded):
    op = await _some_history(seeded)
    rows = [r async for r in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]
    received = rows[0]
    assert received.event == "received" and received.state_digest and received.schema_digests
    for row in rows[1:]:
        assert (row.state_digest, row.schema_digests) == (received.state_digest, received.schema_digests), row.event
        assert row.original_request_id == received.original_request_id and row.policy_version
