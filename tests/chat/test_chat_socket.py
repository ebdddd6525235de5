"""A conversation's pushes through the per-user WebSocket (the real consumer, in process): the reply's
pieces and the "changed" hint reach the owner's sockets only, as data; a malformed push is dropped;
nothing is pushed once the session ended."""

from __future__ import annotations

import pytest

from mrtrweb.chat import push
from mrtrweb.models import Conversation
from tests.sockets import csrf_client, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_the_reply_streams_to_its_owner_only(seeded):
    alice_user = seeded["users"]["alice"]
    conv = await Conversation.objects.acreate(tenant=seeded["servers"]["acme"].tenant, user=alice_user)
    alice, carol = await csrf_client(alice_user), await csrf_client(seeded["users"]["carol"])
    sockets = {"alice": open_socket(alice), "carol": open_socket(carol)}
    for ws in sockets.values():
        assert (await ws.connect())[0]
    streamer = push.Streamer(alice_user.pk, conv.pk)
    await streamer.on_text("<b>Hello</b> ")
    await streamer.on_text("world")
    await streamer.flush()
    got = []
    while True:
        msg = await sockets["alice"].receive_json_from(timeout=3)
        got.append(msg["text"])
        assert msg == {"type": "chat.delta", "conversation": str(conv.pk), "text": msg["text"]}
        if "".join(got) == "<b>Hello</b> world":
            break
    await push.changed(alice_user.pk, conv.pk)
    assert await sockets["alice"].receive_json_from(timeout=3) == {"type": "chat.update", "conversation": str(conv.pk)}
    assert await sockets["carol"].receive_nothing(timeout=0.3)  # same tenant, another person
    # a push whose conversation is not an id is dropped, the socket lives on
    from channels.layers import get_channel_layer

    await get_channel_layer().group_send(f"mrtrweb.user.{alice_user.pk}", {"type": "chat.update",
                                                                           "conversation": "../../x"})
    assert await sockets["alice"].receive_nothing(timeout=0.3)
    # signed out: nothing more is pushed on that socket
    await alice.post("/accounts/logout/")
    await push.changed(alice_user.pk, conv.pk)
    out = await sockets["alice"].receive_output(timeout=3)
    assert out["type"] == "websocket.close"
    for ws in sockets.values():
        await ws.disconnect()
