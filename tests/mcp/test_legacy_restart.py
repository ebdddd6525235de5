"""A 2025-11-25 server that restarts (issue 26, item 6): it answers HTTP 404 for the sessions it
lost, and the client starts a new session -- once per failure -- instead of failing every request
until the pool's idle rule closes the connection (mrtrweb.mcp.session_renewal).

Against the real legacy demo server (mrtrweb.demo.legacy) on loopback, really restarted: a new
server (a new process state, no sessions) binds the same port while the old one drains, so the
client's old session id reaches a server that does not know it. Each server's WireLog says what
reached it, so the tests count ``initialize`` requests (sessions opened) and the calls received.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.demo.legacy import build_legacy_app
from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.mcp import SESSION_LOST, McpCallError, McpConnection
from mrtrweb.operations.messages import TRANSPORT_ERROR_REACHED, message_for
from tests.restarting import ECHO, Restarting

@pytest.fixture
def server():
    s = Restarting()
    yield s
    s.stop()


async def _restart(server: Restarting) -> None:
    await asyncio.to_thread(server.restart)


async def test_listing_right_after_a_restart_opens_one_new_session(server):
    async with McpConnection(server.url, timeout_s=10) as conn:
        assert conn.protocol_version == "2025-11-25" and len(await conn.list_tools()) == 7
        old = server.now.log.messages()[-1].session_id
        await _restart(server)
        t0 = time.monotonic()
        assert len(await conn.list_tools()) == 7  # no 300 s: listed again on a new session
        assert time.monotonic() - t0 < 5
        assert server.initializes() == 1
        lists = server.requests("tools/list")
        assert [m.session_id == old for m in lists] == [True, False]  # the 404, then the new session
        new = lists[-1].session_id
        assert conn.is_open and conn.session_generation == 1
        # the new session serves what follows: no other session opened
        assert (await conn.send("tools/call", ECHO, "call-after"))["content"][0]["text"] == "hello"
        assert len(await conn.list_tools()) == 7
        assert server.initializes() == 1
        # (the handshake -- server/discover, then initialize -- carries no session id)
        assert {m.session_id for m in server.now.log.messages() if m.kind == "request"} == {old, new, None}


async def test_a_call_on_a_lost_session_is_not_sent_again_and_the_next_uses_a_new_one(server):
    async with McpConnection(server.url, timeout_s=10) as conn:
        await conn.list_tools()
        await _restart(server)
        with pytest.raises(McpCallError) as err:
            await conn.send("tools/call", ECHO, "call-1")
        assert err.value.code == SESSION_LOST and err.value.http_status == 404
        assert [m.request_id for m in server.requests("tools/call")] == ["call-1"]  # once, not again
        assert server.initializes() == 0  # the new session opens with the next request
        assert conn.is_open  # the pool keeps handing it out
        raw = await conn.send("tools/call", ECHO, "call-2")
        assert raw["content"][0]["text"] == "hello"
        assert server.initializes() == 1
        assert [m.request_id for m in server.requests("tools/call")] == ["call-1", "call-2"]
        # and again: each failure opens one new session
        await _restart(server)
        with pytest.raises(McpCallError) as err:
            await conn.send("tools/call", ECHO, "call-3")
        assert err.value.code == SESSION_LOST
        assert (await conn.send("tools/call", ECHO, "call-4"))["isError"] is False
        assert server.initializes() == 1 and conn.session_generation == 2


async def test_concurrent_requests_on_a_lost_session_open_one_new_session(server):
    async with McpConnection(server.url, timeout_s=10) as conn:
        await _restart(server)
        listed = await asyncio.gather(*(conn.list_tools() for _ in range(4)))
        assert [len(t) for t in listed] == [7] * 4
        assert server.initializes() == 1 and conn.session_generation == 1


async def test_the_call_in_flight_across_the_restart_is_told_and_not_sent_again(server):
    async with McpConnection(server.url, timeout_s=15) as conn:
        task = asyncio.ensure_future(conn.send("tools/call", {"name": "legacy_long_task", "arguments": {"seconds": 8}},
                                               "long-1"))
        deadline = time.monotonic() + 5
        while not server.now.log.tool_notes("legacy_long_task"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        first = server.now
        await _restart(server)
        with pytest.raises(McpCallError) as err:
            await task
        assert err.value.code == SESSION_LOST and "response stream broke" in err.value.message, err.value
        assert [n.event for n in first.log.tool_notes("legacy_long_task")] != ["started", "finished"]
        # what reached the new server: one ping on the old session (the probe), the call never again
        assert [m.method for m in server.now.log.messages()] == ["ping"]
        assert len(await conn.list_tools()) == 7 and server.initializes() == 1


class Forgetful:
    """A legacy server that forgets every session at once: 404 to each tools/list and tools/call
    carrying a session id (what a server restarting in a loop would answer)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") != "POST" or \
                not any(k.lower() == b"mcp-session-id" for k, _ in scope.get("headers", [])):
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            event = await receive()
            body += event.get("body", b"")
            more = event.get("more_body", False)
        if json.loads(body).get("method") not in ("tools/list", "tools/call"):
            sent = False

            async def replay():
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await self.app(scope, replay, send)
        error = json.dumps({"jsonrpc": "2.0", "id": None,
                            "error": {"code": -32600, "message": "Session not found"}}).encode()
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": error})


