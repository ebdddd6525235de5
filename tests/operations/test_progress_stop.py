"""Long calls: progress notifications reach the user's WebSocket; Stop cancels a call in flight
(the server sees its request abandoned) and a waiting round; nothing more is sent."""

from __future__ import annotations

import asyncio

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation

from tests.sockets import csrf_client, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_progress_is_pushed_and_stop_cancels_the_call(seeded):
    alice = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(alice)
    assert (await ws.connect())[0]
    server = seeded["servers"]["acme"]
    resp = await alice.post(f"/mcp/servers/{server.pk}/tools/long_task/", {"arg-seconds": "20"})
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    progress = []
    while len(progress) < 2:
        msg = await ws.receive_json_from(timeout=10)
        if msg["type"] == "progress":
            assert msg["id"] == op_id
            progress.append(msg)
    assert progress[1]["total"] == 20 and progress[1]["progress"] >= 1 and "of 20 s" in progress[1]["message"]
    page = (await alice.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert 'class="call-progress"' in page and "/stop/" in page  # a spinner never without a way out
    stop = await alice.post(f"/mcp/operations/{op_id}/stop/")
    assert stop.status_code == 302
    for _ in range(40):
        op = await Operation.objects.aget(pk=op_id)
        if op.status != "running":
            break
        await asyncio.sleep(0.1)
    assert op.status == "denied" and "cancelled" in op.error_message
    await operations.wait_idle()
    last = await AuditEvent.objects.filter(operation_id=op_id).order_by("-sequence").afirst()
    assert (last.event, last.reason) == ("denied", "cancelled")
    other = AsyncClient()
    await other.aforce_login(seeded["users"]["carol"])
    assert (await other.post(f"/mcp/operations/{op_id}/stop/")).status_code == 404
    await ws.disconnect()
