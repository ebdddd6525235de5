"""What one browser round costs on the web edge, counted (not timed): SQL queries and
``sync_to_async`` thread hops of each phase a person's browser goes through -- the start POST,
the consumer's push handling until the consent card is sent, the answer POSTs (Accept: the
review; Send: the retry), and the consumer's push handling until the result is sent.

Queries run in worker threads, so Django's connection-local ``CaptureQueriesContext`` misses
them: ``CursorWrapper.execute``/``executemany`` and ``SyncToAsync.__call__`` are patched for the
whole process and each call is charged to the :class:`Meter` of the context it runs in (asgiref
runs a hop in a copy of its caller's context; the operation's drive loop runs in a fresh context,
:mod:`mrtrweb.operations.runtime`, so its work is charged to no phase here).

The ceilings are what the web path reached (issue 16); a regression above them fails.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import time

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient
from django.test.client import AsyncClientHandler

from mrtrweb import operations
from mrtrweb.models import AuditEvent, Operation
from mrtrweb.runtime.onehop import OneHopMixin
from mrtrweb.site.asgi import application
from tests.answering import DEPLOY_OK, review_token

pytestmark = [pytest.mark.django_db(transaction=True)]


class _OneHopClientHandler(OneHopMixin, AsyncClientHandler):
    """The test client's handler loading MIDDLEWARE as the site's ASGI handler does."""


@dataclasses.dataclass
class Meter:
    queries: int = 0
    hops: int = 0
    #: what was counted, in order (the SQL's first words, the hop's function), for the failure message
    seen: list[str] = dataclasses.field(default_factory=list)

    def snapshot(self) -> tuple[int, int]:
        return self.queries, self.hops


_meter: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("web_path_meter", default=None)


@pytest.fixture
def counting(monkeypatch):
    """Charge every query and thread hop to the :class:`Meter` of its context (if any)."""
    from asgiref.sync import SyncToAsync
    from django.db.backends import utils as db_utils

    def counted_sql(fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            m = _meter.get()
            if m is not None:
                m.queries += 1
                m.seen.append("sql " + " ".join(str(a[1]).split()[:8]))
            return fn(*a, **k)
        return inner

    real_call = SyncToAsync.__call__

    @functools.wraps(real_call)
    async def counted_hop(self, *a, **k):
        m = _meter.get()
        if m is not None:
            m.hops += 1
            fn = getattr(self, "func", None)
            m.seen.append("hop " + getattr(fn, "__qualname__", type(fn).__name__))
        return await real_call(self, *a, **k)

    for name in ("execute", "executemany"):
        monkeypatch.setattr(db_utils.CursorWrapper, name, counted_sql(getattr(db_utils.CursorWrapper, name)))
    monkeypatch.setattr(SyncToAsync, "__call__", counted_hop)


async def _metered(meter: Meter, coro_fn, *args, **kwargs):
    """Await ``coro_fn(*args, **kwargs)`` with ``meter`` as the context's meter."""
    token = _meter.set(meter)
    try:
        return await coro_fn(*args, **kwargs)
    finally:
        _meter.reset(token)


async def _socket(client: AsyncClient, meter: Meter) -> WebsocketCommunicator:
    """The page's WebSocket, connected; the consumer runs with ``meter`` as its context's meter
    (the communicator runs the application in an empty context: the meter is set inside it)."""
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())]

    async def metered_app(scope, receive, send):
        await _metered(meter, application, scope, receive, send)

    ws = WebsocketCommunicator(metered_app, "/ws/mrtrweb/", headers=headers)
    assert (await ws.connect())[0]
    # as the operation page does (operations.js): its navigation's "Waiting for you" is pushed too
    await ws.send_json_to({"type": "pending.watch"})
    assert (await ws.receive_json_from(timeout=10))["type"] == "pending"
    return ws


async def _until_status(ws: WebsocketCommunicator, op_id: str, status: str) -> dict:
    while True:
        msg = await ws.receive_json_from(timeout=10)
        if msg.get("type") == "operation" and msg["id"] == op_id and msg["status"] == status:
            return msg