async def test_a_server_that_forgets_every_session_costs_one_session_per_failure_never_a_loop():
    handle = serve_asgi_in_thread(Forgetful(build_legacy_app()))
    try:
        async with McpConnection(handle.url, timeout_s=10) as conn:
            def count(method: str) -> int:
                return sum(1 for r in handle.log.records() if r.method == method)

            assert count("initialize") == 1
            t0 = time.monotonic()
            with pytest.raises(McpCallError) as err:
                await conn.list_tools()  # 404, a new session, listed once more: 404 again
            assert err.value.code == SESSION_LOST and time.monotonic() - t0 < 5
            assert (count("tools/list"), count("initialize")) == (2, 2)
            with pytest.raises(McpCallError):
                await conn.send("tools/call", ECHO, "call-1")  # the lost session is replaced first
            assert (count("tools/call"), count("initialize")) == (1, 3)
            await asyncio.sleep(0.3)  # nothing goes on by itself
            assert (count("tools/list"), count("tools/call"), count("initialize")) == (2, 1, 3)
    finally:
        handle.stop()


# -- through the product: the server's page, an operation in flight, the next operation ----------------

@pytest.fixture
def legacy_server(seeded, server):
    from mrtrweb.models import McpServer

    s = seeded["servers"]["acme"]
    mcp_server = McpServer.objects.create(tenant=s.tenant, name="Legacy restarting", url=server.url)
    return {"alice": seeded["users"]["alice"], "server": mcp_server}


async def _until_ended(op_id, timeout: float = 15.0):
    from mrtrweb.models import Operation

    deadline = time.monotonic() + timeout
    while True:
        op = await Operation.objects.aget(pk=op_id)
        if op.status in Operation.TERMINAL:
            return op
        assert time.monotonic() < deadline, op.status
        await asyncio.sleep(0.05)


@pytest.mark.django_db(transaction=True)
async def test_a_restart_under_the_product(legacy_server, server):
    from mrtrweb.models import Operation

    client = AsyncClient()
    await client.aforce_login(legacy_server["alice"])
    pk = legacy_server["server"].pk
    page = await client.get(f"/mcp/servers/{pk}/")
    assert page.status_code == 200 and "legacy_long_task" in page.content.decode()
    resp = await client.post(f"/mcp/servers/{pk}/tools/legacy_long_task/", {"arg-seconds": "8"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    deadline = time.monotonic() + 5
    while not server.now.log.tool_notes("legacy_long_task"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    await _restart(server)

    t0 = time.monotonic()
    page = await client.get(f"/mcp/servers/{pk}/")  # the listing right after the restart
    assert page.status_code == 200 and "legacy_long_task" in page.content.decode()
    assert time.monotonic() - t0 < 5 and server.initializes() == 1

    op = await _until_ended(op_id)  # the call in flight: failed, honestly, not sent again
    assert op.status == Operation.Status.FAILED and op.error_code == SESSION_LOST
    assert op.error_message == message_for(SESSION_LOST)
    assert "may or may not have run" in op.error_message and "not sent again" in op.error_message
    shown = (await client.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert "may or may not have run" in shown
    assert not server.requests("tools/call")

    resp = await client.post(f"/mcp/servers/{pk}/tools/echo/", {"arg-text": "after"})
    op = await _until_ended(resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.COMPLETED and op.result["content"][0]["text"] == "after"
    # the call's own session (an operation on a legacy server gets one), besides the page's one
    [call] = server.requests("tools/call")
    assert call.session_id not in {m.session_id for m in server.requests("tools/list")}
    assert server.initializes() == 2
    await operations.wait_idle(timeout=15)


@pytest.mark.django_db(transaction=True)
async def test_a_server_that_stops_during_the_call_and_stays_away(legacy_server, server):
    """The call's response stream breaks and nothing answers the probe: transport_error, and the
    person reads that the request reached the server and may or may not have run (not "could not
    be reached")."""
    from mrtrweb.models import Operation

    client = AsyncClient()
    await client.aforce_login(legacy_server["alice"])
    resp = await client.post(f"/mcp/servers/{legacy_server['server'].pk}/tools/legacy_long_task/", {"arg-seconds": "8"})
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    deadline = time.monotonic() + 5
    while not server.now.log.tool_notes("legacy_long_task"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    await asyncio.to_thread(server.now.stop)
    op = await _until_ended(op_id)
    assert op.status == Operation.Status.FAILED and op.error_code == "transport_error"
    assert op.error_message == TRANSPORT_ERROR_REACHED != message_for("transport_error")
    shown = (await client.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert "may or may not have run" in shown and "could not be reached" not in shown
    await operations.wait_idle(timeout=15)
