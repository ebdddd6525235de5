"""The MCP connection adapter (``mrtrweb.mcp``) against real servers on loopback.

No protocol mocks: the demo ``MCPServer`` (``mrtrweb.demo.server``) over Streamable HTTP, and a
tiny raw JSON-RPC endpoint for the misbehaving-server cases. Needs no Django.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from typing import Any

import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import PROTOCOL_VERSION_META_KEY
from pydantic import TypeAdapter, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mrtrweb.demo.server import CONNECT_URL_BASE, DemoServerHandle, serve_asgi_in_thread, serve_in_thread
from mrtrweb.mcp import ConnectionPool, McpCallError, McpConnection, origin_of
from mrtrweb.bench.machine import free_port as bench_free_port

MODERN = "2026-07-28"




@pytest.fixture
def demo():
    handle = serve_in_thread()
    yield handle
    handle.stop()


@pytest.fixture
async def conn(demo: DemoServerHandle):
    connection = McpConnection(demo.url, timeout_s=10)
    await connection.open()
    yield connection
    await connection.close()


def rid() -> str:
    return f"t-{uuid.uuid4()}"


def wire_params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k != "_meta"}


def text_of(result: dict[str, Any]) -> str:
    return " ".join(block["text"] for block in result["content"] if block.get("type") == "text")


def accept(content: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"action": "accept", "content": content} if content is not None else {"action": "accept"}


# --------------------------------------------------------------------------------------------
# origin_of
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://MCP.Example.com/mcp", "https://mcp.example.com:443"),
        ("http://example.com", "http://example.com:80"),
        ("HTTP://user:pw@Example.COM:8080/a?b#c", "http://example.com:8080"),
        ("https://example.com:443/", "https://example.com:443"),
        ("http://127.0.0.1:9/x", "http://127.0.0.1:9"),
        ("http://[::1]:8080/mcp", "http://[::1]:8080"),
        ("https://[2001:DB8::1]/", "https://[2001:db8::1]:443"),
    ],
)
def test_origin_of(url: str, origin: str) -> None:
    assert origin_of(url) == origin


@pytest.mark.parametrize(
    "url", ["ftp://example.com/", "example.com/mcp", "https:///nohost", "http://example.com:99999/", "", "javascript:x"]
)
def test_origin_of_rejects(url: str) -> None:
    with pytest.raises(ValueError):
        origin_of(url)


# --------------------------------------------------------------------------------------------
# The SDK internals the adapter relies on (fails loudly if an SDK upgrade moves them)
# --------------------------------------------------------------------------------------------


def test_sdk_internals_still_exist() -> None:
    import anyio

    assert "request_id" in CallOptions.__annotations__
    assert callable(getattr(JSONRPCDispatcher, "send_raw_request", None))
    send, receive = anyio.create_memory_object_stream(1)
    with send, receive:
        session = ClientSession(dispatcher=JSONRPCDispatcher(receive, send))
        assert callable(session._stamp) and isinstance(session._dispatcher, JSONRPCDispatcher)


# --------------------------------------------------------------------------------------------
# Against the demo server
# --------------------------------------------------------------------------------------------


async def test_negotiates_2026_and_lists(conn: McpConnection) -> None:
    assert conn.protocol_version == MODERN and conn.is_open
    tools = {t["name"]: t for t in await conn.list_tools()}
    assert set(tools) == {"deploy", "book_trip", "connect_account", "busy_report", "endless", "echo", "long_task",
                          "wait_then_ask", "summarize_with_sampling", "list_my_roots", "onboard_team",
                          "service_status", "refresh_status"}  # the demo's MCP App and its app-only tool
    deploy = tools["deploy"]
    assert deploy["description"] and deploy["inputSchema"]["type"] == "object"
    assert deploy["inputSchema"]["properties"]["env"]["enum"] == ["staging", "production"]
    assert deploy["inputSchema"]["properties"]["replicas"]["type"] == "integer"
    assert tools["endless"]["inputSchema"]["properties"] == {}
    assert [p["name"] for p in await conn.list_prompts()] == ["release_notes"]
    assert [t["uriTemplate"] for t in await conn.list_resource_templates()] == ["demo://reports/{team}"]


async def test_deploy_by_hand_with_chosen_ids(demo: DemoServerHandle, conn: McpConnection) -> None:
    first = {"name": "deploy", "arguments": {"env": "production", "replicas": 3}}
    raw = await conn.send("tools/call", first, "op-1")
    assert first == {"name": "deploy", "arguments": {"env": "production", "replicas": 3}}  # not mutated
    assert raw["resultType"] == "input_required"
    assert set(raw["inputRequests"]) == {"confirm_deploy"}
    request = raw["inputRequests"]["confirm_deploy"]
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    schema = request["params"]["requestedSchema"]
    props = schema["properties"]
    assert schema["required"] == ["confirm", "ticket"]
    assert props["confirm"]["type"] == "boolean"
    assert (props["ticket"]["minLength"], props["ticket"]["maxLength"]) == (3, 32)
    assert props["email"]["format"] == "email"
    assert (props["window"]["minimum"], props["window"]["maximum"], props["window"]["default"]) == (1, 24, 2)
    assert [o["const"] for o in props["region"]["oneOf"]] == ["eu-west-1", "us-east-1", "ap-south-1"]
    assert props["notify"]["items"]["enum"] == ["email", "slack", "pager"]
    assert all(p.get("title") and p.get("description") for p in props.values())
    # Every field is a spec PrimitiveSchemaDefinition (2026-07-28).
    from mcp_types._v2026_07_28 import PrimitiveSchemaDefinition

    adapter = TypeAdapter(PrimitiveSchemaDefinition)
    for value in props.values():
        adapter.validate_python(value)

    # requestState is sealed: opaque, and none of the server's plaintext shows.
    state = raw["requestState"]
    assert state.startswith("v1.") and "deploy" not in state and "round" not in state

    retry = {
        **first,
        "inputResponses": {
            "confirm_deploy": accept(
                {"confirm": True, "ticket": "CHG-42", "email": "ops@example.com", "window": 4,
                 "region": "us-east-1", "notify": ["slack", "pager"]}
            )
        },
        "requestState": state,
    }
    final = await conn.send("tools/call", retry, "op-2")
    assert final["resultType"] == "complete" and final["isError"] is False
    assert text_of(final) == (
        "Deployed 3 replica(s) to production (ticket CHG-42; region us-east-1; window 4h; "
        "contact ops@example.com; notify slack, pager)."
    )

    calls = demo.log.tool_calls("deploy")
    assert [c.request_id for c in calls] == ["op-1", "op-2"]  # exactly our ids, verbatim strings
    assert wire_params(dict(calls[0].params)) == first  # params as given ...
    assert wire_params(dict(calls[1].params)) == retry
    assert calls[1].params["_meta"][PROTOCOL_VERSION_META_KEY] == MODERN  # ... plus the SDK's _meta stamp
    assert demo.calls[("deploy", False)] == 1 and demo.calls[("deploy", True)] == 1


async def test_caller_meta_is_kept_and_int_ids_work(demo: DemoServerHandle, conn: McpConnection) -> None:
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"example.com/trace": "abc"}}
    raw = await conn.send("tools/call", params, 7001)
    assert text_of(raw) == "hi"
    (record,) = demo.log.tool_calls("echo")
    assert record.request_id == 7001
    assert record.params["_meta"]["example.com/trace"] == "abc"
    assert record.params["_meta"][PROTOCOL_VERSION_META_KEY] == MODERN
    assert params["_meta"] == {"example.com/trace": "abc"}


@pytest.mark.parametrize(("action", "word"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_deploy_refused(conn: McpConnection, action: str, word: str) -> None:
    first = {"name": "deploy", "arguments": {"env": "staging", "replicas": 1}}
    raw = await conn.send("tools/call", first, rid())
    final = await conn.send(
        "tools/call",
        {**first, "inputResponses": {"confirm_deploy": {"action": action}}, "requestState": raw["requestState"]},
        rid(),
    )
    assert word in text_of(final) and "nothing was done" in text_of(final)


async def test_book_trip_two_rounds(demo: DemoServerHandle, conn: McpConnection) -> None:
    first = {"name": "book_trip", "arguments": {"destination": "Lisbon"}}
    r1 = await conn.send("tools/call", first, rid())
    assert set(r1["inputRequests"]) == {"dates"}
    props = r1["inputRequests"]["dates"]["params"]["requestedSchema"]["properties"]
    assert props["start"]["format"] == "date" and props["nights"]["type"] == "integer"

    r2 = await conn.send(
        "tools/call",
        {**first, "inputResponses": {"dates": accept({"start": "2026-09-01", "nights": 3})},
         "requestState": r1["requestState"]},
        rid(),
    )
    assert r2["resultType"] == "input_required" and set(r2["inputRequests"]) == {"seat"}
    props = r2["inputRequests"]["seat"]["params"]["requestedSchema"]["properties"]
    assert props["seat"]["enum"] == ["window", "aisle", "middle"] and props["confirm"]["type"] == "boolean"
    assert r2["requestState"] != r1["requestState"]

    final = await conn.send(
        "tools/call",
        {**first, "inputResponses": {"seat": accept({"seat": "aisle", "confirm": True})},
         "requestState": r2["requestState"]},
        rid(),
    )
    assert text_of(final) == "Booked 3 night(s) in Lisbon from 2026-09-01, aisle seat."
    assert demo.calls[("book_trip", False)] == 1 and demo.calls[("book_trip", True)] == 2


async def test_connect_account_url_mode(conn: McpConnection) -> None:
    first = {"name": "connect_account", "arguments": {"provider": "git hub"}}
    raw = await conn.send("tools/call", first, rid())
    params = raw["inputRequests"]["authorize"]["params"]
    assert params["mode"] == "url" and params["message"]
    assert params["url"] == f"{CONNECT_URL_BASE}?provider=git+hub" and params["url"].startswith("https://")
    # The server sets elicitationId, but the 2026-07-28 schema has no such field: the SDK's
    # outbound sieve drops it. (Fails if a later SDK starts sending it.)
    assert "elicitationId" not in params
    final = await conn.send(
        "tools/call",
        {**first, "inputResponses": {"authorize": accept()}, "requestState": raw["requestState"]},
        rid(),
    )
    assert text_of(final) == "Account at git hub connected."
    declined = await conn.send(
        "tools/call",
        {**first, "inputResponses": {"authorize": {"action": "decline"}}, "requestState": raw["requestState"]},
        rid(),
    )
    assert "declined" in text_of(declined)


async def test_busy_report_state_only_round_then_form(demo: DemoServerHandle, conn: McpConnection) -> None:
    first = {"name": "busy_report", "arguments": {"topic": "sales"}}
    r1 = await conn.send("tools/call", first, rid())
    assert r1["resultType"] == "input_required" and "inputRequests" not in r1 and r1["requestState"]
    r2 = await conn.send("tools/call", {**first, "requestState": r1["requestState"]}, rid())
    choices = r2["inputRequests"]["format"]["params"]["requestedSchema"]["properties"]["format"]["oneOf"]
    assert [c["const"] for c in choices] == ["pdf", "html", "csv"]
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    last_id = rid()
    final = await conn.send(
        "tools/call",
        {**first, "inputResponses": {"format": accept({"format": "pdf"})}, "requestState": r2["requestState"]},
        last_id,
        on_progress=on_progress,
    )
    assert text_of(final) == "Report on sales ready as pdf."
    assert progress == [(1, 2, "collecting data"), (2, 2, "rendering")]
    assert demo.log.tool_calls("busy_report")[-1].params["_meta"]["progressToken"] == last_id
    assert demo.calls[("busy_report", False)] == 1 and demo.calls[("busy_report", True)] == 2


async def test_endless_keeps_answering(demo: DemoServerHandle, conn: McpConnection) -> None:
    params: dict[str, Any] = {"name": "endless", "arguments": {}}
    states: list[str] = []
    ids = [rid() for _ in range(6)]
    for request_id in ids:
        raw = await conn.send("tools/call", params, request_id)
        assert raw["resultType"] == "input_required" and "inputRequests" not in raw
        states.append(raw["requestState"])
        params = {"name": "endless", "arguments": {}, "requestState": raw["requestState"]}
    assert len(set(states)) == len(states)
    assert [c.request_id for c in demo.log.tool_calls("endless")] == ids


async def test_tampered_state_is_a_jsonrpc_error(conn: McpConnection) -> None:
    first = {"name": "deploy", "arguments": {"env": "staging", "replicas": 1}}
    raw = await conn.send("tools/call", first, rid())
    with pytest.raises(McpCallError) as err:
        await conn.send("tools/call", {**first, "requestState": raw["requestState"][:-6] + "AAAAAA"}, rid())
    assert err.value.code == "jsonrpc_error" and err.value.rpc_code == -32602
    assert err.value.rpc_message == "Invalid or expired requestState" and err.value.http_status == 400
    # State is bound to the tool and its arguments: replaying it under other arguments is refused too.
    with pytest.raises(McpCallError) as err:
        await conn.send(
            "tools/call",
            {"name": "deploy", "arguments": {"env": "production", "replicas": 1}, "requestState": raw["requestState"]},
            rid(),
        )
    assert err.value.rpc_code == -32602
    assert conn.is_open  # a JSON-RPC error does not break the connection


async def test_unknown_method_is_a_jsonrpc_error(conn: McpConnection) -> None:
    with pytest.raises(McpCallError) as err:
        await conn.send("no/such-method", {}, rid())
    assert err.value.code == "jsonrpc_error" and err.value.rpc_code == -32601


async def test_duplicate_in_flight_id_is_a_caller_error(conn: McpConnection) -> None:
    first = {"name": "echo", "arguments": {"text": "x"}}
    results = await asyncio.gather(
        conn.send("tools/call", first, "same"), conn.send("tools/call", first, "same"), return_exceptions=True
    )
    assert sum(isinstance(r, ValueError) for r in results) == 1
    assert sum(isinstance(r, dict) for r in results) == 1


async def test_non_json_params_are_refused_before_sending(demo: DemoServerHandle, conn: McpConnection) -> None:
    for bad in ({"name": "echo", "arguments": {"text": {1, 2}}}, {"name": "echo", "arguments": {"n": float("nan")}}):
        with pytest.raises(TypeError):
            await conn.send("tools/call", bad, rid())
    assert demo.log.tool_calls() == [] and conn.is_open
    assert text_of(await conn.send("tools/call", {"name": "echo", "arguments": {"text": "ok"}}, rid())) == "ok"


async def test_cross_task_open_send_close(demo: DemoServerHandle) -> None:
    connection = McpConnection(demo.url, timeout_s=10)
    await asyncio.create_task(connection.open())
    raw = await asyncio.create_task(connection.send("tools/call", {"name": "echo", "arguments": {"text": "a"}}, rid()))
    assert text_of(raw) == "a"
    both = await asyncio.gather(
        asyncio.create_task(connection.send("tools/call", {"name": "echo", "arguments": {"text": "b"}}, rid())),
        asyncio.create_task(connection.send("tools/call", {"name": "echo", "arguments": {"text": "c"}}, rid())),
    )
    assert [text_of(r) for r in both] == ["b", "c"]
    await asyncio.create_task(connection.close())
    assert not connection.is_open and connection._owner is not None and connection._owner.done()
    with pytest.raises(McpCallError) as err:
        await connection.send("tools/call", {"name": "echo", "arguments": {"text": "d"}}, rid())
    assert err.value.code == "transport_error"
    await connection.close()  # idempotent


async def test_async_with(demo: DemoServerHandle) -> None:
    async with McpConnection(demo.url) as connection:
        assert connection.is_open
    assert not connection.is_open


# --------------------------------------------------------------------------------------------
# Transport failures
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    return bench_free_port()  # a port of this test process's own range (mrtrweb.bench.machine.free_port)


async def test_connection_refused() -> None:
    connection = McpConnection(f"http://127.0.0.1:{free_port()}/mcp", timeout_s=5)
    with pytest.raises(McpCallError) as err:
        await connection.open()
    assert err.value.code == "transport_error"
    assert not connection.is_open


async def test_open_times_out_on_a_silent_server() -> None:
    with socket.socket() as silent:  # accepts TCP (backlog) but never answers HTTP
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        connection = McpConnection(f"http://127.0.0.1:{silent.getsockname()[1]}/mcp", timeout_s=0.5)
        with pytest.raises(McpCallError) as err:
            await connection.open()
    assert err.value.code == "timeout"
    assert connection._owner is not None and connection._owner.done()


async def test_server_gone_is_a_transport_error(demo: DemoServerHandle) -> None:
    connection = McpConnection(demo.url, timeout_s=5)
    await connection.open()
    demo.stop()
    with pytest.raises(McpCallError) as err:
        await connection.send("tools/call", {"name": "echo", "arguments": {"text": "x"}}, rid())
    assert err.value.code == "transport_error"
    assert not connection.is_open
    await connection.close()


# --------------------------------------------------------------------------------------------
# A misbehaving server: a raw JSON-RPC endpoint
# --------------------------------------------------------------------------------------------

DISCOVER = types.DiscoverResult(
    supported_versions=[MODERN],
    capabilities=types.ServerCapabilities(tools=types.ToolsCapability()),
    result_type="complete",
    ttl_ms=0,
    cache_scope="public",
).model_dump(by_alias=True, mode="json", exclude_none=True)

MALFORMED_RESULTS: dict[str, dict[str, Any]] = {
    "wrong_case": {"resultType": "Input_Required"},
    "numeric_state": {"resultType": "input_required", "requestState": 5},
    "list_requests": {"resultType": "input_required", "inputRequests": [1]},
    "empty_round": {"resultType": "input_required"},
    "bad_request": {"resultType": "input_required", "inputRequests": {"k": {"method": "elicitation/create"}}},
    "bad_content": {"content": "not a list", "isError": "no"},
    "unicode": {"resultType": "input_required", "requestState": "\u202eevil", "extra": {"n": 1.5, "big": 2**70}},
}


def _sse(payload: dict[str, Any]) -> Response:
    return Response(f"event: message\ndata: {json.dumps(payload)}\n\n", media_type="text/event-stream")


async def _raw_endpoint(request: Request) -> Response:
    message = await request.json()
    if "id" not in message:
        return Response(status_code=202)
    request_id, method = message["id"], message.get("method")

    def ok(result: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def error(code: int, text: str, data: Any = None) -> dict[str, Any]:
        err: dict[str, Any] = {"code": code, "message": text}
        if data is not None:
            err["data"] = data
        return {"jsonrpc": "2.0", "id": request_id, "error": err}

    if method == "server/discover":
        return JSONResponse(ok(DISCOVER))
    if method == "tools/list":
        return JSONResponse(ok({"tools": [{"name": 5}], "resultType": "complete"}))
    if method != "tools/call":
        return JSONResponse(error(-32601, "Method not found"))
    case = message["params"]["arguments"]["case"]
    if case in MALFORMED_RESULTS:
        return JSONResponse(ok(MALFORMED_RESULTS[case]))
    if case == "sse_malformed":
        return _sse(ok(MALFORMED_RESULTS["numeric_state"]))
    if case == "server_error_like_sdk":  # the code and text the SDK uses for its own "closed" error
        return JSONResponse(error(-32000, "Connection closed", {"why": "server says so"}))
    if case == "server_error_http_400":
        return JSONResponse(error(-32602, "Bad params"), status_code=400)
    if case == "sse_error":
        return _sse(error(-32000, "Server busy"))
    if case == "sse_error_like_sdk":
        return _sse(error(-32000, "Connection closed"))
    if case == "sse_no_response":
        return Response("event: message\ndata: \n\n", media_type="text/event-stream")
    if case == "http_500":
        return PlainTextResponse("boom", status_code=500)
    if case == "http_500_json":
        return JSONResponse({"detail": "boom"}, status_code=500)
    if case == "not_an_object":
        return JSONResponse(ok([1, 2]))
    if case == "garbage_json":
        return Response(b"{not json", media_type="application/json")
    if case == "text_plain":
        return PlainTextResponse("hello")
    if case == "accepted":
        return Response(status_code=202)
    if case == "slow":
        await asyncio.sleep(3)
        return JSONResponse(ok({"content": []}))
    return JSONResponse(error(-32602, f"unknown case {case}"))


@pytest.fixture(scope="module")
def raw_server():
    app = Starlette(routes=[Route("/mcp", _raw_endpoint, methods=["POST"])])
    handle = serve_asgi_in_thread(app)
    yield handle
    handle.stop()


@pytest.fixture
async def raw_conn(raw_server: DemoServerHandle):
    connection = McpConnection(raw_server.url, timeout_s=5)
    await connection.open()
    yield connection
    await connection.close()


def case(name: str) -> dict[str, Any]:
    return {"name": "probe", "arguments": {"case": name}}


@pytest.mark.parametrize("name", sorted(MALFORMED_RESULTS))
async def test_malformed_results_come_back_raw(raw_conn: McpConnection, name: str) -> None:
    assert raw_conn.protocol_version == MODERN
    raw = await raw_conn.send("tools/call", case(name), rid())
    assert raw == MALFORMED_RESULTS[name]
    assert raw_conn.is_open


async def test_malformed_result_over_sse_comes_back_raw(raw_conn: McpConnection) -> None:
    assert await raw_conn.send("tools/call", case("sse_malformed"), rid()) == MALFORMED_RESULTS["numeric_state"]


async def test_the_sdk_typed_path_would_have_raised(raw_conn: McpConnection) -> None:
    """Why ``send`` bypasses the SDK's typed path: it raises pydantic errors on such results."""
    session = raw_conn._live_client().session
    with pytest.raises(ValidationError):
        await session.call_tool("probe", {"case": "numeric_state"}, allow_input_required=True)


