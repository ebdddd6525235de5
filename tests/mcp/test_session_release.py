"""A 2026-07-28 round waiting for the person keeps no MCP session open in the worker
(:func:`mrtrweb.servers.connections.release_while_waiting`, :meth:`mrtrweb.mcp.ConnectionPool.release`):
the session is closed once idle, and the retry opens a new one -- the answer still reaches the
server exactly once. A 2025-11-25 session (the server's request in flight on it) is never released,
and neither is a connection used again meanwhile.

Against the real demo servers on loopback, through the Django app in-process."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.test import AsyncClient

from mrtrweb.servers import connections
from mrtrweb import operations
from mrtrweb.mcp import ConnectionPool
from mrtrweb.models import AuditEvent, Operation
from tests.answering import DEPLOY_OK, post_answer, signed_client
from tests.legacy_rounds import DEPLOY_OK as LEGACY_OK

pytestmark = [pytest.mark.django_db(transaction=True)]

RELEASE_S = 0.3


@pytest.fixture
def quick_release(monkeypatch):
    monkeypatch.setattr(connections, "release_after_s", lambda: RELEASE_S)


async def _start(client: AsyncClient, server, tool: str, args: dict[str, str]) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    deadline = time.monotonic() + 15
    while op.status == Operation.Status.RUNNING:
        assert time.monotonic() < deadline, "the round never arrived"
        await asyncio.sleep(0.05)
        op = await Operation.objects.select_related("server").aget(pk=op.pk)
    return op


async def _answer(client: AsyncClient, op: Operation, fields: dict[str, object]):
    await client.get(f"/mcp/operations/{op.id}/")  # the card is seen (the consent receipt)
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/",
                             dict(fields, action="accept", round=str(op.rounds)))
    await operations.wait_idle(timeout=15)
    return resp


async def _released(pool: ConnectionPool, at_least: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while pool.released < at_least and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return pool.released


async def test_a_released_session_round_is_answered_once_and_the_retry_reaches_the_server_once(
        seeded, quick_release):
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await signed_client(alice)
    op = await _start(client, server, "deploy", {"env": "production", "replicas": "3"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    pool = connections.pool()
    key = (str(alice.pk), connections.server_key(server))
    kept = pool._slots[key].connection
    assert await _released(pool, 1) == 1
    assert key not in pool._slots and not kept.is_open  # the worker holds no session for the round
    discovers = len(mcp.log.records("server/discover"))

    resp = await _answer(client, op, DEPLOY_OK)
    assert resp.status_code == 302
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert "Deployed 3 replica(s) to production" in op.result["content"][0]["text"]
    # the retry went out once, on a session opened for it
    assert mcp.calls[("deploy", False)] == 1 and mcp.calls[("deploy", True)] == 1
    assert len(mcp.log.records("server/discover")) == discovers + 1
    events = [e.event async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]
    assert events.count("completed") == 1, events
    # a second answer is refused: nothing more reaches the server
    again = await post_answer(client, f"/mcp/operations/{op.id}/answer/",
                              dict(DEPLOY_OK, action="accept", round=str(op.rounds)))
    await operations.wait_idle(timeout=15)
    assert again.status_code in (302, 409), again.status_code
    assert mcp.calls[("deploy", True)] == 1


async def test_a_connection_used_again_meanwhile_is_not_released(seeded, monkeypatch):
    # the page must use the connection again *within* the release window: a window of 0.3 s can be
    # over before the test sees the round on a loaded machine (then the release is right), so this
    # test's window is long enough to be inside it, and the wait afterwards outlasts it
    # (ci33 failed here: the release's timer fired later than the page's hand-out came after the ask,
    # and the pool judged idleness by duration; it judges by when now. The test says so when the page
    # itself came after the window.)
    window_s = 3.0
    monkeypatch.setattr(connections, "release_after_s", lambda: window_s)
    scheduled: list[float] = []  # when the release was asked for (the round's result came)
    release = ConnectionPool.release

    def noted(self, *args, **kwargs):
        scheduled.append(time.monotonic())
        return release(self, *args, **kwargs)

    monkeypatch.setattr(ConnectionPool, "release", noted)
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = await signed_client(alice)
    op = await _start(client, server, "deploy", {"env": "production", "replicas": "3"})
    assert op.status == Operation.Status.AWAITING_INPUT
    pool = connections.pool()
    conn = await connections.connection_for(alice, server)  # a page of the same server, at once
    used_after_s = time.monotonic() - scheduled[0]
    assert used_after_s < window_s, f"the page came {used_after_s:.1f} s after the release was asked: not within it"
    await asyncio.sleep(window_s - used_after_s + 1.0)
    assert pool.released == 0 and conn.is_open
    assert pool._slots[(str(alice.pk), connections.server_key(server))].connection is conn


async def test_a_legacy_session_is_never_released(legacy, quick_release):
    alice, server, mcp = legacy["users"]["alice"], legacy["servers"]["acme"], legacy["mcp"]
    client = await signed_client(alice)
    op = await _start(client, server, "legacy_deploy", {"env": "prod"})
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1
    pool = connections.pool()
    await asyncio.sleep(RELEASE_S * 3)
    assert pool.released == 0
    # a 2025-11-25 connection is not released even when asked directly
    shared = await connections.connection_for(alice, server)
    assert not pool.release(str(alice.pk), connections.server_key(server), shared, after_s=0.05,
                            stateless=connections.STATELESS_VERSIONS)
    resp = await _answer(client, op, LEGACY_OK)
    assert resp.status_code == 302
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert len(mcp.log.responses()) == 1  # the held call got the person's answer, once
