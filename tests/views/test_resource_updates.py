"""A read resource's page follows the resource (issue 28, item 4): the server's
``notifications/resources/updated`` reaches the person's socket as ``{"type": "resource"}`` (no
server text), and "Read again" starts a new ``resources/read`` through the one POST path.

A real server on loopback: the demo's notice board (:mod:`mrtrweb.demo.board`), at 2026-07-28
(``subscriptions/listen`` with ``resourceSubscriptions``) and pinned to 2025-11-25
(``resources/subscribe`` / ``resources/unsubscribe``).
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import quote

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.demo.board import BOARD_URI, board_server
from mrtrweb.demo.server import serve_in_thread
from mrtrweb.models import McpServer, Operation
from mrtrweb.servers import connections
from mrtrweb.mcp import resource_watch
from mrtrweb.site.asgi import application
from tests.attack28_servers import MUTE_URI, mute_subscriber

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def board():
    handle = serve_in_thread(server=board_server())
    yield handle
    handle.stop()


async def _login(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")  # the CSRF cookie
    return client


def _ws(client: AsyncClient) -> WebsocketCommunicator:
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    return WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])


async def _message(ws: WebsocketCommunicator, kind: str, timeout: float = 10.0) -> dict:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        msg = await ws.receive_json_from(timeout=max(deadline - loop.time(), 0.1))
        if msg.get("type") == kind:
            return msg


async def _done(resp) -> Operation:
    assert resp.status_code == 302, resp.content.decode()[:400]
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == "completed", (op.error_code, op.error_message)
    return op


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25"])
async def test_a_read_resource_page_is_told_of_a_newer_version(seeded, board, protocol):
    alice_user = seeded["users"]["alice"]
    alice, bob = await _login(alice_user), await _login(seeded["users"]["bob"])
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name=f"Board {protocol}", url=board.url,
                                             protocol=protocol)
    read = await _done(await alice.post(f"/mcp/servers/{server.pk}/resources/?uri={quote(BOARD_URI, safe='')}", {}))
    page = (await alice.get(f"/mcp/operations/{read.pk}/")).content.decode()
    version = int(re.search(r"Version (\d+): ", page).group(1))  # the board is the module's
    assert f'data-watch-resource="{read.pk}" role="status" hidden' in page  # shown when told
    assert f'action="/mcp/operations/{read.pk}/rerun/" class="inline read-again-form"' in page

    board.log.clear()
    sockets = [_ws(alice), _ws(bob)]
    for ws in sockets:
        assert (await ws.connect())[0]
    await sockets[1].send_json_to({"type": "resource.watch", "operation": str(read.pk)})  # not bob's: ignored
    await sockets[0].send_json_to({"type": "resource.watch", "operation": str(read.pk)})
    assert await _message(sockets[0], "resource.watching") == {"type": "resource.watching", "operation": str(read.pk)}
    if protocol == "2025-11-25":
        assert [r.params["uri"] for r in board.log.records("resources/subscribe")] == [BOARD_URI]
    else:
        (listen,) = board.log.records("subscriptions/listen")
        assert listen.params["notifications"]["resourceSubscriptions"] == [BOARD_URI]

    await _done(await alice.post(f"/mcp/servers/{server.pk}/tools/update_board/", {"arg-text": "<b>new</b> text"}))
    assert await _message(sockets[0], "resource") == {"type": "resource", "operation": str(read.pk)}  # no server text
    assert await sockets[1].receive_nothing(timeout=0.3)

    # Read again: the one path (POST, CSRF), a new resources/read of the same URI
    again = await _done(await alice.post(f"/mcp/operations/{read.pk}/rerun/", {}))
    assert again.method == "resources/read" and again.pk != read.pk
    page = (await alice.get(f"/mcp/operations/{again.pk}/")).content.decode()
    assert f"Version {version + 1}: &lt;b&gt;new&lt;/b&gt; text" in page

    # the page closed: the server is told when no page follows the URI any more
    for ws in sockets:
        await ws.disconnect()
    conn = await connections.connection_for(alice_user, server)
    assert not conn.watching_resources()
    if protocol == "2025-11-25":
        assert [r.params["uri"] for r in board.log.records("resources/unsubscribe")] == [BOARD_URI]


async def test_a_server_without_subscribe_is_not_followed(seeded):
    """The demo server's 2025-11-25 sessions declare no ``resources.subscribe``: nothing is asked."""
    alice = await _login(seeded["users"]["alice"])
    server = await McpServer.objects.aget(pk=seeded["servers"]["acme"].pk)
    server.protocol = "2025-11-25"
    await server.asave()
    op = await Operation.objects.acreate(user=seeded["users"]["alice"], tenant_id=server.tenant_id, server=server,
                                         method="resources/read", name="demo://reports/x",
                                         params={"uri": "demo://reports/x"}, status="completed",
                                         request_id="r1", latest_request_id="r1")
    ws = _ws(alice)
    assert (await ws.connect())[0]
    await ws.send_json_to({"type": "resource.watch", "operation": str(op.pk)})
    assert await ws.receive_nothing(timeout=0.5)
    assert not seeded["mcp"].log.records("resources/subscribe")
    await ws.disconnect()


async def test_a_server_that_never_answers_a_subscribe_holds_neither_the_socket_nor_a_watch(seeded, monkeypatch):
    """A 2025-11-25 server that never answers ``resources/subscribe``: the page's socket goes on
    answering (the watch is a task of its own, not awaited in the socket's receive: before, every
    push to the page waited for the server, up to the call timeout), repeated watch messages ask
    once, and the watch is given up within ``ASK_TIMEOUT_S``, nothing left followed."""
    monkeypatch.setattr(resource_watch, "ASK_TIMEOUT_S", 2.0, raising=False)
    mute, asked = mute_subscriber()
    handle = serve_in_thread(server=mute)
    try:
        alice_user = seeded["users"]["alice"]
        alice = await _login(alice_user)
        acme = seeded["servers"]["acme"]
        server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Mute", url=handle.url,
                                                 protocol="2025-11-25")
        op = await Operation.objects.acreate(user=alice_user, tenant_id=server.tenant_id, server=server,
                                             method="resources/read", name=MUTE_URI, params={"uri": MUTE_URI},
                                             status="completed", request_id="r1", latest_request_id="r1")
        ws = _ws(alice)
        assert (await ws.connect())[0]
        for _ in range(3):
            await ws.send_json_to({"type": "resource.watch", "operation": str(op.pk)})
        await ws.send_json_to({"type": "ping"})
        assert await _message(ws, "pong", timeout=1.5) == {"type": "pong"}  # not behind the server's silence
        conn = await connections.connection_for(alice_user, server)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while (not asked or conn.watching_resources()) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        assert asked == [MUTE_URI] and not conn.watching_resources()
        assert await ws.receive_nothing(timeout=0.2)  # no "resource.watching": it is not followed
        await ws.disconnect()
    finally:
        handle.stop()