@pytest.mark.parametrize(
    ("name", "code", "rpc_code", "http_status"),
    [
        ("server_error_like_sdk", "jsonrpc_error", -32000, None),
        ("server_error_http_400", "jsonrpc_error", -32602, 400),
        ("sse_error", "jsonrpc_error", -32000, None),
        # Known limit: inside an SSE body the adapter cannot see the event, so an error carrying
        # the SDK's own "closed" code and text reads as the SDK's (a transport failure).
        ("sse_error_like_sdk", "transport_error", None, None),
        ("sse_no_response", "transport_error", None, None),
        ("http_500", "transport_error", None, 500),
        ("http_500_json", "transport_error", None, 500),
        ("not_an_object", "transport_error", None, None),
        ("garbage_json", "transport_error", None, None),
        ("text_plain", "transport_error", None, None),
        ("accepted", "transport_error", None, None),
    ],
)
async def test_error_classification(
    raw_conn: McpConnection, name: str, code: str, rpc_code: int | None, http_status: int | None
) -> None:
    with pytest.raises(McpCallError) as err:
        await raw_conn.send("tools/call", case(name), rid())
    assert (err.value.code, err.value.rpc_code, err.value.http_status) == (code, rpc_code, http_status)
    if code == "jsonrpc_error":
        assert err.value.rpc_message and raw_conn.is_open
    else:
        assert not raw_conn.is_open  # the pool will reopen it


