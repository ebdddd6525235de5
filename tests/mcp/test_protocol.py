"""The protocol chosen per server (issue 15 item 5): ``McpConnection(protocol=...)``, the pool and
:func:`mrtrweb.servers.connections.connection_for`, against real servers on loopback.

The demo servers: the modern one (:mod:`mrtrweb.demo.server`, the SDK's ``MCPServer``, which speaks
both eras) and the legacy one (:mod:`mrtrweb.demo.legacy`, 2025-11-25 only). Their request logs
show what reached the wire (``server/discover`` or ``initialize``, and the version offered). Two
tiny raw endpoints play the servers that answer another version than the one asked for.
"""

from __future__ import annotations

import pytest
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mrtrweb.demo.legacy import serve_legacy_in_thread
from mrtrweb.demo.server import serve_asgi_in_thread, serve_in_thread
from mrtrweb.mcp import ConnectionPool, McpCallError, McpConnection
from mrtrweb.mcp.connection import PROTOCOLS
from mrtrweb.models import McpServer


@pytest.fixture(scope="module")
def modern():
    handle = serve_in_thread()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def legacy():
    handle = serve_legacy_in_thread()
    yield handle
    handle.stop()


def _methods(handle) -> list[str]:
    return [r.method for r in handle.log.records()]


def test_the_choices_are_the_models() -> None:
    assert PROTOCOLS == tuple(McpServer.Protocol.values)
    # the pinned handshake offers exactly what the SDK's mode="legacy" sends: if the SDK's newest
    # handshake version moves on, pinning "2025-11-25" must be re-done, not silently offer another
    assert LATEST_HANDSHAKE_VERSION == "2025-11-25"
    with pytest.raises(ValueError, match="protocol must be one of"):
        McpConnection("http://127.0.0.1:9/mcp", protocol="2025-06-18")


async def test_auto_speaks_2026_to_modern_and_2025_to_legacy(modern, legacy) -> None:
    modern.log.clear()
    legacy.log.clear()
    async with McpConnection(modern.url, timeout_s=10) as conn:
        assert conn.protocol_version == "2026-07-28"
    async with McpConnection(legacy.url, timeout_s=10) as conn:
        assert conn.protocol_version == "2025-11-25"
    assert _methods(modern) == ["server/discover"]
    assert _methods(legacy)[:2] == ["server/discover", "initialize"]


async def test_pinned_2025_sends_only_the_handshake_offering_that_version(modern) -> None:
    modern.log.clear()
    async with McpConnection(modern.url, timeout_s=10, protocol="2025-11-25") as conn:
        assert conn.protocol_version == "2025-11-25"
        assert "tools" in (conn.server_capabilities or {})
        names = [t["name"] for t in await conn.list_tools()]
        assert "echo" in names
        raw = await conn.send("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, "pin-1")
        assert raw["content"][0]["text"] == "hi"
    methods = _methods(modern)
    assert "server/discover" not in methods
    assert methods[0] == "initialize"
    assert modern.log.records("initialize")[0].params["protocolVersion"] == "2025-11-25"
    # no 2026-07-28 envelope on the call
    assert "_meta" not in modern.log.records("tools/call")[0].params


async def test_pinned_2026_probes_discover_at_that_version_and_adopts_its_capabilities(modern) -> None:
    modern.log.clear()
    async with McpConnection(modern.url, timeout_s=10, protocol="2026-07-28") as conn:
        assert conn.protocol_version == "2026-07-28"
        # the capabilities are the server's answer, not the SDK's empty stand-in of a version pin
        assert "tools" in (conn.server_capabilities or {})
        assert await conn.list_tools()
    assert _methods(modern)[0] == "server/discover"
    assert "initialize" not in _methods(modern)
    probe = modern.log.records("server/discover")[0].params
    assert probe["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"


async def test_pinned_2026_refuses_a_legacy_server(legacy) -> None:
    legacy.log.clear()
    with pytest.raises(McpCallError) as err:
        await McpConnection(legacy.url, timeout_s=10, protocol="2026-07-28").open()
    assert err.value.code == "transport_error"
    assert "does not speak 2026-07-28, the version this server is set to" in err.value.message
    assert "initialize" not in _methods(legacy)  # never fell back to the handshake


async def test_pinned_2025_talks_to_the_legacy_server(legacy) -> None:
    async with McpConnection(legacy.url, timeout_s=10, protocol="2025-11-25") as conn:
        assert conn.protocol_version == "2025-11-25"
        assert any(t["name"] == "legacy_deploy" for t in await conn.list_tools())


# --------------------------------------------------------------------------------------------
# servers that answer another version than the one asked for
# --------------------------------------------------------------------------------------------


def _older_handshake_app(version: str) -> Starlette:
    """A raw server answering ``initialize`` with ``version`` whatever the client offered."""

    async def endpoint(request: Request) -> Response:
        message = await request.json()
        if "id" not in message:
            return Response(status_code=202)
        rid, method = message["id"], message.get("method")
        if method == "initialize":
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": version, "capabilities": {"tools": {}},
                "serverInfo": {"name": "older", "version": "1"}}})
        if method == "tools/list":
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {"tools": []}})
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})

    return Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])])


