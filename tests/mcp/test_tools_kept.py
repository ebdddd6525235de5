"""A connection keeps its tools listing (issue 30, item 4: the headless client no longer lists
before every operation) only while it would hear a change, and drops it when the server says its
tools changed (``notifications/tools/list_changed``: a 2026-07-28 ``subscriptions/listen`` stream,
the 2025-11-25 session's stream). A real SDK server whose ``grow`` tool adds a tool
(tests/growing_mcp.py), on loopback."""

from __future__ import annotations

import asyncio

import pytest

from mrtrweb.demo.serving import serve_in_thread
from mrtrweb.mcp import McpConnection
from tests.growing_mcp import growing_server


@pytest.fixture(scope="module")
def growing():
    handle = serve_in_thread(server=growing_server())
    yield handle
    handle.stop()


class _Counting(McpConnection):
    """Counts the ``tools/list`` requests it sends."""

    listed = 0

    async def send(self, method, *args, **kwargs):
        if method == "tools/list":
            self.listed += 1
        return await super().send(method, *args, **kwargs)


async def _kept(conn: _Counting, timeout: float = 10.0) -> set[str]:
    """List until the connection keeps a listing (its listen stream acknowledged first)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        names = {t["name"] for t in await conn.tools_known(listen=True)}
        before = conn.listed
        if {t["name"] for t in await conn.tools_known(listen=True)} == names and conn.listed == before:
            return names
        await asyncio.sleep(0.05)
    raise AssertionError("the connection never kept its tools listing")


async def _names_after_change(conn: _Counting, before: set[str], timeout: float = 10.0) -> set[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        names = {t["name"] for t in await conn.tools_known(listen=True)}
        if names != before:
            return names
        await asyncio.sleep(0.05)
    raise AssertionError("the kept tools listing was never dropped after tools/list_changed")


async def test_the_tools_listing_is_kept_until_the_server_says_it_changed(growing):
    """2026-07-28: the server declares ``tools.listChanged``; the connection's listen stream hears it."""
    heard: list[str] = []

    async def changed(kind: str) -> None:
        heard.append(kind)

    async with _Counting(growing.url, timeout_s=10, on_list_changed=changed) as conn:
        first = await _kept(conn)
        assert "grow" in first
        listed = conn.listed
        for _ in range(3):
            assert {t["name"] for t in await conn.tools_known(listen=True)} == first
        assert conn.listed == listed  # kept: no request
        await conn.send("tools/call", {"name": "grow", "arguments": {}}, "grow-1")
        after = await _names_after_change(conn, first)
        assert len(after - first) == 1  # dropped on the notification: listed again, the new tool in it
        assert conn.listed == listed + 1


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25"])
async def test_without_a_way_to_hear_changes_nothing_is_kept(growing, protocol):
    """No ``on_list_changed`` at 2026-07-28 (no listen stream is opened, so no change could be
    heard); at 2025-11-25 this SDK server declares no ``tools.listChanged``: every call lists.
    And a caller that does not ask for the listen stream (``listen=False``: a page's listing,
    whose connection must stay releasable) never has one opened for it."""
    async def changed(kind: str) -> None:
        pass

    callback = changed if protocol == "2025-11-25" else None
    async with _Counting(growing.url, timeout_s=10, protocol=protocol, on_list_changed=callback) as conn:
        for _ in range(3):
            await conn.tools_known(listen=True)
            await asyncio.sleep(0.05)
        assert conn.listed == 3


async def test_a_listing_without_listen_opens_no_stream_and_keeps_nothing(growing):
    async def changed(kind: str) -> None:
        pass

    async with _Counting(growing.url, timeout_s=10, on_list_changed=changed) as conn:
        for _ in range(3):
            await conn.tools_known()
            await asyncio.sleep(0.05)
        assert conn.listed == 3 and conn._watch is None