async def test_jsonrpc_error_keeps_data(raw_conn: McpConnection) -> None:
    with pytest.raises(McpCallError) as err:
        await raw_conn.send("tools/call", case("server_error_like_sdk"), rid())
    assert err.value.rpc_message == "Connection closed" and err.value.rpc_data == {"why": "server says so"}


async def test_timeout(raw_conn: McpConnection) -> None:
    with pytest.raises(McpCallError) as err:
        await raw_conn.send("tools/call", case("slow"), rid(), timeout_s=0.3)
    assert err.value.code == "timeout"


async def test_malformed_listing_is_invalid_result(raw_conn: McpConnection) -> None:
    with pytest.raises(McpCallError) as err:
        await raw_conn.list_tools()
    assert err.value.code == "invalid_result"


async def _legacy_endpoint(request: Request) -> Response:
    """A pre-2026 server: no ``server/discover``, an ``initialize`` handshake instead."""
    message = await request.json()
    if "id" not in message:
        return Response(status_code=202)
    request_id, method = message["id"], message.get("method")
    if method == "initialize":
        result = types.InitializeResult(
            protocol_version="2025-11-25",
            capabilities=types.ServerCapabilities(tools=types.ToolsCapability()),
            server_info=types.Implementation(name="legacy", version="1"),
        ).model_dump(by_alias=True, mode="json", exclude_none=True)
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": result})
    if method == "tools/call":
        return JSONResponse({"jsonrpc": "2.0", "id": request_id, "result": {"content": [], "odd": True}})
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


