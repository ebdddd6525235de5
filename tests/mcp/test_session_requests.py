"""Session-level server requests (issue 15 item 2): a request a 2025-11-25 server sends on a call's
own response stream is a round of that call; one related to no call (the standalone GET stream,
after ``initialized``, during a call but not on its stream) is answered at session level by
policy -- ``roots/list`` with the server's configured roots where a tenant admin allowed roots,
else an error; ``elicitation/create`` / ``sampling/createMessage`` refused -- and logged with the
method and the server's origin only.

Against a real SDK server of our own on loopback (:mod:`tests.session_server`), first through
:class:`~mrtrweb.mcp.McpConnection` alone, then through the product (operations, pages, the
headless client). The reference everything server is in ``tests/interop/test_thirdparty.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.test import AsyncClient
from mcp.client.streamable_http import StreamableHTTPTransport
from mcp.shared._context_streams import ContextReceiveStream
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from mrtrweb import operations
from mrtrweb.mcp import McpConnection
from mrtrweb.mcp.server_requests import OUTSIDE_A_CALL, ROOTS_NOT_ALLOWED, SENDING, OpenCall
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.session_server import serve_session_server

ROOTS = [{"uri": "file:///srv/project", "name": "project"}]
SECRET_NOTE = "note-7f3a-never-logged"
NOT_ALLOWED = {"code": -32600, "message": f"roots/list refused by the client: {ROOTS_NOT_ALLOWED}"}


@pytest.fixture(scope="module")
def srv():
    server = serve_session_server()
    yield server
    server.handle.stop()


async def _aside(srv, count: int) -> list[dict[str, Any]]:
    return await sync_to_async(srv.wait_aside, thread_sensitive=False)(count)


def _provider(seen: list[Any], roots: list[dict[str, Any]] = ROOTS):
    """A session_roots provider noting the call each request was related to (None: none)."""
    async def provide() -> dict[str, Any]:
        seen.append(SENDING.get())
        return {"roots": roots}
    return provide


def _handler(asked: list[str], answer: dict[str, Any]):
    async def handle(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(method)
        return answer
    return handle


def _text(raw: dict[str, Any]) -> str:
    return raw["content"][0]["text"]


# -- the SDK's context hand-over the routing relies on (mcp==2.3), pinned ------------------------------

def test_sdk_carries_the_senders_context_to_a_server_requests_handler() -> None:
    """:mod:`mrtrweb.mcp.server_requests` knows a request's stream from the SDK passing the sender's
    contextvars along: the POST task starts in the context of the request's writer, what its stream
    carries is sent from it, and the dispatcher runs the handler in the sender's snapshot. The
    functional tests below fail if the hand-over stops; this says where."""
    assert "last_context" in ContextReceiveStream.__slots__
    assert "sender_ctx" in inspect.signature(JSONRPCDispatcher._spawn).parameters
    assert "last_context" in inspect.getsource(StreamableHTTPTransport.post_writer)


# -- the connection alone --------------------------------------------------------------------------------

async def test_roots_after_initialized_get_the_configured_roots(srv):
    srv.clear()
    seen: list[Any] = []
    async with McpConnection(srv.url, timeout_s=10, declare={"roots"}, session_roots=_provider(seen)) as conn:
        assert conn.protocol_version == "2025-11-25"
        [entry] = await _aside(srv, 1)
    assert entry == {"when": "initialized", "method": "roots/list", "result": {"roots": ROOTS}}
    assert seen == [None]  # related to no call


@pytest.mark.parametrize("declare, provider", [((), True), (("roots",), False)], ids=["not-declared", "no-provider"])
async def test_roots_outside_a_call_are_refused_where_not_allowed(srv, declare, provider):
    srv.clear()
    seen: list[Any] = []
    async with McpConnection(srv.url, timeout_s=10, declare=declare,
                             session_roots=_provider(seen) if provider else None):
        [entry] = await _aside(srv, 1)
    assert entry == {"when": "initialized", "method": "roots/list", "error": NOT_ALLOWED}
    assert seen == []


async def test_roots_asked_aside_during_a_call_are_not_a_round_of_it(srv):
    """The everything server's case: a long call that never asked, and a roots/list on the
    standalone stream while it runs. The call's handler is never asked; the roots go out at
    session level; the call completes."""
    srv.clear()
    seen: list[Any] = []
    asked: list[str] = []
    async with McpConnection(srv.url, timeout_s=10, declare={"roots"}, session_roots=_provider(seen)) as conn:
        await _aside(srv, 1)  # the initialized one
        raw = await conn.send("tools/call", {"name": "roots_aside", "arguments": {}}, "aside-1",
                              on_server_request=_handler(asked, {"roots": []}))
        slow = await conn.send("tools/call", {"name": "slow", "arguments": {"seconds": 0.5}}, "slow-1",
                               on_server_request=_handler(asked, {"roots": []}))
    assert json.loads(_text(raw)) == {"roots": ROOTS}
    assert _text(slow) == "worked 0.5s"
    assert asked == [] and seen == [None, None]
    assert [e["when"] for e in srv.aside] == ["initialized", "roots_aside"]


async def test_roots_on_the_calls_stream_are_a_round_of_that_call(srv):
    srv.clear()
    seen: list[Any] = []
    asked: list[str] = []
    async with McpConnection(srv.url, timeout_s=10, declare={"roots"}, session_roots=_provider(seen)) as conn:
        await _aside(srv, 1)
        raw = await conn.send("tools/call", {"name": "roots_on_the_call", "arguments": {}}, "on-call-1",
                              on_server_request=_handler(asked, {"roots": [{"uri": "file:///from-the-card"}]}))
    assert _text(raw) == 'roots: [{"uri": "file:///from-the-card"}]'
    assert asked == ["roots/list"] and seen == [None]  # only the initialized one went to the session level


@pytest.mark.parametrize("method", ["elicitation/create", "sampling/createMessage"])
async def test_elicitation_or_sampling_outside_a_call_is_refused_and_logged_without_values(srv, caplog, method):
    srv.clear()
    asked: list[str] = []
    caplog.set_level(logging.DEBUG)
    async with McpConnection(srv.url, timeout_s=10, declare={"roots", "sampling"},
                             session_roots=_provider([])) as conn:
        raw = await conn.send("tools/call", {"name": "ask_after", "arguments": {"method": method, "note": SECRET_NOTE}},
                              "after-1", on_server_request=_handler(asked, {"action": "decline"}))
        assert _text(raw) == "asked later"
        origin = conn.origin
        after = [e for e in await asyncio.to_thread(srv.wait_aside, 2) if e["when"] == "after"]
    assert after == [{"when": "after", "method": method,
                      "error": {"code": -32600, "message": f"{method} refused by the client: {OUTSIDE_A_CALL}"}}]
    assert asked == []
    said = [r.getMessage() for r in caplog.records if r.name == "mrtrweb.mcp.connection"]
    assert f"session-level {method} from {origin} refused: {OUTSIDE_A_CALL}" in said
    assert not [r for r in caplog.records if r.name.startswith("mrtrweb") and SECRET_NOTE in r.getMessage()]


@pytest.mark.parametrize("tool, method, answer", [
    ("elicit_aside", "elicitation/create", {"action": "accept", "content": {"ticket": "CHG-7"}}),
    ("sample_aside", "sampling/createMessage", {"role": "assistant", "content": {"type": "text", "text": "ok"},
                                                 "model": "m"})])
async def test_elicitation_or_sampling_aside_during_the_only_open_call_is_a_round_of_it(srv, caplog, tool, method,
                                                                                          answer):
    """As the conformance suite's elicitation-sep1034-client-defaults asks (the TypeScript SDK's
    ``server.elicitInput`` without ``relatedRequestId`` goes on the standalone stream)."""
    srv.clear()
    asked: list[str] = []
    caplog.set_level(logging.INFO)
    async with McpConnection(srv.url, timeout_s=10, declare={"roots", "sampling"},
                             session_roots=_provider([])) as conn:
        raw = await conn.send("tools/call", {"name": tool, "arguments": {"note": SECRET_NOTE}}, f"{tool}-1",
                              on_server_request=_handler(asked, answer))
    assert asked == [method]
    assert "error" not in json.loads(_text(raw))
    assert any("came on the standalone stream while one call is open" in r.getMessage() for r in caplog.records)


async def test_an_elicitation_aside_while_two_calls_are_open_is_refused(srv):
    """Which of two calls asked cannot be told: refused, never guessed."""
    srv.clear()
    asked: list[str] = []
    async with McpConnection(srv.url, timeout_s=10, declare={"roots", "sampling"},
                             session_roots=_provider([])) as conn:
        slow = asyncio.ensure_future(conn.send("tools/call", {"name": "slow", "arguments": {"seconds": 3}}, "slow-1",
                                               on_server_request=_handler(asked, {"action": "decline"})))
        await asyncio.sleep(0.3)
        raw = await conn.send("tools/call", {"name": "elicit_aside", "arguments": {"note": "x"}}, "aside-2",
                              on_server_request=_handler(asked, {"action": "decline"}))
        await slow
    assert json.loads(_text(raw)) == {"code": -32600,
                                      "message": f"elicitation/create refused by the client: {OUTSIDE_A_CALL}"}
    assert asked == []


async def test_a_form_elicitation_on_the_calls_stream_still_reaches_the_call(srv):
    srv.clear()
    asked: list[str] = []
    async with McpConnection(srv.url, timeout_s=10) as conn:
        raw = await conn.send("tools/call", {"name": "elicit_on_the_call", "arguments": {}}, "elicit-1",
                              on_server_request=_handler(asked, {"action": "accept", "content": {"ticket": "CHG-9"}}))
    assert (_text(raw), asked) == ("accept: CHG-9", ["elicitation/create"])


async def test_a_request_whose_call_has_ended_is_refused():
    """A request carried by a call that is no longer open (its response came, or it timed out) is
    refused, never handed to a newer call or to the session level."""
    conn = McpConnection("http://127.0.0.1:9/mcp", declare={"roots"}, session_roots=_provider([]))
    gone = OpenCall("tools/call", _handler([], {}), 10.0)
    token = SENDING.set(gone)
    try:
        out = await conn._route("roots/list", {})
    finally:
        SENDING.reset(token)
    assert out.code == -32600 and out.message == "roots/list refused by the client: the call it came with has ended"


# -- through the product ---------------------------------------------------------------------------------

pytest_db = pytest.mark.django_db(transaction=True)


def _server(seeded, srv, **fields) -> McpServer:
    srv.clear()
    return McpServer.objects.create(tenant=seeded["servers"]["acme"].tenant, name="Session requests", url=srv.url,
                                    **fields)


async def _run(user, server: McpServer, tool: str, args: dict[str, str]) -> Operation:
    client = AsyncClient()
    await client.aforce_login(user)
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    deadline = time.monotonic() + 20
    while True:
        op = await Operation.objects.aget(pk=op_id)
        if op.status in Operation.TERMINAL or op.status == Operation.Status.AWAITING_INPUT:
            return op
        assert time.monotonic() < deadline, f"operation stuck in {op.status}"
        await asyncio.sleep(0.05)


@pytest_db
async def test_an_operation_whose_server_asks_roots_aside_completes_without_a_round(seeded, srv, caplog):
    server = await sync_to_async(_server)(seeded, srv, allow_roots=True, roots=ROOTS)
    caplog.set_level(logging.INFO)
    op = await _run(seeded["users"]["alice"], server, "roots_aside", {})
    assert (op.status, op.rounds) == (Operation.Status.COMPLETED, 0), op.error_message
    assert json.loads(op.result["content"][0]["text"]) == {"roots": ROOTS}
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="received").aexists()
    # the operation's connections declared roots: every roots/list they got was answered with the roots
    ours = [e for e in srv.aside if "result" in e]
    assert ours and all(e["result"] == {"roots": ROOTS} for e in ours)
    said = [r.getMessage() for r in caplog.records if r.name == "mrtrweb.session_roots"]
    assert said and all(m.startswith(f"roots/list from {server.origin} outside a call: answered with the 1 "
                                     "configured root(s) (sha256:") for m in said)
    assert "/srv/project" not in caplog.text
    await operations.wait_idle(timeout=15)


@pytest_db
async def test_an_operation_whose_server_asks_roots_aside_where_not_allowed_gets_an_error(seeded, srv):
    server = await sync_to_async(_server)(seeded, srv, roots=ROOTS)
    op = await _run(seeded["users"]["alice"], server, "roots_aside", {})
    assert (op.status, op.rounds) == (Operation.Status.COMPLETED, 0), op.error_message
    assert json.loads(op.result["content"][0]["text"]) == NOT_ALLOWED
    # this call's own ask (a session of an earlier test may still be re-asking its initialized roots)
    asked_aside = [e for e in srv.aside if e["when"] == "roots_aside"]
    assert asked_aside and all(e.get("error") == NOT_ALLOWED for e in asked_aside)
    await operations.wait_idle(timeout=15)


@pytest_db
async def test_roots_on_the_calls_stream_are_still_a_round_with_its_card(seeded, srv):
    server = await sync_to_async(_server)(seeded, srv, allow_roots=True, roots=ROOTS)
    op = await _run(seeded["users"]["alice"], server, "roots_on_the_call", {})
    assert (op.status, op.rounds) == (Operation.Status.AWAITING_INPUT, 1)
    assert await AuditEvent.objects.filter(operation_id=op.id, event="received", reason__startswith="roots/list").aexists()
    assert await operations.stop_operation(await Operation.objects.select_related("server", "tenant", "user").aget(
        pk=op.id))
    await operations.wait_idle(timeout=15)


@pytest_db
async def test_the_session_roots_are_read_when_the_server_asks(seeded, srv, caplog):
    """A pooled connection keeps its provider; the roots and the allowance are the row's when the
    server asks, not when the connection opened."""
    from mrtrweb.servers.session_roots import configured_roots

    server = await sync_to_async(_server)(seeded, srv, allow_roots=True, roots=ROOTS)
    provide = configured_roots(server)
    assert await provide() == {"roots": ROOTS}
    await McpServer.objects.filter(pk=server.pk).aupdate(roots=[{"uri": "file:///data"}])
    assert await provide() == {"roots": [{"uri": "file:///data"}]}
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_roots=False)
    refused = await provide()
    assert (refused.code, refused.message) == (NOT_ALLOWED["code"], NOT_ALLOWED["message"])
    await McpServer.objects.filter(pk=server.pk).adelete()
    assert (await provide()).message == NOT_ALLOWED["message"]


@pytest_db
def test_headless_a_call_with_roots_asked_aside_exits_0(seeded, srv, capsys):
    from mrtrweb.headless import client as headless
    from mrtrweb.models import Tenant

    srv.clear()
    tenant, _ = Tenant.objects.get_or_create(slug="headless", defaults={"name": "Headless clients"})
    row = headless.server_for(srv.url, tenant)
    row.allow_roots, row.roots = True, ROOTS
    row.save()
    capsys.readouterr()
    call_command("mrtr_client", srv.url, "--tool", "roots_aside", "--args", "{}", "--json")  # exit 0: no SystemExit
    [op] = json.loads(capsys.readouterr().out)["operations"]
    assert (op["status"], op["rounds"], op["exit_code"]) == ("completed", 0, 0)
    assert json.loads(op["result"]["content"][0]["text"]) == {"roots": ROOTS}
