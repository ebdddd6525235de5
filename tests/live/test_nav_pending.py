"""The navigation's "Waiting for you": the rounds awaiting a person's answer, counted server-side
on every page (one query) and pushed to their sockets that watch them (:mod:`mrtrweb.consent.pending`,
``pending.watch`` in :class:`mrtrweb.live.consumers.OperationsConsumer`), under the access checks of
:mod:`mrtrweb.tenancy.access`: another user's rounds, a tenant left, a server disabled are never counted."""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from mrtrweb import operations
from mrtrweb.consent import pending
from mrtrweb.models import McpServer, Membership, Operation
from tests.sockets import csrf_client, open_socket

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _start_deploy(client, server) -> str:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "2"})
    assert resp.status_code == 302, resp.content.decode()[:300]
    return resp["Location"].rstrip("/").split("/")[-1]


async def _next_pending(ws) -> dict:
    """The next ``pending`` message on ``ws`` (operation messages before it are skipped)."""
    while True:
        msg = await ws.receive_json_from(timeout=10)
        if msg.get("type") == "pending":
            return msg


async def _watching(client):
    ws = open_socket(client)
    assert (await ws.connect())[0]
    await ws.send_json_to({"type": "pending.watch"})
    return ws


async def test_a_watching_socket_gets_its_users_rounds_as_they_come_and_go(seeded):
    alice = await csrf_client(seeded["users"]["alice"])
    bob = await csrf_client(seeded["users"]["bob"])
    ws_alice, ws_bob = await _watching(alice), await _watching(bob)
    assert (await _next_pending(ws_alice)) == {"type": "pending", "count": 0, "rounds": []}
    assert (await _next_pending(ws_bob))["count"] == 0

    op_id = await _start_deploy(alice, seeded["servers"]["acme"])
    await operations.wait_idle()
    msg = await _next_pending(ws_alice)
    assert msg["count"] == 1
    [r] = msg["rounds"]
    assert r["id"] == op_id and r["tool"] == "deploy" and r["server"] == seeded["servers"]["acme"].name
    assert r["url"] == f"/mcp/operations/{op_id}/" and r["method"] == "tools/call"
    op = await Operation.objects.aget(pk=op_id)
    assert r["expires"] == op.round_expires_at.isoformat()
    assert await ws_bob.receive_nothing(timeout=0.3)  # bob's socket never hears of alice's round

    # the server-rendered count of every page says the same, for alice only
    page = (await alice.get("/mcp/")).content.decode()
    assert 'class="nav-pending-count">1<' in page
    assert f'href="/mcp/operations/{op_id}/"' not in page.split("<main")[0]  # the list is pushed, not rendered
    assert 'class="nav-pending-count">0<' in (await bob.get("/mcp/")).content.decode()
    waiting = (await alice.get("/mcp/waiting/")).content.decode()
    expires_utc = op.round_expires_at.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    assert f'href="/mcp/operations/{op_id}/"' in waiting and f'datetime="{expires_utc}"' in waiting
    assert f'/mcp/operations/{op_id}/' not in (await bob.get("/mcp/waiting/")).content.decode()

    # answered (declined): the round left awaiting_input, the count drops
    resp = await alice.post(f"/mcp/operations/{op_id}/answer/", {"action": "decline", "round": "1"})
    assert resp.status_code == 302, resp.content.decode()[:300]
    await operations.wait_idle()
    assert (await _next_pending(ws_alice)) == {"type": "pending", "count": 0, "rounds": []}
    assert 'class="nav-pending-count">0<' in (await alice.get("/mcp/")).content.decode()
    for ws in (ws_alice, ws_bob):
        await ws.disconnect()


async def test_a_socket_that_does_not_watch_gets_no_pending_message(seeded):
    alice = await csrf_client(seeded["users"]["alice"])
    ws = open_socket(alice)
    assert (await ws.connect())[0]
    await _start_deploy(alice, seeded["servers"]["acme"])
    await operations.wait_idle()
    msg = await ws.receive_json_from(timeout=10)
    assert msg["type"] == "operation" and msg["status"] == "awaiting_input"
    assert await ws.receive_nothing(timeout=0.3)
    await ws.disconnect()


def _raw(sql: str, *params) -> None:
    """SQL past the ORM's signals (what access.py's checks must catch on their own)."""
    with connection.cursor() as cur:
        cur.execute(sql, params)


