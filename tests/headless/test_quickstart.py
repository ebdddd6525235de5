"""The headless client's start in one thread hop (mrtrweb.headless.quickstart, issue 30): once this
process knows the tenant's server for the URL and keeps the person's tools listing of it, the
member check and the start are one hop -- and still a non-member is refused before anything is
started or sent, a server replaced since is not started on, and a tool the listing refuses never
takes that way. Against the demo MCP server on loopback (its listing is kept: it declares
``tools.listChanged`` and acknowledges the listen stream)."""

from __future__ import annotations

import collections

import pytest
from asgiref.sync import SyncToAsync, sync_to_async

from mrtrweb.headless import client as headless
from mrtrweb.headless import quickstart
from mrtrweb.headless.client import ConsentPolicy, HeadlessError
from mrtrweb.mcp.connection import McpConnection
from mrtrweb.models import McpServer, Membership, Operation

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _round(user, server, url=None):
    return await headless.arun(url=url or server.url, user=user, tenant=server.tenant, method="tools/call",
                               params={"name": "wait_then_ask", "arguments": {"seconds": 0}},
                               consent=ConsentPolicy.parse("accept-defaults"))


@pytest.fixture
def watched(monkeypatch):
    """The thread hops (by the function each runs) and the MCP requests (by method) from now on."""
    seen = {"hops": [], "mcp": []}
    hop, send = SyncToAsync.__call__, McpConnection.send

    async def counted_hop(self, *args, **kwargs):
        seen["hops"].append(getattr(self.func, "__qualname__", "?"))
        return await hop(self, *args, **kwargs)

    async def counted_send(self, method, *args, **kwargs):
        seen["mcp"].append(method)
        return await send(self, method, *args, **kwargs)

    def install():
        monkeypatch.setattr(SyncToAsync, "__call__", counted_hop)
        monkeypatch.setattr(McpConnection, "send", counted_send)
        return seen

    return install


async def _warm(alice, server):
    for _ in range(2):  # the server row kept, and the tools listing once the listen stream was acknowledged
        assert (await _round(alice, server)).status == "completed"


async def test_a_warm_start_is_one_hop_with_the_member_check_first(seeded, watched):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    await _warm(alice, server)
    seen = watched()
    outcome = await _round(alice, server)
    assert outcome.status == "completed" and outcome.rounds == 1
    assert seen["hops"][0] == "_start_after" and "_member_server" not in seen["hops"], seen["hops"]
    assert "_start_sync" not in seen["hops"] and seen["mcp"] == ["tools/call", "tools/call"], seen


async def test_a_member_removed_since_is_refused_in_that_hop_and_nothing_is_started_or_sent(seeded, watched):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    await _warm(alice, server)
    before = await Operation.objects.filter(user=alice).acount()
    await Membership.objects.filter(user=alice, tenant=server.tenant).adelete()
    seen = watched()
    with pytest.raises(HeadlessError) as refused:
        await _round(alice, server)
    assert refused.value.code == "not_a_member"
    assert seen["hops"][:1] == ["_start_after"] and seen["mcp"] == [], seen
    assert await Operation.objects.filter(user=alice).acount() == before  # no row


async def test_a_server_replaced_since_is_not_started_on_the_two_hop_way_goes_on_with_the_new_one(seeded, watched):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    await _warm(alice, server)
    url, tenant = server.url, server.tenant

    @sync_to_async
    def replace() -> McpServer:
        McpServer.objects.filter(pk=server.pk).delete()
        return McpServer.objects.create(tenant=tenant, name="Demo server again", url=url)

    new = await replace()
    seen = watched()
    outcome = await _round(alice, server, url=url)
    assert outcome.status == "completed", outcome
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert op.server_id == new.pk != server.pk
    # the hop found another row: nothing started there; the listing judged, then the start's own hop
    assert seen["hops"][:2] == ["_start_after", "_start_sync"], seen["hops"]


async def test_a_server_whose_settings_changed_since_takes_the_two_hop_way(seeded, watched):
    """The row is the same but its settings changed (here its name, part of the configuration
    digest the pooled connection was made under): the hop finds the row's settings are not those
    the kept listing was judged under and starts nothing; the listing is judged again on the
    connection the pool makes now, then the start's own hop. The next run finds the new settings
    known and the new connection's listing kept: one hop again."""
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    await _warm(alice, server)
    await McpServer.objects.filter(pk=server.pk).aupdate(name="Demo server, renamed")
    seen = watched()
    outcome = await _round(alice, server)
    assert outcome.status == "completed", outcome
    assert seen["hops"][:2] == ["_start_after", "_start_sync"], seen["hops"]


async def test_a_row_pointed_at_another_url_never_lets_an_app_only_tool_through(seeded):
    """An admin points the tenant's server row at another server whose ``lookup`` is for its MCP App
    alone; another member's run makes this process know the new URL's row. The first person's pooled
    connection still lists the old URL's tools (no ``lookup``): it must not judge the new URL's
    tool -- the call is refused (``app_only``), nothing sent, no operation."""
    from tests import apps_server

    alice, carol, server = seeded["users"]["alice"], seeded["users"]["carol"], seeded["servers"]["acme"]
    tenant = server.tenant
    other = apps_server.serve()
    try:
        await _warm(alice, server)
        await McpServer.objects.filter(pk=server.pk).aupdate(url=other.url)

        async def lookup(user):
            return await headless.arun(url=other.url, user=user, tenant=tenant, method="tools/call",
                                       params={"name": "lookup", "arguments": {"q": "x"}},
                                       consent=ConsentPolicy.parse("accept-defaults"))

        assert (await lookup(carol)).status == "app_only"  # (and the row for the new URL is known now)
        outcome = await lookup(alice)
        assert outcome.status == "app_only" and not outcome.operation_id, outcome
        assert not await Operation.objects.filter(name="lookup").aexists()
    finally:
        other.stop()


def test_only_a_kept_listing_that_lets_the_tool_be_called_takes_the_one_hop_way(monkeypatch):
    """Judged from what the person's pooled connection keeps: no listing kept, or one that says the
    tool is for its app alone or must run as a task the server cannot run: the two-hop way (its
    refusal comes after the member check)."""
    from mrtrweb.servers import connections

    class Kept:
        server_capabilities: dict = {}

        def __init__(self, tools):
            self.tools = tools

        def tools_kept(self):
            return self.tools

    user, server = type("U", (), {"pk": 7})(), McpServer(pk=3, url="http://127.0.0.1:9/mcp")
    listing = [{"name": "plain"}, {"name": "refresh", "_meta": {"ui": {"visibility": ["app"]}}},
               {"name": "long", "execution": {"taskSupport": "required"}}]
    cases = [(Kept(listing), "plain", True), (Kept(listing), "refresh", False), (Kept(listing), "long", False),
             (Kept(None), "plain", False), (None, "plain", False)]
    for conn, name, allowed in cases:
        monkeypatch.setattr(connections, "kept_connection", lambda user, server, conn=conn: conn)
        assert quickstart._listing_allows(user, server, "tools/call", name) is allowed, (name, conn)
    assert quickstart._listing_allows(user, server, "resources/read", "anything") is True


def test_the_kept_rows_are_bounded():
    quickstart.forget()
    for k in range(quickstart.KNOWN_MAX + 5):
        quickstart.remember(1, f"http://127.0.0.1:9/{k}", McpServer(pk=k))
    assert len(quickstart._known) <= quickstart.KNOWN_MAX
    counts = collections.Counter(type(v).__name__ for v in quickstart._known.values())
    assert counts == {"McpServer": len(quickstart._known)}
    quickstart.forget()
