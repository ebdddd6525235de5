"""The per-user WebSocket (Channels consumer behind AuthMiddlewareStack + AllowedHostsOriginValidator)."""

from __future__ import annotations

import asyncio

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import Operation
from tests.sockets import csrf_client, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_anonymous_is_refused(seeded):
    ws = open_socket(None)
    connected, code = await ws.connect()
    assert not connected and code == 4401


async def test_foreign_origin_is_refused(seeded):
    client = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(client, origin=b"https://evil.example")
    connected, _ = await ws.connect()
    assert not connected


async def test_round_is_pushed_to_its_user_only(seeded):
    alice = await csrf_client(seeded["users"]["alice"])
    carol = await csrf_client(seeded["users"]["carol"])
    bob = await csrf_client(seeded["users"]["bob"])
    sockets = {name: open_socket(c) for name, c in (("alice", alice), ("carol", carol), ("bob", bob))}
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
    # the card posts with this tab's CSRF token, masked as a page's is: the cookie's secret itself
    # never travels in a frame, and the token the frame carries is accepted
    secret = alice.cookies["csrftoken"].value
    assert secret not in html
    token = html.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    assert len(token) == 64 and token != secret
    assert await sockets["carol"].receive_nothing(timeout=0.3)
    assert await sockets["bob"].receive_nothing(timeout=0.3)
    strict = AsyncClient(enforce_csrf_checks=True)
    strict.cookies = alice.cookies
    action = f"/mcp/operations/{op.id}/answer/"
    assert action in html
    refused = await strict.post(action, {"action": "decline", "round": str(op.rounds)})
    assert refused.status_code == 403  # without the token
    answered = await strict.post(action, {"action": "decline", "round": str(op.rounds), "csrfmiddlewaretoken": token})
    assert answered.status_code in (200, 302), answered.status_code
    for ws in sockets.values():
        await ws.disconnect()


async def test_ping(seeded):
    client = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(client)
    assert (await ws.connect())[0]
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=2)) == {"type": "pong"}
    await ws.send_to(text_data="not json")  # garbage is ignored and the connection lives on
    await ws.send_to(text_data="[" * 2000 + "]" * 2000)  # nested past the decoder's depth: ignored too
    await ws.send_to(bytes_data=b"\x00\x01")
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=2)) == {"type": "pong"}
    await ws.disconnect()


class _CountingLayer:
    """Wraps the real channel layer: counts group joins/leaves in flight, can fail them."""

    def __init__(self, real, *, fail: str = "") -> None:
        self.real, self.fail = real, fail
        self.in_flight = self.peak = 0
        self.done: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self.real, name)

    async def _counted(self, name, *args):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.005)  # a Redis round trip
            if self.fail == name:
                raise ConnectionError("Too many connections")
            result = await getattr(self.real, name)(*args)
            self.done[name] = self.done.get(name, 0) + 1
            return result
        finally:
            self.in_flight -= 1

    async def group_add(self, group, channel):
        return await self._counted("group_add", group, channel)

    async def group_discard(self, group, channel):
        return await self._counted("group_discard", group, channel)


async def _layer(monkeypatch, **kw) -> _CountingLayer:
    from channels import layers

    layer = _CountingLayer(layers.get_channel_layer(), **kw)
    monkeypatch.setattr("channels.consumer.get_channel_layer", lambda alias="default": layer)
    return layer


async def test_a_mass_disconnect_queues_its_group_leaves(seeded, monkeypatch):
    """Many sockets closing together: at most GROUP_CALLS_MAX leaves in flight, all of them done."""
    from mrtrweb.live import consumers

    monkeypatch.setattr(consumers, "GROUP_CALLS_MAX", 3)
    monkeypatch.setattr(consumers, "_group_slots", __import__("weakref").WeakKeyDictionary())
    layer = await _layer(monkeypatch)
    client = await csrf_client(seeded["users"]["alice"])
    sockets = [open_socket(client) for _ in range(12)]
    for ws in sockets:
        assert (await ws.connect())[0]
    layer.peak = 0
    await asyncio.gather(*(ws.disconnect() for ws in sockets))
    assert layer.peak == 3 and layer.in_flight == 0
    assert layer.done["group_discard"] == 24  # every socket left its two groups (the user's, the session's)


async def test_a_failed_group_leave_is_logged_not_raised(seeded, monkeypatch, caplog):
    await _layer(monkeypatch, fail="group_discard")
    client = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(client)
    assert (await ws.connect())[0]
    with caplog.at_level("WARNING", logger="mrtrweb.consumers"):
        await ws.disconnect()  # would raise out of the consumer before
    assert "could not leave its push group (ConnectionError)" in caplog.text