def _discover_app(versions: list[str]) -> Starlette:
    """A raw server answering ``server/discover`` with ``supportedVersions`` = ``versions``."""

    async def endpoint(request: Request) -> Response:
        message = await request.json()
        rid = message.get("id")
        if message.get("method") == "server/discover":
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {
                "supportedVersions": versions, "capabilities": {"tools": {}}, "resultType": "complete",
                "ttlMs": 0, "cacheScope": "public"}})
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})

    return Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])])


async def test_pinned_2025_refuses_a_server_answering_an_older_version() -> None:
    server = serve_asgi_in_thread(_older_handshake_app("2025-06-18"))
    try:
        with pytest.raises(McpCallError) as err:
            await McpConnection(server.url, timeout_s=5, protocol="2025-11-25").open()
        assert err.value.code == "transport_error"
        assert ("answered protocol version '2025-06-18' to an initialize offering 2025-11-25, "
                "the version this server is set to") in err.value.message
        assert server.log.records("initialize")[0].params["protocolVersion"] == "2025-11-25"
        # left on auto, the same server is spoken to at the version it chose
        async with McpConnection(server.url, timeout_s=5) as conn:
            assert conn.protocol_version == "2025-06-18"
    finally:
        server.stop()


async def test_pinned_2026_refuses_a_discover_without_that_version() -> None:
    server = serve_asgi_in_thread(_discover_app(["2027-01-01", "x" * 500]))
    try:
        with pytest.raises(McpCallError) as err:
            await McpConnection(server.url, timeout_s=5, protocol="2026-07-28").open()
        assert err.value.code == "transport_error"
        assert "not 2026-07-28, the version this server is set to" in err.value.message
        assert "2027-01-01" in err.value.message
        assert "x" * 100 not in err.value.message  # a server's string is bounded in the message
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# the pool
# --------------------------------------------------------------------------------------------


async def test_pool_replaces_a_connection_when_the_protocol_setting_changes(modern) -> None:
    pool = ConnectionPool(timeout_s=10)
    try:
        auto = await pool.get("u1", "s1", modern.url)
        assert auto.protocol_version == "2026-07-28"
        assert await pool.get("u1", "s1", modern.url) is auto  # kept while the setting stays
        pinned = await pool.get("u1", "s1", modern.url, protocol="2025-11-25")
        assert pinned is not auto and not auto.is_open
        assert pinned.protocol_version == "2025-11-25"
        assert await pool.get("u1", "s1", modern.url, protocol="2025-11-25") is pinned
        assert len(pool) == 1
    finally:
        await pool.close_all()
