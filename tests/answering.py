"""Answering a consent card as a person does, for tests that post through Django's test client.

Accept with valid answers sends nothing: the server shows the review of the answers with a signed
``review_token``; Send (the same answers and the token) sends them. :func:`post_answer` does both
steps for ``action="accept"`` and returns the response to Send -- or the response to Accept when
it is not a review (invalid answers, a closed round, a store outage...), so callers assert on the
outcome exactly as before.
"""

from __future__ import annotations

import asyncio
import html
import re
import time
from typing import Any

from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import Operation

REVIEW_TOKEN = re.compile(r'<input type="hidden" name="review_token" value="([^"]*)">')


def review_token(response: Any) -> str | None:
    """The review token of a review page, or ``None`` when the response is not a review."""
    if response.status_code != 200:
        return None
    m = REVIEW_TOKEN.search(response.content.decode())
    return html.unescape(m.group(1)) if m else None


async def post_review(client: Any, url: str, data: dict[str, Any]) -> tuple[Any, str | None]:
    """POST Accept; returns ``(response, review token or None)``."""
    resp = await client.post(url, dict(data, action="accept"))
    return resp, review_token(resp)


async def post_answer(client: Any, url: str, data: dict[str, Any]) -> Any:
    """POST ``data`` to an answer ``url``; for Accept, through the review and Send."""
    if data.get("action") != "accept":
        return await client.post(url, data)
    resp, token = await post_review(client, url, data)
    if token is None:
        return resp
    return await client.post(url, dict(data, action="send", review_token=token))


async def waiting_round(seeded: dict[str, Any], provider: str = "gitlab", *, shown: bool = False):
    """Alice's ``connect_account`` call (the seeded demo fixture) with its round waiting for her:
    ``(AsyncClient signed in as alice, Operation)``; ``shown``: her page was read (the card
    displayed, its consent receipt written)."""
    from django.test import AsyncClient

    from mrtrweb import operations
    from mrtrweb.models import Operation

    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/connect_account/", {"arg-provider": provider})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.select_related("server", "tenant").aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT and op.round_expires_at is not None
    if shown:
        assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    return client, op


async def until(op: Any, what: Any, timeout: float = 15.0) -> Any:
    """Poll the operation's row (server, tenant and user loaded) until ``what(op)``; returns it.
    AssertionError after ``timeout`` seconds, naming the status and error it is stuck in."""
    from mrtrweb.models import Operation

    deadline = time.monotonic() + timeout
    while True:
        op = await Operation.objects.select_related("server", "tenant", "user").aget(pk=op.pk)
        if what(op):
            return op
        assert time.monotonic() < deadline, f"operation stuck in {op.status} ({op.error_code}: {op.error_message})"
        await asyncio.sleep(0.05)


# -- a call and its card through the test client (a person's steps) ---------------------------------


async def signed_client(user) -> AsyncClient:
    """A test client signed in as ``user``."""
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def start_call(client: AsyncClient, server, tool: str, args: dict[str, str]) -> Operation:
    """Call ``tool`` of ``server`` from its form (arguments by name), wait for the round's work;
    the operation."""
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    await operations.wait_idle()
    return await Operation.objects.select_related("server").aget(pk=op_id)


async def answer_card(client: AsyncClient, op: Operation, action: str, fields: dict[str, object] | None = None,
                      round_no: int | None = None):
    """Look at the card (as a person does: that writes the consent receipt), then answer it."""
    await client.get(f"/mcp/operations/{op.id}/")
    data: dict[str, object] = {"action": action, "round": str(round_no or op.rounds)}
    data.update(fields or {})
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", data)
    await operations.wait_idle()
    return resp


async def reload_op(op: Operation) -> Operation:
    """``op`` read again (with its server)."""
    return await Operation.objects.select_related("server").aget(pk=op.pk)


#: valid answers to the demo server's deploy card
DEPLOY_OK = {
    "in-confirm_deploy-confirm": "on",
    "in-confirm_deploy-ticket": "CHG-1042",
    "in-confirm_deploy-email": "ops@example.test",
    "in-confirm_deploy-window": "3",
    "in-confirm_deploy-region": "us-east-1",
    "in-confirm_deploy-notify": ["email", "slack"],
}


#: valid answers to the demo server's onboard_team card (two requests in one card)
ONBOARD_OK = {
    "in-profile-display_name": "Core ops",
    "in-profile-budget": "99.5",
    "in-profile-homepage": "https://core.example.test/",
    "in-profile-channels": ["chat", "wiki"],
    "in-profile-size": "medium",
}


def answer_url(op: Operation) -> str:
    """Where the card of ``op`` posts its answer."""
    return f"/mcp/operations/{op.id}/answer/"


async def reviewed_page(client, op, fields, round_no="1"):
    """Show the card, then Accept: returns ``(review page html, token)``."""
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    resp, token = await post_review(client, answer_url(op), dict(fields, round=round_no))
    assert resp.status_code == 200 and token, resp.content.decode()[:2000]
    return resp.content.decode(), token
