"""A closed 2026-07-28 MCP connection is freed by reference counting, not left in reference cycles
for a full collection (:func:`mrtrweb.mcp.sending.end_reading`, :func:`mrtrweb.mcp.sending.let_go`).

Before: the SDK session's cancelled read loop (anyio keeps the ``CancelledError`` whose traceback
holds its task group's done callback) and the session's cycles with its dispatcher kept the whole
closed connection -- ~173 objects, ~35 KiB, the socket's transport among them -- until a full
collection: in a worker that releases a waiting round's session, most of what the young
collections had to free. Against the real demo server on loopback."""

from __future__ import annotations

import gc
import weakref

import pytest

from mrtrweb.demo.server import serve_in_thread
from mrtrweb.mcp import McpConnection


@pytest.fixture(scope="module")
def modern():
    handle = serve_in_thread()
    yield handle
    handle.stop()


async def _used_and_closed(url: str) -> weakref.ref:
    conn = McpConnection(url, timeout_s=10, protocol="2026-07-28")
    await conn.open()
    assert [t["name"] for t in await conn.list_tools()]
    await conn.close()
    assert not conn.is_open
    return weakref.ref(conn)


async def test_a_closed_connection_is_freed_without_the_collector(modern) -> None:
    await _used_and_closed(modern.url)  # warm: first-use caches are not the connection's
    gc.collect()
    gc.disable()
    try:
        refs = [await _used_and_closed(modern.url) for _ in range(3)]
        assert [r() for r in refs] == [None, None, None], "a closed connection waits for the collector"
    finally:
        gc.enable()


async def test_a_closed_connection_cannot_send(modern) -> None:
    conn = McpConnection(modern.url, timeout_s=10, protocol="2026-07-28")
    await conn.open()
    await conn.close()
    with pytest.raises(Exception):
        await conn.list_tools()
