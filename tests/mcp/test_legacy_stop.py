"""Stop during a long call, on the wire: a 2025-11-25 server is sent ``notifications/cancelled``
for the call's own id; a 2026-07-28 server gets no notice, its request's POST is closed.

Both servers are real SDK ``MCPServer`` apps on loopback behind a
:class:`~mrtrweb.demo.legacy.WireRecorder`, which records every JSON-RPC message the product POSTed
(notifications included, in arrival order, with the session they came on) and the POSTs the
product closed before their response ended. ``legacy_long_task`` notes when its handler is
cancelled and whether the SDK had marked its call cancelled by the notice, so the test sees the
server act on the notice itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.demo.legacy import WireLog, WireRecorder, serve_legacy_in_thread
from mrtrweb.demo.server import RecordedRequest, build_demo_app, serve_asgi_in_thread
from mrtrweb.models import AuditEvent, McpServer, Operation

pytestmark = [pytest.mark.django_db(transaction=True)]

T = TypeVar("T")
SECONDS = 30  # the long task's length: far beyond the test, so only a cancellation ends it early
QUIET_S = 1.5  # how long nothing more may reach the server once the operation ended


@pytest.fixture(scope="module")
def legacy_mcp():
    handle = serve_legacy_in_thread()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def modern_mcp():
    """The main demo server (2026-07-28, tool ``long_task``) behind a WireRecorder: the session's
    ``demo_mcp`` records requests only, not notifications nor closed POSTs."""
    log = WireLog()
    handle = serve_asgi_in_thread(WireRecorder(build_demo_app(), log))
    handle.log = log
    yield handle
    handle.stop()


def _add_server(seeded, handle, name: str) -> McpServer:
    acme = seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant=acme.tenant, name=name, url=handle.url)
    handle.log.clear()
    return server


@pytest.fixture
def legacy(seeded, legacy_mcp):
    return {"alice": seeded["users"]["alice"], "server": _add_server(seeded, legacy_mcp, "Demo (legacy 2025-11-25)"),
            "mcp": legacy_mcp}


@pytest.fixture
def modern(seeded, modern_mcp):
    return {"alice": seeded["users"]["alice"], "server": _add_server(seeded, modern_mcp, "Demo (recorded)"),
            "mcp": modern_mcp}


async def _eventually(what: Callable[[], T], why: str, timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while not (value := what()):
        assert time.monotonic() < deadline, why
        await asyncio.sleep(0.05)
    return value


async def _start_and_stop(alice, server: McpServer, log: WireLog, tool: str) -> tuple[Operation, RecordedRequest]:
    """Start ``tool`` through the product, wait until the server has the call, press Stop, wait
    until the operation has ended; returns the operation and the server's record of the call."""
    client = AsyncClient()
    await client.aforce_login(alice)
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {"arg-seconds": str(SECONDS)})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    [call] = await _eventually(lambda: log.tool_calls(tool), f"the server never got the {tool} call")
    await asyncio.sleep(1.2)  # the tool is working (a progress step went by)
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.RUNNING
    stop = await client.post(f"/mcp/operations/{op.id}/stop/")
    assert stop.status_code == 302
    deadline = time.monotonic() + 10
    while (op := await Operation.objects.aget(pk=op.pk)).status not in Operation.TERMINAL:
        assert time.monotonic() < deadline, f"operation stuck in {op.status}"
        await asyncio.sleep(0.05)
    assert op.status == Operation.Status.DENIED and op.error_code == "denied", (op.error_code, op.error_message)
    assert "cancelled" in op.error_message
    await operations.wait_idle(timeout=15)
    denied = await AuditEvent.objects.aget(operation_id=op.id, event="denied")
    assert denied.reason == "cancelled"
    return op, call


async def test_stop_on_a_legacy_server_sends_notifications_cancelled_for_the_call(legacy):
    alice, server, mcp = legacy["alice"], legacy["server"], legacy["mcp"]
    log: WireLog = mcp.log
    op, call = await _start_and_stop(alice, server, log, "legacy_long_task")
    # the id the product chose for its tools/call (ours: "mrtr-<uuid>"), verbatim on the wire
    assert call.request_id == op.request_id and isinstance(call.request_id, str)
    assert call.request_id.startswith("mrtr-")
    [call_msg] = [m for m in log.messages() if m.kind == "request" and m.method == "tools/call"]
    assert call_msg.request_id == call.request_id and call_msg.session_id

    [cancel] = await _eventually(log.cancellations, "the server never got notifications/cancelled")
    assert cancel.cancelled_id == call.request_id  # same type and value: the string id, not a number
    assert cancel.session_id == call_msg.session_id  # on the call's own MCP session

    # the handler saw it: cancelled by the notice (the SDK had marked its call cancel-requested; the
    # product also closes the connection, which alone would cancel it unmarked), after the notice
    # arrived, long before its end; it never finished
    notes = await _eventually(lambda: [n for n in log.tool_notes("legacy_long_task") if n.event != "started"],
                              "the tool's handler was never cancelled")
    [started] = [n for n in log.tool_notes("legacy_long_task") if n.event == "started"]
    assert [(n.event, n.request_id, n.cancel_requested) for n in notes] == [("cancelled", call.request_id, True)]
    assert started.request_id == call.request_id
    assert started.seq < cancel.seq < notes[0].seq
    assert 1 <= notes[0].step < SECONDS

    # nothing else reached the server for this operation after its call: only the one notice
    await asyncio.sleep(QUIET_S)
    assert log.messages(after=call_msg.seq) == [cancel]
    assert log.responses() == []
    assert len(log.tool_calls()) == 1
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.DENIED


async def test_stop_on_a_2026_server_closes_the_post_and_sends_no_notice(modern):
    alice, server, mcp = modern["alice"], modern["server"], modern["mcp"]
    log: WireLog = mcp.log
    op, call = await _start_and_stop(alice, server, log, "long_task")
    assert call.request_id == op.request_id and str(call.request_id).startswith("mrtr-")
    [call_msg] = [m for m in log.messages() if m.kind == "request" and m.method == "tools/call"]
    # closing the call's POST is the cancellation at 2026-07-28
    [closed] = await _eventually(log.closed_posts, "the server never saw the call's POST closed")
    assert closed.request_ids == (call.request_id,)
    assert call_msg.seq < closed.seq
    await asyncio.sleep(QUIET_S)
    assert log.cancellations() == []  # no notifications/cancelled at 2026-07-28
    assert log.messages(after=call_msg.seq) == []  # nor anything else
    assert len(log.tool_calls()) == 1