async def test_falls_back_to_legacy_handshake() -> None:
    server = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", _legacy_endpoint, methods=["POST"])]))
    try:
        async with McpConnection(server.url, timeout_s=5) as connection:
            assert connection.protocol_version == "2025-11-25"
            raw = await connection.send("tools/call", {"name": "x", "arguments": {}}, "legacy-1")
            assert raw == {"content": [], "odd": True}
        assert [r.method for r in server.log.records()] == ["server/discover", "initialize", "tools/call"]
        assert server.log.records("tools/call")[0].params == {"name": "x", "arguments": {}}  # no 2026 _meta
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------------------------


async def test_pool_reuses_per_user_and_server(demo: DemoServerHandle) -> None:
    pool = ConnectionPool()
    try:
        a1 = await pool.get("alice", "srv-1", demo.url)
        a2 = await pool.get("alice", "srv-1", demo.url)
        b1 = await pool.get("bob", "srv-1", demo.url)
        a3 = await pool.get("alice", "srv-2", demo.url)
        assert a1 is a2
        assert b1 is not a1 and a3 is not a1 and a3 is not b1
        assert len(pool) == 3
        raw = await a1.send("tools/call", {"name": "echo", "arguments": {"text": "x"}}, rid())
        assert text_of(raw) == "x"
    finally:
        await pool.close_all()
    assert not a1.is_open and not b1.is_open and not a3.is_open and len(pool) == 0
    with pytest.raises(RuntimeError):
        await pool.get("alice", "srv-1", demo.url)


