"""Large server responses never stall the event loop (issue 12, attack pass F7/F8).

* a response body past ``MAX_RESPONSE_BYTES`` (set lower here; JSON, declared or not by Content-Length; or a
  request's SSE stream) fails the request with ``transport_error`` and a clear reason;
* a listing is checked item by item off the loop: a malformed item is ``invalid_result``, a
  listing of more than ``MAX_LISTED_ITEMS`` items (over its pages) is ``invalid_result`` naming the
  bound, pages are followed by ``nextCursor``;
* a final result is checked block by block: a malformed block still fails the SDK's check.
"""

from __future__ import annotations

import json

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mrtrweb import operations
from mrtrweb.mcp import evidence, listing
from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.mcp import McpCallError, McpConnection

DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}, "prompts": {}},
            "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
LISTING = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
#: the bound the tests set (``MAX_RESPONSE_BYTES`` is 8 MiB), and a body past it
BOUND = 1024 * 1024
BIG = 2 * BOUND


def _tool(i: int) -> dict:
    return {"name": f"t{i}", "inputSchema": {"type": "object"}}


async def endpoint(request: Request) -> Response:
    message = await request.json()
    if "id" not in message:
        return Response(status_code=202)
    rid, method, params = message["id"], message.get("method"), message.get("params") or {}
    if method == "server/discover":
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": DISCOVER})
    if method == "tools/list":  # three pages of 3 tools
        page = int(params.get("cursor") or 0)
        result = {"tools": [_tool(3 * page + i) for i in range(3)], **LISTING}
        if page < 2:
            result["nextCursor"] = str(page + 1)
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})
    if method == "prompts/list":  # a malformed item among good ones
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {
            "prompts": [{"name": "a"}, {"name": 7}, {"name": "b"}], **LISTING}})
    name = params.get("name")
    if name == "big_declared":
        body = '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}' % (
            json.dumps(rid), "x" * BIG)
        return Response(body, media_type="application/json")
    if name == "big_chunked":
        async def chunks():
            yield b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % json.dumps(rid).encode()
            for _ in range(BIG // 65536):
                yield b"x" * 65536
            yield b'"}]}}'
        return StreamingResponse(chunks(), media_type="application/json")
    if name == "big_sse":
        async def events():
            for i in range(BIG // 65536):
                note = {"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": "x" * 65536}}
                yield f"event: message\ndata: {json.dumps(note)}\n\n".encode()
            yield f"event: message\ndata: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'result': {'content': []}})}\n\n".encode()
        return StreamingResponse(events(), media_type="text/event-stream")
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "ok"}]}})


@pytest.fixture(scope="module")
def server():
    handle = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]))
    yield handle
    handle.stop()


@pytest.fixture
async def conn(server):
    async with McpConnection(server.url, timeout_s=20) as connection:
        yield connection


@pytest.mark.parametrize("name", ["big_declared", "big_chunked", "big_sse"])
async def test_a_response_past_the_bound_is_a_transport_error(conn, name, monkeypatch):
    monkeypatch.setattr(evidence, "MAX_RESPONSE_BYTES", BOUND)
    with pytest.raises(McpCallError) as err:
        await conn.send("tools/call", {"name": name, "arguments": {}}, f"req-{name}")
    assert err.value.code == "transport_error"
    if name != "big_sse":  # the SDK reports a broken SSE stream in its own words
        assert f"larger than {evidence.MAX_RESPONSE_BYTES} bytes" in err.value.message


async def test_a_small_response_is_unchanged(conn):
    raw = await conn.send("tools/call", {"name": "echo", "arguments": {}}, "req-small")
    assert raw == {"content": [{"type": "text", "text": "ok"}]}


async def test_a_listing_follows_its_pages_and_is_checked_per_item(conn):
    assert [t["name"] for t in await conn.list_tools()] == [f"t{i}" for i in range(9)]
    with pytest.raises(McpCallError) as err:
        await conn.list_prompts()
    assert err.value.code == "invalid_result"


async def test_a_listing_of_more_items_than_the_bound_is_refused(conn, monkeypatch):
    monkeypatch.setattr(listing, "MAX_LISTED_ITEMS", 7)
    with pytest.raises(McpCallError) as err:
        await conn.list_tools()
    assert err.value.code == "invalid_result" and "more than 7 items" in err.value.message


def test_a_final_result_is_checked_block_by_block():
    good = {"content": [{"type": "text", "text": str(i)} for i in range(1000)], "isError": False}
    assert operations.parse_final("tools/call", good)
    assert not operations.parse_final("tools/call", {**good, "content": [*good["content"], {"type": "text"}]})
    assert not operations.parse_final("tools/call", {"content": "not a list"})
    assert not operations.parse_final("tools/call", {**good, "isError": {"x": 1}})
    assert operations.parse_final("prompts/get", {"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]})
    assert not operations.parse_final("prompts/get", {"messages": [{"role": "nobody"}]})
    assert operations.parse_final("resources/read", {"contents": [{"uri": "a://b", "text": "x"}]})
