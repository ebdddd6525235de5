"""A connection follows the resources pages watch (:mod:`mrtrweb.mcp.resource_watch`): bounded per
connection, one subscription per URI whatever the number of pages, updates coalesced per URI, a URI
nobody watches ignored. The demo's notice board on loopback (:mod:`mrtrweb.demo.board`)."""

from __future__ import annotations

import asyncio

import pytest

from mrtrweb.demo.board import BOARD_URI, board_server
from mrtrweb.demo.server import serve_in_thread
from mrtrweb.mcp import McpConnection
from mrtrweb.mcp import resource_watch
from tests.attack28_servers import MUTE_URI, mute_subscriber
from tests.thirdparty import everything_server  # noqa: F401 -- a module fixture


@pytest.fixture(scope="module")
def board():
    handle = serve_in_thread(server=board_server())
    yield handle
    handle.stop()


@pytest.mark.parametrize("protocol", ["2026-07-28", "2025-11-25"])
async def test_watches_are_bounded_and_one_subscription_per_uri(board, protocol):
    board.log.clear()
    told: list[str] = []

    async def page(uri: str) -> None:
        told.append(uri)

    async def other_page(uri: str) -> None:
        told.append("other " + uri)

    async with McpConnection(board.url, protocol=protocol, timeout_s=10) as conn:
        assert await conn.watch_resource(BOARD_URI, page)
        assert await conn.watch_resource(BOARD_URI, other_page)  # a second page: no second subscription
        assert not await conn.watch_resource("demo://" + "x" * resource_watch.MAX_URI_CHARS, page)
        for i in range(resource_watch.MAX_WATCHED_URIS - 1):
            assert await conn.watch_resource(f"demo://other/{i}", page)
        assert not await conn.watch_resource("demo://one-too-many", page)  # the bound
        assert conn.idle_for() == 0.0  # kept open for the pages
        if protocol == "2025-11-25":
            subscribed = [r.params["uri"] for r in board.log.records("resources/subscribe")]
            assert subscribed.count(BOARD_URI) == 1 and len(subscribed) == resource_watch.MAX_WATCHED_URIS

        conn._updated("demo://nobody-watches")  # a URI no page watches: dropped
        await conn.unwatch_resource(BOARD_URI, other_page)
        await conn.send("tools/call", {"name": "update_board", "arguments": {"text": "hi"}}, "call-1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not told and loop.time() < deadline:
            await asyncio.sleep(0.02)
        assert told == [BOARD_URI]  # the page still watching, not the one that left

        await conn.unwatch_resource(BOARD_URI, page)
        if protocol == "2025-11-25":
            assert [r.params["uri"] for r in board.log.records("resources/unsubscribe")] == [BOARD_URI]


async def test_updates_are_coalesced_per_uri(board, monkeypatch):
    monkeypatch.setattr(resource_watch, "COALESCE_S", 0.2)
    told: list[str] = []

    async def page(uri: str) -> None:
        told.append(uri)

    async with McpConnection(board.url, protocol="2025-11-25", timeout_s=10) as conn:
        assert await conn.watch_resource(BOARD_URI, page)
        loop = asyncio.get_running_loop()

        async def told_at_least(n: int) -> None:
            deadline = loop.time() + 5
            while len(told) < n and loop.time() < deadline:
                await asyncio.sleep(0.02)

        for _ in range(500):  # a burst: one call
            conn._updated(BOARD_URI)
        await told_at_least(1)
        assert told == [BOARD_URI]
        for _ in range(500):  # another, within the window: one more call, when the window ends
            conn._updated(BOARD_URI)
        await asyncio.sleep(0)
        assert told == [BOARD_URI]
        await told_at_least(2)
        assert told == [BOARD_URI, BOARD_URI]


async def test_the_everything_server_tells_a_subscribed_resource(everything_server):  # noqa: F811
    """npm ``@modelcontextprotocol/server-everything`` (2025-11-25, ``resources.subscribe``): its
    ``toggle-subscriber-updates`` tool sends ``notifications/resources/updated`` at once for what the
    session subscribed to; the page listening is told, with the URI it watched."""
    told: list[str] = []

    async def page(uri: str) -> None:
        told.append(uri)

    async with McpConnection(everything_server.url, protocol="2025-11-25", timeout_s=15) as conn:
        (uri, *_rest) = [r["uri"] for r in await conn.list_resources()]
        assert await conn.watch_resource(uri, page)
        await conn.send("tools/call", {"name": "toggle-subscriber-updates", "arguments": {}}, "toggle-on")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not told and loop.time() < deadline:
            await asyncio.sleep(0.02)
        assert told == [uri]
        await conn.send("tools/call", {"name": "toggle-subscriber-updates", "arguments": {}}, "toggle-off")
        await conn.unwatch_resource(uri, page)
        assert not conn.watching_resources()


async def test_a_subscribe_never_answered_is_given_up_and_a_cancelled_watch_leaves_nothing(monkeypatch):
    """A 2025-11-25 server that never answers ``resources/subscribe``: the watch is given up within
    ``ASK_TIMEOUT_S`` (not the connection's timeout: the watch lock is held meanwhile), and a watch
    cancelled while it waits (its page gone) leaves no listener behind (a listener left would keep
    the pooled connection open for ever: it is never idle while a URI is watched)."""
    monkeypatch.setattr(resource_watch, "ASK_TIMEOUT_S", 0.5, raising=False)
    server, asked = mute_subscriber()
    handle = serve_in_thread(server=server)

    async def page(uri: str) -> None:  # pragma: no cover - never told
        raise AssertionError(uri)

    try:
        async with McpConnection(handle.url, protocol="2025-11-25", timeout_s=60) as conn:
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert not await conn.watch_resource(MUTE_URI, page)
            assert loop.time() - started < 5 and asked == [MUTE_URI]
            assert not conn.watching_resources()

            watch = asyncio.ensure_future(conn.watch_resource(MUTE_URI, page))
            while len(asked) < 2 and loop.time() - started < 10:
                await asyncio.sleep(0.01)
            assert conn.watching_resources()  # asked, waiting
            watch.cancel()
            await asyncio.wait([watch])
            assert not conn.watching_resources()
    finally:
        handle.stop()
