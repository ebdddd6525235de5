"""Attacks on what issue 15 added, as a hostile MCP server, browser or careless admin would make them.

Every test here is a claim that failed on a fault (then fixed, or marked strict xfail with the
fault named) or a probe that held. Real servers on loopback: small SDK ``MCPServer`` instances
(2025-11-25 and 2026-07-28) that misbehave on purpose, over Streamable HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient
from mcp.server.mcpserver import Context, MCPServer

from mrtrweb import operations
from mrtrweb.demo.server import serve_in_thread
from mrtrweb.models import McpServer, Operation
from mrtrweb.site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _login(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")  # the CSRF cookie
    return client


def _ws(client: AsyncClient) -> WebsocketCommunicator:
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    return WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])


async def _drain(ws: WebsocketCommunicator, quiet_s: float = 1.5, cap_s: float = 20.0) -> list[dict]:
    """Every message the socket gets until it is quiet for ``quiet_s`` (at most ``cap_s``)."""
    got: list[dict] = []
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline and not await ws.receive_nothing(timeout=quiet_s):
        got.append(await ws.receive_json_from(timeout=5))
    return got


async def _until(op: Operation, what, timeout: float = 20.0) -> Operation:
    deadline = time.monotonic() + timeout
    while True:
        op = await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)
        if what(op):
            return op
        assert time.monotonic() < deadline, f"operation stuck in {op.status} ({op.error_code}: {op.error_message})"
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------------------------
# notifications/*/list_changed floods
# --------------------------------------------------------------------------------------------

FLOOD = 2000


def _flooding_server() -> MCPServer:
    """A server whose ``flood`` tool says its tools changed :data:`FLOOD` times in a row (both ways:
    the 2025-11-25 session stream and the 2026-07-28 ``subscriptions/listen`` streams)."""
    mcp = MCPServer(name="flooder", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def flood(ctx: Context) -> str:
        """Say the tools changed, many times."""
        for _ in range(FLOOD):
            await ctx.notify_tools_changed()
            if ctx.request_context.session is not None:
                await ctx.session.send_tool_list_changed()
        return "flooded"

    return mcp


@pytest.fixture(scope="module")
def flooder():
    handle = serve_in_thread(server=_flooding_server())
    yield handle
    handle.stop()


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25"])
async def test_a_list_changed_flood_is_coalesced_not_pushed_and_logged_each_time(seeded, flooder, protocol, caplog):
    """2,000 ``tools/list_changed`` in a burst reach the open page as a few pushes (it re-reads the
    listing once or twice, not 2,000 times), the log says so in a few lines, and the flood does not
    crowd the person's other pushes (the operation's own update still arrives)."""
    alice_user = seeded["users"]["alice"]
    alice = await _login(alice_user)
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name=f"Flooder {protocol}", url=flooder.url,
                                             protocol=protocol)
    ws = _ws(alice)
    assert (await ws.connect())[0]
    assert (await alice.get(f"/mcp/servers/{server.pk}/")).status_code == 200  # the page is open, watched
    with caplog.at_level(logging.INFO, logger="mrtrweb.mcp.connection"):
        resp = await alice.post(f"/mcp/servers/{server.pk}/tools/flood/", {})
        assert resp.status_code == 302
        op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
        op = await _until(op, lambda o: o.status in Operation.TERMINAL)
        assert op.status == Operation.Status.COMPLETED, op.error_message
        got = await _drain(ws)
    listings = [m for m in got if m.get("type") == "listing"]
    assert 1 <= len(listings) <= 5, f"{len(listings)} listing pushes for one burst"
    assert all(m == {"type": "listing", "server": server.pk, "kind": "tools"} for m in listings)
    assert any(m.get("type") == "operation" and m.get("status") == "completed" for m in got), \
        "the operation's own update was crowded out by the flood"
    said = [r for r in caplog.records if "says its tools changed" in r.getMessage()]
    assert 1 <= len(said) <= 10, f"{len(said)} log lines for one burst"
    await ws.disconnect()
    await operations.wait_idle()