async def test_pool_opens_once_under_concurrency(demo: DemoServerHandle) -> None:
    opened: list[McpConnection] = []

    def factory(url: str) -> McpConnection:
        connection = McpConnection(url, timeout_s=10)
        opened.append(connection)
        return connection

    pool = ConnectionPool(factory=factory)
    try:
        got = await asyncio.gather(*(pool.get("alice", "srv", demo.url) for _ in range(8)))
        assert len(opened) == 1 and all(c is opened[0] for c in got)
        discovers = [r for r in demo.log.records("server/discover")]
        assert len(discovers) == 1
    finally:
        await pool.close_all()


async def test_pool_reopens_dead_or_moved_connections(demo: DemoServerHandle) -> None:
    pool = ConnectionPool()
    other = serve_in_thread()
    try:
        first = await pool.get("alice", "srv", demo.url)
        await first.close()  # died
        second = await pool.get("alice", "srv", demo.url)
        assert second is not first and second.is_open
        moved = await pool.get("alice", "srv", other.url)  # the server's URL was changed
        assert moved is not second and not second.is_open and moved.is_open
    finally:
        await pool.close_all()
        other.stop()


async def test_pool_closes_idle_connections(demo: DemoServerHandle) -> None:
    pool = ConnectionPool(idle_s=0.2)
    try:
        connection = await pool.get("alice", "srv", demo.url)
        for _ in range(100):
            if not connection.is_open:
                break
            await asyncio.sleep(0.05)
        assert not connection.is_open and len(pool) == 0
        fresh = await pool.get("alice", "srv", demo.url)
        assert fresh is not connection and fresh.is_open
    finally:
        await pool.close_all()


