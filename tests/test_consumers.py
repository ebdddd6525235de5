"""The per-user WebSocket (Channels consumer behind AuthMiddlewareStack + AllowedHostsOriginValidator)."""

from __future__ import annotations

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import Operation
from mrtrweb.site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _login(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")  # sets the CSRF cookie
    return client


def _ws(client: AsyncClient | None, origin: bytes = b"http://127.0.0.1:8000") -> WebsocketCommunicator:
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000")]
    if client is not None:
        cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, "/ws/mrtrweb/", headers=headers)


async def test_anonymous_is_refused(seeded):
    ws = _ws(None)
    connected, code = await ws.connect()
    assert not connected and code == 4401


async def test_foreign_origin_is_refused(seeded):
    client = await _login(seeded["users"]["alice"])
    ws = _ws(client, origin=b"https://evil.example")
    connected, _ = await ws.connect()
    assert not connected


async def test_round_is_pushed_to_its_user_only(seeded):
    alice = await _login(seeded["users"]["alice"])
    carol = await _login(seeded["users"]["carol"])
    bob = await _login(seeded["users"]["bob"])
    sockets = {name: _ws(c) for name, c in (("alice", alice), ("carol", carol), ("bob", bob))}
    for ws in sockets.values():
        connected, _ = await ws.connect()
        assert connected
    server = seeded["servers"]["acme"]
    resp = await alice.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "2"})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(user=seeded["users"]["alice"])
    msg = await sockets["alice"].receive_json_from(timeout=5)
    assert msg["type"] == "operation" and msg["id"] == str(op.id) and msg["status"] == "awaiting_input"
    html = msg["html"]
    assert 'class="card"' in html and "Deploy 2 replica(s) to staging?" in html
    assert alice.cookies["csrftoken"].value in html  # the card posts with this tab's CSRF token
    assert await sockets["carol"].receive_nothing(timeout=0.3)
    assert await sockets["bob"].receive_nothing(timeout=0.3)
    for ws in sockets.values():
        await ws.disconnect()


async def test_ping(seeded):
    client = await _login(seeded["users"]["alice"])
    ws = _ws(client)
    assert (await ws.connect())[0]
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=2)) == {"type": "pong"}
    await ws.send_to(text_data="not json")  # garbage is ignored and the connection lives on
    await ws.send_to(bytes_data=b"\x00\x01")
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=2)) == {"type": "pong"}
    await ws.disconnect()
