"""Helpers of the chat tests (a support module, public names; the ``chat`` fixture is in
``conftest.py``): a conversation's state awaited, its proposals, a signed-in client, a message sent."""

from __future__ import annotations

import asyncio

from django.test import AsyncClient

from mrtrweb.models import Conversation, Proposal


async def settle(conv_id, states=("idle", "failed"), timeout=20.0) -> Conversation:
    """The conversation once it is in one of ``states`` (the background steps awaited)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        conv = await Conversation.objects.aget(pk=conv_id)
        if conv.state in states:
            return conv
        assert asyncio.get_running_loop().time() < deadline, (conv.state, conv.error_code)
        await asyncio.sleep(0.1)


async def pending(conv_id, n: int, timeout=20.0) -> list[Proposal]:
    """The last ``n`` proposals once there are ``n`` and the step that made them is saved."""
    deadline = asyncio.get_running_loop().time() + timeout
    while await Proposal.objects.filter(conversation_id=conv_id).acount() < n:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    await settle(conv_id, ("waiting", "failed", "idle"), timeout)
    return [p async for p in Proposal.objects.filter(conversation_id=conv_id).select_related("server")
            .order_by("created_at", "position")][-n:]


async def client_for(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def send(client, conv, text):
    r = await client.post(f"/mcp/chat/{conv.pk}/send/", {"text": text})
    assert r.status_code == 302, r.status_code