async def _browser_round(seeded) -> dict[str, tuple[int, int]]:
    """One round as the browser benchmark does it (mrtrweb.bench.browser); per phase
    ``(queries, hops)``."""
    client = AsyncClient()
    # the site's handler batches the middleware (mrtrweb.site.asgi, mrtrweb.runtime.onehop): so does this client's
    client.handler = _OneHopClientHandler(enforce_csrf_checks=False)
    await client.aforce_login(seeded["users"]["alice"])
    await client.get("/mcp/")  # the CSRF cookie
    push = Meter()
    ws = await _socket(client, push)
    server = seeded["servers"]["acme"]
    costs: dict[str, tuple[int, int]] = {}
    try:
        before = push.snapshot()
        start = Meter()
        resp = await _metered(start, client.post, f"/mcp/servers/{server.pk}/tools/deploy/",
                              {"arg-env": "staging", "arg-replicas": "2"})
        assert resp.status_code == 302, resp.content.decode()[:500]
        op_id = resp["Location"].rstrip("/").split("/")[-1]
        costs["start_post"] = start.snapshot()
        card = await _until_status(ws, op_id, "awaiting_input")
        assert 'class="card"' in card["html"]
        await operations.wait_idle()
        # the consumer writes the card's consent receipt just after the card went out
        deadline = time.monotonic() + 10
        while not await AuditEvent.objects.filter(operation_id=op_id, event="shown").aexists():
            assert time.monotonic() < deadline, "no consent receipt for the pushed card"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the receipt's hop returned to the consumer
        costs["push_to_card"] = (push.queries - before[0], push.hops - before[1])
        assert await AuditEvent.objects.filter(operation_id=op_id, event="shown").acount() == 1

        url = f"/mcp/operations/{op_id}/answer/"
        data = dict(DEPLOY_OK, action="accept", round="1")
        review = Meter()
        resp = await _metered(review, client.post, url, data)
        token = review_token(resp)
        assert token, resp.content.decode()[:500]
        costs["review_post"] = review.snapshot()
        before = push.snapshot()
        send = Meter()
        resp = await _metered(send, client.post, url, dict(data, action="send", review_token=token))
        assert resp.status_code == 302, resp.content.decode()[:500]
        costs["send_post"] = send.snapshot()
        await _until_status(ws, op_id, "completed")
        await operations.wait_idle()
        costs["push_to_completed"] = (push.queries - before[0], push.hops - before[1])
        assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.COMPLETED
    finally:
        await ws.disconnect()
    return costs


#: (queries, hops) at most, per phase of one browser round on the test settings (SQLite, database
#: binding store): the web edge's share, the drive loop and the MCP exchange run outside these
#: contexts. Before issue 16's web-path work: start 11/31, push to card 16/5, review 9/27, send
#: 29/35, push to completed 8/10 (each request paid 14 middleware hops, each push 3-4 hops)
#: Issue 17 added one query (no hop) to three phases: the navigation's "Waiting for you" of every
#: page (mrtrweb.consent.pending) -- the review page renders it, and the page's socket re-reads the waiting
#: rounds, inside the push's own hop, when the operation enters awaiting_input (the card) and when
#: it leaves it (running, after Send).
#: Issue 30 (session 19): the operation's row and its access check in one hop for every answer POST
#: (mrtrweb.tenancy.reads, operations.operation_for): review 11 -> 10 hops, Send 12 -> 11; the
#: ceilings lowered to what the path does now (start and Send had come down earlier unpinned).
#: Issue 30 (session 22): a push reads the socket's session and user in one statement
#: (mrtrweb.live.session_read), the operation with its access check in one on PostgreSQL
#: (access.operation_and_access, also every answer POST), writes the card's receipt without looking
#: for it first there (consent.panels.record_pushed), and a card of form requests asks no query
#: whether it came from a -32042 error; a server page's server and access check in one hop (one
#: statement on PostgreSQL: access.server_for), an answer POST's operation, access and round in one
#: (operations.operation_and_state). (Loading a signed-in request's user in the middleware batch's
#: own hop saved one more per request, but doubled every page's database waits during an outage --
#: ci36, tests/runtime/test_outages.py -- and was taken out.)
#: Counted on each database the suite runs (SQLite adds its savepoints; PostgreSQL joins more).
CEILINGS_BY_VENDOR = {
    "sqlite": {
        "start_post": (8, 10),
        "push_to_card": (14, 2),  # one hop for the card, one for its receipt after it (looked for first here)
        "review_post": (8, 9),
        "send_post": (20, 10),  # incl. the look for the card's receipt (views.answers._await_receipt)
        "push_to_completed": (7, 2),  # two pushes (running, completed), one hop each
    },
    "postgresql": {
        "start_post": (4, 10),
        "push_to_card": (5, 2),  # session+user, operation+access, the round, the receipt, the waiting rounds
        "review_post": (7, 9),
        "send_post": (7, 10),
        "push_to_completed": (5, 2),  # two pushes (session+user, operation+access each), the waiting rounds
    },
}


async def test_browser_round_queries_and_hops_stay_within_their_ceilings(seeded, counting, capsys):
    await _browser_round(seeded)  # warm: first-use imports, template loading, connections
    costs = await _browser_round(seeded)
    with capsys.disabled():
        print("\nweb path (queries, hops) per phase:", costs)
    from django.db import connection

    ceilings = CEILINGS_BY_VENDOR[connection.vendor]
    over = {k: (costs[k], ceilings[k]) for k in ceilings
            if costs[k][0] > ceilings[k][0] or costs[k][1] > ceilings[k][1]}
    assert not over, f"phases over their ceilings (counted, ceiling): {over}"
    assert all(q > 0 for q, _ in costs.values()), costs  # the meter sees each phase's work
