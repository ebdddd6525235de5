"""A WebSocket lives only as long as the session that opened it (:mod:`mrtrweb.live.sessions`): sign-out,
a password change, a session deleted, flushed or expired close that session's sockets (code 4401)
and nothing more is pushed to them; the other sessions' sockets go on."""

from __future__ import annotations

import datetime
import logging

import pytest
from channels.layers import get_channel_layer
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb.live import session_read, sessions
from mrtrweb.models import Operation
from mrtrweb.operations import user_group
from mrtrweb.site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _client(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")  # the CSRF cookie
    return client


async def _socket(client: AsyncClient) -> WebsocketCommunicator:
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    ws = WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])
    connected, _ = await ws.connect()
    assert connected
    return ws


async def _operation(seeded, who: str = "alice") -> Operation:
    server = seeded["servers"]["acme"]
    return await Operation.objects.acreate(tenant=server.tenant, user=seeded["users"][who], server=server,
                                           method="tools/call", name="echo", params={}, request_id="mrtr-s",
                                           latest_request_id="mrtr-s")


async def _push(op: Operation) -> None:
    await get_channel_layer().group_send(user_group(op.user_id), {"type": "operation.update",
                                                                  "operation_id": str(op.id)})


async def _receives_push(ws: WebsocketCommunicator, op: Operation) -> None:
    out = await ws.receive_json_from(timeout=5)
    assert out["type"] == "operation" and out["id"] == str(op.id)


async def _closed_without_push(ws: WebsocketCommunicator, timeout: float = 5) -> None:
    out = await ws.receive_output(timeout=timeout)
    assert out == {"type": "websocket.close", "code": sessions.CLOSE_CODE}, out
    await ws.wait()


async def test_sign_out_closes_that_sessions_sockets_and_no_other(seeded, caplog):
    caplog.set_level(logging.DEBUG)
    user = seeded["users"]["alice"]
    signing_out, staying = await _client(user), await _client(user)
    key = signing_out.session.session_key
    ws_out, ws_stay = await _socket(signing_out), await _socket(staying)
    assert (await signing_out.post("/accounts/logout/")).status_code == 302
    await _closed_without_push(ws_out)
    op = await _operation(seeded)
    await _push(op)
    await _receives_push(ws_stay, op)
    await ws_stay.disconnect()
    # the session key is in no group name and no log line
    assert key not in sessions.session_group(key) and sessions.session_group(key).startswith("mrtrweb.session.")
    assert key not in caplog.text


async def test_a_password_change_closes_the_sockets_of_the_sessions_it_invalidates(seeded):
    user = seeded["users"]["alice"]
    ws_alice = await _socket(await _client(user))
    ws_carol = await _socket(await _client(seeded["users"]["carol"]))
    user.set_password("a-new-password-for-alice")
    await user.asave()
    await _closed_without_push(ws_alice)
    # another user's socket is untouched
    op = await _operation(seeded, "carol")
    await _push(op)
    await _receives_push(ws_carol, op)
    await ws_carol.disconnect()


async def test_a_password_changed_behind_the_orm_still_stops_the_pushes(seeded):
    """``QuerySet.update`` sends no signal: the push itself re-validates the session."""
    user = seeded["users"]["alice"]
    ws = await _socket(await _client(user))
    op = await _operation(seeded)
    await type(user)._default_manager.filter(pk=user.pk).aupdate(password="md5$x$y")
    await _push(op)
    await _closed_without_push(ws)


@pytest.mark.parametrize("how", ["deleted", "flushed", "expired", "another_user"])
async def test_a_session_that_ended_otherwise_gets_no_more_pushes(seeded, how):
    from importlib import import_module

    from django.conf import settings
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    client = await _client(seeded["users"]["alice"])
    ws = await _socket(client)
    op = await _operation(seeded)
    await _push(op)
    await _receives_push(ws, op)  # while the session holds, pushes arrive
    key = client.session.session_key
    store = import_module(settings.SESSION_ENGINE).SessionStore(key)
    if how == "deleted":
        await Session.objects.filter(session_key=key).adelete()
    elif how == "flushed":
        await store.aload()
        await store.aflush()
    elif how == "expired":
        await Session.objects.filter(session_key=key).aupdate(expire_date=timezone.now() - datetime.timedelta(seconds=1))
    else:  # the session now says another user (whatever wrote it)
        data = await store.aload()
        data["_auth_user_id"] = str(seeded["users"]["carol"].pk)
        store._session_cache = data
        await store.asave()
    await _push(op)
    await _closed_without_push(ws)