async def test_access_that_ended_is_never_counted_even_past_the_signals(seeded):
    alice_user = seeded["users"]["alice"]
    alice = await csrf_client(alice_user)
    op_id = await _start_deploy(alice, seeded["servers"]["acme"])
    await operations.wait_idle()
    count, rounds = await sync_to_async(pending.waiting_rounds)(alice_user.pk)
    assert count == 1 and [r["id"] for r in rounds] == [op_id]
    assert (await sync_to_async(pending.nav_summary)(alice_user.pk))["count"] == 1
    server = seeded["servers"]["acme"]

    # the server disabled with no signal: not counted, though the row still awaits input
    await sync_to_async(_raw)(f"UPDATE {McpServer._meta.db_table} SET enabled = %s WHERE id = %s", False, server.pk)
    assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.AWAITING_INPUT
    assert await sync_to_async(pending.waiting_rounds)(alice_user.pk) == (0, [])
    assert (await sync_to_async(pending.nav_summary)(alice_user.pk))["count"] == 0
    await sync_to_async(_raw)(f"UPDATE {McpServer._meta.db_table} SET enabled = %s WHERE id = %s", True, server.pk)
    assert (await sync_to_async(pending.waiting_rounds)(alice_user.pk))[0] == 1

    # the membership removed with no signal: not counted, no tenant-admin link either
    await sync_to_async(_raw)(f"DELETE FROM {Membership._meta.db_table} WHERE user_id = %s AND tenant_id = %s",
                              alice_user.pk, server.tenant_id)
    assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.AWAITING_INPUT
    assert await sync_to_async(pending.waiting_rounds)(alice_user.pk) == (0, [])
    assert await sync_to_async(pending.nav_summary)(alice_user.pk) == {"count": 0, "admin_tenants": []}


async def test_a_revoked_membership_stops_the_count_and_its_push(seeded):
    alice_user = seeded["users"]["alice"]
    alice = await csrf_client(alice_user)
    ws = await _watching(alice)
    assert (await _next_pending(ws))["count"] == 0
    op_id = await _start_deploy(alice, seeded["servers"]["acme"])
    await operations.wait_idle()
    assert (await _next_pending(ws))["count"] == 1

    # through the ORM: the revocation ends the round (denied) and closes the socket (4403)
    await Membership.objects.filter(user=alice_user, tenant_id=seeded["servers"]["acme"].tenant_id).adelete()
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.DENIED
    while True:
        out = await ws.receive_output(timeout=5)
        if out["type"] == "websocket.close":
            assert out.get("code") == 4403
            break
        msg = __import__("json").loads(out["text"])
        assert not (msg.get("type") == "pending" and msg["count"]), msg  # never counted again
    # a new socket (the page reconnects) is sent nothing of it
    ws2 = await _watching(alice)
    assert (await _next_pending(ws2)) == {"type": "pending", "count": 0, "rounds": []}
    assert 'class="nav-pending-count">0<' in (await alice.get("/mcp/")).content.decode()
    await ws2.disconnect()


async def test_the_nav_links_each_administered_tenants_history(seeded):
    alice = await csrf_client(seeded["users"]["alice"])  # admin of acme
    carol = await csrf_client(seeded["users"]["carol"])  # member of acme
    page = (await alice.get("/mcp/")).content.decode()
    nav = page.split("</nav>")[0]
    assert 'href="/mcp/tenants/acme/history/"' in nav and 'href="/mcp/history/"' in nav
    nav = (await carol.get("/mcp/")).content.decode().split("</nav>")[0]
    assert "/tenants/" not in nav and 'href="/mcp/history/"' in nav


def test_the_nav_count_costs_one_query(seeded, django_assert_num_queries):
    """The navigation of every page: the waiting count and the administered tenants in one query."""
    from django.template.loader import render_to_string

    alice_user = seeded["users"]["alice"]
    with django_assert_num_queries(1):
        html = render_to_string("mrtrweb/_nav.html", {"user": alice_user})
    assert 'class="nav-pending-count">0<' in html and "/tenants/acme/history/" in html


def test_pushed_names_are_made_visible_and_bounded():
    assert pending._name("evil\u202eexe.txt") == "evil⟨U+202E⟩exe.txt"  # a bidi override shown, not obeyed
    long = pending._name("x" * 500)
    assert len(long) == pending.NAME_CHARS and long.endswith("…")


def test_a_database_outage_leaves_the_count_to_the_socket(seeded, monkeypatch):
    from django.db import OperationalError
    from django.template.loader import render_to_string

    def down(user_id):
        raise OperationalError("database is down")

    monkeypatch.setattr(pending, "nav_summary", down)
    html = render_to_string("mrtrweb/_nav.html", {"user": seeded["users"]["alice"]})
    assert '<span class="nav-pending-count"></span>' in html and 'id="nav-pending"' in html


async def test_watching_twice_costs_nothing_more(seeded):
    alice = await csrf_client(seeded["users"]["alice"])
    ws = await _watching(alice)
    assert (await _next_pending(ws))["count"] == 0
    await ws.send_json_to({"type": "pending.watch"})
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=5)) == {"type": "pong"}  # no second pending before it
    await ws.disconnect()
