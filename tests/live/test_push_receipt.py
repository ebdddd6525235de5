"""The consent receipt of a pushed card is written just after the card went out (off the push's
critical path): an answer that arrives first waits for it; without it no answer is sent."""

from __future__ import annotations

import asyncio
import time

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb.audit import events as audit
from mrtrweb.live import consumers
from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation
from mrtrweb.operations import DENY_MESSAGES
from mrtrweb.site.asgi import application
from mrtrweb.views import answers
from tests.answering import DEPLOY_OK, post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _card(seeded) -> tuple[AsyncClient, WebsocketCommunicator, str]:
    """Alice's deploy call started with her page's socket open; returns once its card was pushed."""
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    await client.get("/mcp/")
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    ws = WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])
    assert (await ws.connect())[0]
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "2"})
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    while True:
        msg = await ws.receive_json_from(timeout=10)
        if msg.get("id") == op_id and msg.get("status") == "awaiting_input":
            assert 'class="card"' in msg["html"]
            return client, ws, op_id


async def test_an_answer_quicker_than_the_receipt_waits_for_it(seeded, monkeypatch):
    real_hop = consumers.database_sync_to_async
    written: list[float] = []

    def hop(fn, **options):
        if fn is not consumers._record_receipt:  # the hop that writes the receipt
            return real_hop(fn, **options)

        async def late(*a, **kw):  # the receipt's append waits behind other writers of the tenant
            await asyncio.sleep(0.4)
            await real_hop(fn, **options)(*a, **kw)
            written.append(time.monotonic())
        return late

    monkeypatch.setattr(consumers, "database_sync_to_async", hop)
    client, ws, op_id = await _card(seeded)
    assert not await AuditEvent.objects.filter(operation_id=op_id, event="shown").aexists()
    resp = await post_answer(client, f"/mcp/operations/{op_id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    sent_at = time.monotonic()
    assert resp.status_code == 302, resp.content.decode()[:500]
    assert written and written[0] <= sent_at  # the Send waited for the receipt
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.COMPLETED
    assert seeded["mcp"].calls[("deploy", True)] == 1
    await ws.disconnect()


async def test_without_the_receipt_no_answer_is_sent(seeded, monkeypatch, caplog):
    real = audit.record

    def failing(op, event, **kw):
        if event == "shown":
            raise audit.AuditUnavailable("the audit database is unreachable")
        return real(op, event, **kw)

    monkeypatch.setattr(audit, "record", failing)
    monkeypatch.setattr(answers, "RECEIPT_WAIT_S", 0.3)
    client, ws, op_id = await _card(seeded)  # the card still goes out: the receipt comes after it
    resp = await post_answer(client, f"/mcp/operations/{op_id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    assert resp.status_code == 409 and "No record shows that this round was displayed to you" in resp.content.decode()
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op_id)
    assert op.status == Operation.Status.DENIED and op.error_message == DENY_MESSAGES["missing_consent_receipt"]
    assert seeded["mcp"].calls[("deploy", True)] == 0  # nothing sent
    assert not await AuditEvent.objects.filter(operation_id=op_id, event="shown").aexists()
    await ws.disconnect()