async def test_a_failed_group_join_closes_the_socket(seeded, monkeypatch, caplog):
    await _layer(monkeypatch, fail="group_add")
    client = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(client)
    with caplog.at_level("WARNING", logger="mrtrweb.consumers"):
        connected, code = await ws.connect()
    assert not connected and code == 1011
    assert "could not join its push group (ConnectionError)" in caplog.text
    await ws.disconnect()  # let the consumer finish (and its database connection close)


class _DroppedLayer(_CountingLayer):
    """The real layer, until :meth:`drop`: then its receive fails as channels-redis' does when
    Redis restarts under a blocking read."""

    def __init__(self, real) -> None:
        super().__init__(real)
        self.dropped = asyncio.Event()

    def drop(self) -> None:
        self.dropped.set()

    async def receive(self, channel):
        import redis

        receiving = asyncio.ensure_future(self.real.receive(channel))
        dropped = asyncio.ensure_future(self.dropped.wait())
        await asyncio.wait({receiving, dropped}, return_when=asyncio.FIRST_COMPLETED)
        if receiving.done():
            dropped.cancel()
            return receiving.result()
        receiving.cancel()
        raise redis.exceptions.ConnectionError("Connection closed by server.")


async def test_a_channel_layer_outage_closes_the_socket_cleanly(seeded, monkeypatch, caplog):
    """Redis restarting under the socket's channel receive: closed with 1011 (the page reconnects),
    one WARNING line, no exception out of the application, its re-check task cancelled."""
    from channels import layers

    layer = _DroppedLayer(layers.get_channel_layer())
    monkeypatch.setattr("channels.consumer.get_channel_layer", lambda alias="default": layer)
    client = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(client)
    assert (await ws.connect())[0]
    tasks_before = {t for t in asyncio.all_tasks() if "_recheck_periodically" in repr(t.get_coro())}
    assert tasks_before
    with caplog.at_level("INFO", logger="mrtrweb.consumers"):
        layer.drop()
        closed = await ws.receive_output(timeout=5)  # would re-raise the ConnectionError before
    assert closed == {"type": "websocket.close", "code": 1011}
    await ws.wait(timeout=5)  # the application returned (no exception)
    lines = [r for r in caplog.records if r.name == "mrtrweb.consumers"]
    assert [(r.levelname, r.getMessage()) for r in lines] == [
        ("WARNING", f"websocket: user {seeded['users']['alice'].pk}'s connection closed (code 1011): the channel "
                    "layer is unavailable (ConnectionError); the page reconnects")]
    assert not any(r.exc_info for r in caplog.records)
    await asyncio.sleep(0)
    assert all(t.done() for t in tasks_before)


async def test_a_database_outage_under_a_push_closes_the_socket_cleanly(seeded, monkeypatch, caplog):
    from django.db import OperationalError

    from mrtrweb.live import consumers
    from mrtrweb.operations import user_group

    def unreachable(*args, **kwargs):  # the push's read of the operation (in its thread hop)
        raise OperationalError("connection refused")

    client = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(client)
    assert (await ws.connect())[0]
    monkeypatch.setattr(consumers.access, "visible_operation_sync", unreachable)
    monkeypatch.setattr("mrtrweb.live.sessions.session_denial", lambda *a: "")
    from channels.layers import get_channel_layer

    with caplog.at_level("WARNING", logger="mrtrweb.consumers"):
        await get_channel_layer().group_send(user_group(seeded["users"]["alice"].pk),
                                             {"type": "operation.update", "operation_id": "x"})
        assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 1011}
    await ws.wait(timeout=5)
    assert "the database is unavailable (OperationalError)" in caplog.text


async def test_an_outage_before_the_consumer_refuses_the_handshake_cleanly(seeded, monkeypatch, caplog):
    """The session's user cannot be read (the database is down) in AuthMiddlewareStack, before the
    consumer: the handshake is refused (1011), one line, nothing raised out of the application."""
    from django.db import OperationalError

    def unreachable(scope):
        raise OperationalError("connection refused")

    monkeypatch.setattr("channels.auth.get_user", lambda scope: unreachable(scope))
    client = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(client)
    with caplog.at_level("WARNING", logger="mrtrweb.origin"):
        connected, code = await ws.connect()
    assert not connected and code == 1011
    assert "websocket /ws/mrtrweb/ refused: the database is unavailable (OperationalError)" in caplog.text
