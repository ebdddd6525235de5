"""The MCP Apps extension declared as the protocol version requires (issue 31, item 1): at
2026-07-28 in each request's client capabilities, at 2025-11-25 at ``initialize``; only where a
tenant admin turned apps on (``McpServer.apps_enabled`` -> ``declared()``); a real MCP server
(:mod:`tests.headers_mcp`) records what it received."""

from __future__ import annotations

import uuid

import pytest

from mrtrweb.mcp import McpConnection
from mrtrweb.mcpapps import meta
from tests import headers_mcp

CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
EXPECTED = {meta.EXTENSION: {"mimeTypes": ["text/html;profile=mcp-app"]}}


@pytest.fixture(scope="module")
def server():
    handle, log = headers_mcp.serve()
    yield handle, log
    handle.stop()


@pytest.fixture
def log(server):
    server[1].clear()
    return server[1]


async def test_declared_in_each_request_at_2026_07_28(server, log):
    async with McpConnection(server[0].url, timeout_s=10, protocol="2026-07-28", declare={"apps"}) as conn:
        await conn.list_tools()
        await conn.send("tools/call", {"name": "route", "arguments": {"region": "eu"}}, f"t-{uuid.uuid4()}")
    seen = log.all("tools/list") + log.all("tools/call")
    assert len(seen) == 2
    for s in seen:
        assert s.params["_meta"][CAPS_KEY]["extensions"] == EXPECTED


async def test_declared_at_initialize_at_2025_11_25(server, log):
    async with McpConnection(server[0].url, timeout_s=10, protocol="2025-11-25", declare={"apps"}) as conn:
        await conn.list_tools()
    [init] = log.all("initialize")
    assert init.params["capabilities"]["extensions"] == EXPECTED


async def test_not_declared_when_apps_are_off(server, log):
    async with McpConnection(server[0].url, timeout_s=10, protocol="2026-07-28") as conn:
        await conn.list_tools()
    [listing] = log.all("tools/list")
    assert meta.EXTENSION not in (listing.params["_meta"][CAPS_KEY].get("extensions") or {})
    async with McpConnection(server[0].url, timeout_s=10, protocol="2025-11-25") as conn:
        await conn.list_tools()
    [init] = log.all("initialize")
    assert meta.EXTENSION not in (init.params["capabilities"].get("extensions") or {})


@pytest.mark.django_db
def test_the_admin_switch_decides_and_keys_the_pool(seeded):
    from mrtrweb.servers.connections import declared, server_key

    server = seeded["servers"]["acme"]
    assert "apps" not in declared(server)[0]
    before = server_key(server)
    server.apps_enabled = True
    assert "apps" in declared(server)[0]
    assert server_key(server) != before  # a connection declaring it is another pooled connection