async def test_pool_keeps_busy_connections(raw_server: DemoServerHandle) -> None:
    pool = ConnectionPool(idle_s=0.2)
    try:
        connection = await pool.get("alice", "raw", raw_server.url)
        slow = asyncio.create_task(connection.send("tools/call", case("slow"), rid(), timeout_s=1.0))
        await asyncio.sleep(0.6)
        assert connection.is_open and connection.in_flight == 1
        with pytest.raises(McpCallError):
            await slow
    finally:
        await pool.close_all()


async def test_pool_get_failure_is_not_cached() -> None:
    pool = ConnectionPool(timeout_s=5)
    url = f"http://127.0.0.1:{free_port()}/mcp"
    try:
        with pytest.raises(McpCallError) as err:
            await pool.get("alice", "srv", url)
        assert err.value.code == "transport_error" and len(pool) == 0
    finally:
        await pool.close_all()


def test_origin_of_remembers_a_url_and_never_a_refusal():
    """origin_of is asked for the same few URLs every round (issue 30): it remembers each one's
    origin (up to 2,048 characters), and gives a longer URL's or a refused URL's answer as before,
    every time."""
    from mrtrweb.mcp import errors

    errors._origin_remembered.cache_clear()
    for _ in range(3):
        assert errors.origin_of("HTTPS://MCP.Example.com/mcp?x=1") == "https://mcp.example.com:443"
        assert errors.origin_of("http://bücher.example:8080/" + "p" * 3000) == "http://xn--bcher-kva.example:8080"
        with pytest.raises(ValueError):
            errors.origin_of("ftp://mcp.example/")
        with pytest.raises(ValueError):
            errors.origin_of("http://mcp.example:99999/")
    info = errors._origin_remembered.cache_info()
    assert (info.hits, info.currsize) == (2, 1)


async def test_a_release_whose_timer_fires_late_keeps_a_connection_handed_out_after_it_was_asked(
        demo: DemoServerHandle) -> None:
    """The release is judged by *when* the connection was last used, not by how long ago: a
    hand-out right after the release was asked keeps it, however late the timer fires (ci33: a
    timer 10 ms late on a loaded machine closed a connection a page had just been handed)."""
    pool = ConnectionPool()
    try:
        conn = await pool.get("alice", "srv", demo.url)
        assert pool.release("alice", "srv", conn, after_s=0.05, stateless=[conn.protocol_version])
        await asyncio.sleep(0.005)
        assert await pool.get("alice", "srv", demo.url) is conn  # a page, just after the ask
        time.sleep(0.2)  # the loop busy: the release's timer fires 150 ms late
        await asyncio.sleep(0.05)
        assert pool.released == 0 and conn.is_open
        # unused after the ask: released when the timer fires, late or not
        assert pool.release("alice", "srv", conn, after_s=0.05, stateless=[conn.protocol_version])
        time.sleep(0.2)
        await asyncio.sleep(0.05)
        assert pool.released == 1
    finally:
        await pool.close_all()