async def test_a_socket_re_checks_its_session_even_when_nothing_is_pushed(seeded, monkeypatch):
    from django.contrib.sessions.models import Session

    monkeypatch.setattr(sessions, "RECHECK_S", 0.2)
    client = await _client(seeded["users"]["alice"])
    ws = await _socket(client)
    assert await ws.receive_nothing(timeout=0.5)  # a valid session: the socket stays open
    await Session.objects.filter(session_key=client.session.session_key).adelete()
    await _closed_without_push(ws, timeout=3)


async def test_session_denial_reads_and_writes_nothing_else(seeded):
    from asgiref.sync import sync_to_async

    client = await _client(seeded["users"]["alice"])
    key = client.session.session_key
    user_id = seeded["users"]["alice"].pk
    assert await sync_to_async(sessions.session_denial)(key, user_id) == ""
    assert await sync_to_async(sessions.session_denial)(key, seeded["users"]["carol"].pk) == sessions.SESSION_INVALID
    assert await sync_to_async(sessions.session_denial)("", user_id) == sessions.SESSION_GONE
    assert await sync_to_async(sessions.session_denial)("nosuchsession" * 3, user_id) == sessions.SESSION_GONE
    assert await sync_to_async(sessions.session_denial)(key, user_id) == ""  # the session is unchanged


@pytest.mark.parametrize("engine", ["django.contrib.sessions.backends.cache",
                                    "django.contrib.sessions.backends.cached_db",
                                    "django.contrib.sessions.backends.signed_cookies"])
async def test_every_session_engine_ends_its_sockets(seeded, settings, engine):
    """Sign-out closes the socket whatever the engine; a session the store no longer holds gets no
    push (a signed cookie cannot be deleted server-side: sign-out alone ends it)."""
    from importlib import import_module

    settings.SESSION_ENGINE = engine
    user = seeded["users"]["alice"]
    signing_out, gone = await _client(user), await _client(user)
    ws_out, ws_gone = await _socket(signing_out), await _socket(gone)
    op = await _operation(seeded)
    await _push(op)
    await _receives_push(ws_out, op)
    await _receives_push(ws_gone, op)
    assert (await signing_out.post("/accounts/logout/")).status_code == 302
    await _closed_without_push(ws_out)
    if engine.endswith("signed_cookies"):
        await ws_gone.disconnect()
        return
    await import_module(engine).SessionStore(gone.session.session_key).adelete()
    await _push(op)
    await _closed_without_push(ws_gone)


async def test_the_session_that_changed_the_password_keeps_its_socket(seeded):
    """As Django's password change views do: ``set_password``, save, then
    ``update_session_auth_hash`` for the session that asked; the others' sockets close."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import HASH_SESSION_KEY

    user = seeded["users"]["alice"]
    changing, other = await _client(user), await _client(user)
    ws_changing, ws_other = await _socket(changing), await _socket(other)
    user.set_password("a-new-password-for-alice")
    await user.asave()
    store = import_module(settings.SESSION_ENGINE).SessionStore(changing.session.session_key)
    await store.aload()
    await store.aset(HASH_SESSION_KEY, user.get_session_auth_hash())
    await store.asave()
    await _closed_without_push(ws_other)
    op = await _operation(seeded)
    await _push(op)
    await _receives_push(ws_changing, op)
    await ws_changing.disconnect()


async def test_a_session_that_cannot_be_read_pauses_its_socket_and_is_not_gone(seeded, monkeypatch):
    """Issue 26: the database down under a session read is an outage, not a session that ended:
    ``SESSION_UNREADABLE``, nothing pushed, the socket closed 1011 (the page keeps its card and
    reconnects), never 4401; a read that fails otherwise still counts as gone."""
    from asgiref.sync import sync_to_async
    from django.contrib.sessions.backends.db import SessionStore
    from django.db import OperationalError

    from mrtrweb.live.consumers import OUTAGE_CLOSE_CODE

    client = await _client(seeded["users"]["alice"])
    key, user_id = client.session.session_key, seeded["users"]["alice"].pk
    ws = await _socket(client)
    op = await _operation(seeded)

    def down(self):
        raise OperationalError("connection refused")

    # both ways a session is read: Django's store, and the one statement of mrtrweb.live.session_read
    monkeypatch.setattr(SessionStore, "load", down)
    monkeypatch.setattr(session_read, "read", lambda *a: down(None))
    assert await sync_to_async(sessions.session_denial)(key, user_id) == sessions.SESSION_UNREADABLE
    await _push(op)
    out = await ws.receive_output(timeout=5)
    assert out == {"type": "websocket.close", "code": OUTAGE_CLOSE_CODE}, out  # no panel, no 4401
    await ws.wait()

    def broken(self):
        raise ValueError("not an outage")

    monkeypatch.setattr(SessionStore, "load", broken)
    monkeypatch.setattr(session_read, "read", lambda *a: broken(None))
    assert await sync_to_async(sessions.session_denial)(key, user_id) == sessions.SESSION_GONE
