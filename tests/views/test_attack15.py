"""Attacks on what issue 15 added, as a hostile MCP server, browser or careless admin would make them.

Every test here is a claim that failed on a fault (then fixed, or marked strict xfail with the
fault named) or a probe that held. Real servers on loopback (:mod:`tests.attack15_servers`): small
SDK ``MCPServer`` / low-level ``Server`` instances and raw JSON-RPC endpoints (2025-11-25 and
2026-07-28) that misbehave on purpose, over Streamable HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
import uuid

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.demo.server import serve_in_thread
from mrtrweb.models import McpServer, Operation
from mrtrweb.site.asgi import application
from tests.attack15_servers import (
    FLOOD, INJECT_ARGS, INJECT_SCHEMA, ROOTS_FLOOD, URL_ATTACKS, _downgrading_server, _flooding_server,
    _injection_server, _modern_asker, _session_flooder, _url_after_round, _url_hostile_legacy,
)
from tests.answering import post_answer, until

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _login(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/mcp/")  # the CSRF cookie
    return client


def _ws(client: AsyncClient) -> WebsocketCommunicator:
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    return WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])


async def _drain(ws: WebsocketCommunicator, quiet_s: float = 1.5, cap_s: float = 20.0) -> list[dict]:
    """Every message the socket gets until it is quiet for ``quiet_s`` (at most ``cap_s``)."""
    got: list[dict] = []
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline and not await ws.receive_nothing(timeout=quiet_s):
        got.append(await ws.receive_json_from(timeout=5))
    return got


async def _until(op: Operation, what, timeout: float = 20.0) -> Operation:
    return await until(op, what, timeout)


# --------------------------------------------------------------------------------------------
# notifications/*/list_changed floods
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flooder():
    handle = serve_in_thread(server=_flooding_server())
    yield handle
    handle.stop()


@pytest.mark.parametrize("protocol", ["auto", "2025-11-25"])
async def test_a_list_changed_flood_is_coalesced_not_pushed_and_logged_each_time(seeded, flooder, protocol, caplog,
                                                                                  monkeypatch):
    """2,000 ``tools/list_changed`` in a burst reach the open page as a few pushes (it re-reads the
    listing once per coalescing window, not 2,000 times), the log says so in one line per callback,
    and the flood does not crowd the person's other pushes (the operation's own update still arrives).

    How many windows a burst spans depends on how fast the machine is (a loaded machine takes longer
    to read 4,000 notifications), so the test asserts the mechanism, not a count: each callback is a
    log line, the lines are at least :data:`COALESCE_S` apart (but the one a closing connection makes
    at once for what is pending), they stand for every notification read, and each push is a callback."""
    from mrtrweb.mcp.list_changed import COALESCE_S, ListingWatch

    stop_watching = ListingWatch._stop_watching

    async def marked_stop(self):  # marks where a connection closes: its flush of the pending call is due now
        logging.getLogger("mrtrweb.mcp.connection").info("test: %s stops watching", self.origin)
        await stop_watching(self)

    monkeypatch.setattr(ListingWatch, "_stop_watching", marked_stop)
    alice_user = seeded["users"]["alice"]
    alice = await _login(alice_user)
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name=f"Flooder {protocol}", url=flooder.url,
                                             protocol=protocol)
    ws = _ws(alice)
    assert (await ws.connect())[0]
    assert (await alice.get(f"/mcp/servers/{server.pk}/")).status_code == 200  # the page is open, watched
    with caplog.at_level(logging.INFO, logger="mrtrweb.mcp.connection"):
        resp = await alice.post(f"/mcp/servers/{server.pk}/tools/flood/", {})
        assert resp.status_code == 302
        op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
        op = await _until(op, lambda o: o.status in Operation.TERMINAL)
        assert op.status == Operation.Status.COMPLETED, op.error_message
        got = await _drain(ws)
    listings = [m for m in got if m.get("type") == "listing"]
    assert all(m == {"type": "listing", "server": server.pk, "kind": "tools"} for m in listings)
    assert any(m.get("type") == "operation" and m.get("status") == "completed" for m in got), \
        "the operation's own update was crowded out by the flood"
    records = [r for r in caplog.records if r.name == "mrtrweb.mcp.connection"
               and ("says its tools changed" in r.getMessage() or "stops watching" in r.getMessage())]
    said = [r for r in records if "says its tools changed" in r.getMessage()]
    counts = [int(re.search(r"\((\d+) notifications?\)", r.getMessage())[1]) for r in said]
    assert said and all(n >= 1 for n in counts)
    # every notification read is in exactly one call (both ways: the session stream and the listen stream)
    assert sum(counts) <= 2 * FLOOD and sum(counts) > len(said), f"{counts}: the burst was not coalesced"
    assert 1 <= len(listings) <= len(said), f"{len(listings)} listing pushes for {len(said)} callbacks"
    for before, after in zip(records, records[1:]):
        if "stops watching" in before.getMessage() or "stops watching" in after.getMessage():
            continue  # the closing connection's call of what is pending comes at once
        gap = after.created - before.created
        assert gap >= COALESCE_S - 0.01, f"two callbacks {gap:.3f} s apart (at least {COALESCE_S}): {counts}"
    await ws.disconnect()
    await operations.wait_idle()


# --------------------------------------------------------------------------------------------
# URL-required errors (-32042): forever, after an MRTR round, after Stop
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def url_legacy():
    handle = _url_hostile_legacy()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def url_modern():
    handle = _url_after_round()
    yield handle
    handle.stop()


async def _start_op(client: AsyncClient, server: McpServer, tool: str, data: dict | None = None) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", data or {})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def _answer_round(client: AsyncClient, op: Operation, data: dict) -> None:
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200  # the card shown: its receipt
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", dict(data, round=str(op.rounds)))
    assert resp.status_code == 302, resp.content.decode()[:2000]


async def test_a_server_answering_url_required_forever_is_bounded_and_each_round_reaches_the_person(
        seeded, url_legacy):
    from mrtrweb import conf

    alice = await _login(seeded["users"]["alice"])
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Forever", url=url_legacy.url)
    url_legacy.log.clear()
    op = await _start_op(alice, server, "forever")
    limit = int(conf.get("MAX_ROUNDS"))
    for n in range(1, limit + 1):
        op = await _until(op, lambda o: o.status != Operation.Status.RUNNING)
        if op.status != Operation.Status.AWAITING_INPUT:
            break
        assert op.rounds == n
        page = (await alice.get(f"/mcp/operations/{op.id}/")).content.decode()
        assert f"https://auth.example.test/again/{url_legacy.log.tool_calls('forever').__len__()}" in page
        await _answer_round(alice, op, {"action": "accept"})
    op = await _until(op, lambda o: o.status in Operation.TERMINAL)
    assert op.status == Operation.Status.FAILED and op.error_code == "mrtr_round_limit_exceeded", op.error_code
    assert op.rounds == limit
    assert len(url_legacy.log.tool_calls("forever")) == limit + 1  # the first, and once per round answered
    await operations.wait_idle()


async def test_url_required_after_an_mrtr_round_never_sends_its_answers_again(seeded, url_modern):
    alice = await _login(seeded["users"]["alice"])
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="After round", url=url_modern.url)
    url_modern.log.clear()
    op = await _until(await _start_op(alice, server, "ask_then_url"), lambda o: o.status != Operation.Status.RUNNING)
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1
    await _answer_round(alice, op, {"action": "accept", "in-pin-pin": "4321"})
    op = await _until(op, lambda o: o.rounds == 2 and o.status != Operation.Status.RUNNING)
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_message
    page = (await alice.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "https://bank.example.test/confirm" in page and "4321" not in page
    await _answer_round(alice, op, {"action": "accept"})
    op = await _until(op, lambda o: o.rounds == 3 or o.status in Operation.TERMINAL)
    calls = url_modern.log.tool_calls("ask_then_url")
    assert len(calls) == 3
    first, retry, again = calls
    assert retry.has_input_responses and retry.has_request_state
    assert not again.has_input_responses and not again.has_request_state  # the request, as first sent
    assert {k: v for k, v in again.params.items() if k != "_meta"} == \
        {k: v for k, v in first.params.items() if k != "_meta"}
    assert "4321" not in str(again.params)
    await operations.wait_idle()


@pytest.mark.parametrize("kind", ["url_required", "input_required"])
async def test_a_round_arriving_after_stop_is_not_shown(seeded, url_legacy, url_modern, monkeypatch, kind):
    """The person pressed Stop while the call was in flight; the server's -32042 (2025-11-25) or
    ``input_required`` (2026-07-28) arrives before the worker's next stop poll (widened here to make
    the window certain): no card is shown, the operation ends stopped."""
    from mrtrweb.operations import calls

    monkeypatch.setattr(calls, "STOP_POLL_S", 30.0)
    mcp, tool = (url_legacy, "url_when_told") if kind == "url_required" else (url_modern, "ask_when_told")
    mcp.go.clear()
    alice = await _login(seeded["users"]["alice"])
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Told", url=mcp.url)
    op = await _start_op(alice, server, tool)
    await asyncio.sleep(0.5)
    assert (await alice.post(f"/mcp/operations/{op.id}/stop/")).status_code == 302
    mcp.go.set()
    op = await _until(op, lambda o: o.status != Operation.Status.RUNNING)
    assert op.status == Operation.Status.DENIED and op.error_code == "denied", (op.status, op.rounds)
    assert op.rounds == 0
    events = [e async for e in operations_events(op)]
    assert "received" not in [e.event for e in events]
    await operations.wait_idle()


async def operations_events(op: Operation):
    from mrtrweb.models import AuditEvent

    async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence"):
        yield e


@pytest.mark.parametrize("kind", sorted(URL_ATTACKS))
async def test_a_hostile_url_required_error_is_refused_or_shown_safely(seeded, url_legacy, kind, caplog):
    """Every URL a -32042 carries gets the gate's URL checks (https only, no user info, IDN warned);
    server text on the card is escaped with controls made visible; nothing of it (id, message,
    URL) reaches the log; never a 500."""
    alice = await _login(seeded["users"]["alice"])
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Bad URL", url=url_legacy.url)
    with caplog.at_level(logging.DEBUG):
        op = await _until(await _start_op(alice, server, "bad_url", {"arg-kind": kind}),
                          lambda o: o.status != Operation.Status.RUNNING)
        resp = await alice.get(f"/mcp/operations/{op.id}/")
    assert resp.status_code == 200
    page = resp.content.decode()
    elicitation, code = URL_ATTACKS[kind]
    if code is not None:
        assert op.status == Operation.Status.FAILED and op.error_code == code, (op.status, op.error_code)
        assert 'class="open-url"' not in page
    else:
        assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
        assert page.count('class="open-url"') == 1
        if kind in ("idn", "unicode_host"):
            assert "may imitate another site" in page and "xn--pypal-4ve.example" in page
    assert "<script>alert" not in page and "<b>x</b>" not in page and "\x1b" not in page and "\u202e" not in page
    assert 'href="javascript:' not in page and 'href="data:' not in page and 'href="file:' not in page
    assert "evil.example.test/\x07" not in page
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("mrtrweb"))
    assert "\x1b" not in logged and "\u202e" not in logged and "mmmmmmmmmm" not in logged
    assert "evil.example.test" not in logged and "passwd" not in logged
    await operations.wait_idle()


# --------------------------------------------------------------------------------------------
# session-level server requests (2025-11-25): floods, and nothing reaches a person
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def session_flooder():
    srv = _session_flooder()
    yield srv
    srv.handle.stop()


async def test_a_session_level_roots_flood_is_answered_without_flooding_the_log(seeded, session_flooder, caplog):
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Roots flood", url=session_flooder.url,
                                             allow_roots=True, roots=[{"uri": "file:///srv/project", "name": "p"}])
    alice = await _login(seeded["users"]["alice"])
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="mrtrweb"):
        op = await _until(await _start_op(alice, server, "roots_flood"),
                          lambda o: o.status != Operation.Status.RUNNING, timeout=60)
    took = time.monotonic() - started
    assert (op.status, op.rounds) == (Operation.Status.COMPLETED, 0), op.error_message
    assert op.result["content"][0]["text"] == f"answered {ROOTS_FLOOD}"
    lines = [r for r in caplog.records if "roots/list" in r.getMessage()]
    assert len(lines) <= 20, f"{len(lines)} log lines for {ROOTS_FLOOD + 1} roots/list in {took:.1f}s"
    assert "/srv/project" not in caplog.text
    await operations.wait_idle(timeout=15)


@pytest.fixture(scope="module")
def asks_after():
    """tests/session_server.py: its ``ask_after`` tool asks once its call is over."""
    from tests.session_server import serve_session_server

    srv = serve_session_server()
    yield srv
    srv.handle.stop()


@pytest.mark.parametrize("method", ["elicitation/create", "sampling/createMessage"])
async def test_an_elicitation_outside_a_call_reaches_no_person(seeded, asks_after, method):
    """``elicitation/create`` / ``sampling/createMessage`` on the standalone stream once no call is
    open: refused to the server; the person's socket gets no card, the operation no round, the
    audit no ``received``. (During the only open call such a request is that call's round:
    tests/mcp/test_session_requests.py.)"""
    from mrtrweb.models import AuditEvent

    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name=f"Asks after {method}",
                                             url=asks_after.url, allow_roots=True, allow_sampling=True)
    alice = await _login(seeded["users"]["alice"])
    ws = _ws(alice)
    assert (await ws.connect())[0]
    asks_after.clear()
    op = await _until(await _start_op(alice, server, "ask_after", {"arg-method": method, "arg-note": "<b>secret-note</b>"}),
                      lambda o: o.status in Operation.TERMINAL, timeout=30)
    assert (op.status, op.rounds) == (Operation.Status.COMPLETED, 0), op.error_message
    deadline = time.monotonic() + 15
    while not (after := [e for e in asks_after.aside if e["when"] == "after"]) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # the listing's and the call's sessions each also answered roots
    # the server got no answer: the operation's own session refuses it, or is closed already (a
    # legacy operation's connection ends with its call); the refusal's text: test_session_requests
    assert after and set(after[0]) == {"when", "method", "error"}, after
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="received").aexists()
    page = (await alice.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert 'name="action"' not in page  # no card to answer
    got = await _drain(ws, quiet_s=1.0)
    assert all(m.get("type") in ("operation", "progress", "pong") for m in got), got
    assert all(m.get("status") != "awaiting_input" for m in got if m.get("type") == "operation")
    # the note reaches the page only as what the person sent ("What was sent", issue 28), never in a card
    import re

    unsent = [re.sub(r'<details class="sent-arguments">.*?</details>', "", str(m), flags=re.S) for m in got]
    assert not any("secret-note" in m for m in unsent)
    await ws.disconnect()
    await operations.wait_idle(timeout=15)


# --------------------------------------------------------------------------------------------
# x-mcp-header (SEP-2243): header injection through a server's annotations and the arguments
# --------------------------------------------------------------------------------------------


async def test_x_mcp_header_names_never_set_or_split_the_products_own_headers():
    """Annotations naming Authorization, Host, Mcp-Session-Id, Content-Length, Mcp-Protocol-Version
    or Cookie, with CRLF and colons in the values, give only ``Mcp-Param-*`` headers (the CRLF one
    base64-encoded): the product's own headers are untouched and no header is injected."""
    from mrtrweb.mcp import McpConnection

    handle = _injection_server([{"name": "inject", "inputSchema": INJECT_SCHEMA}])
    try:
        async with McpConnection(handle.url, timeout_s=10) as conn:
            assert [t["name"] for t in await conn.list_tools()] == ["inject"]
            raw = await conn.send("tools/call", {"name": "inject", "arguments": INJECT_ARGS}, f"t-{uuid.uuid4()}")
        assert raw["content"][0]["text"] == "inject done"  # the server's own header check accepted them
        [(_, headers)] = [s for s in handle.seen if s[0] == "tools/call"]
        assert "x-evil" not in headers and all(len(v) == 1 for v in headers.values()), headers
        assert "authorization" not in headers and "cookie" not in headers and "mcp-session-id" not in headers
        assert headers["host"] == [handle.url.split("/")[2]]
        assert headers["mcp-protocol-version"] == ["2026-07-28"]
        assert headers["mcp-param-authorization"] == [
            "=?base64?" + base64.b64encode(INJECT_ARGS["authorization"].encode()).decode() + "?="]
        assert headers["mcp-param-host"] == ["evil.example.test:443"]
        assert headers["mcp-param-cookie"] == ["sessionid=x; csrftoken=y"]
    finally:
        handle.stop()


async def test_a_header_map_changed_to_invalid_between_a_round_and_its_retry_refuses_the_retry(seeded):
    """The server lists ``asks`` with a valid annotation, asks a round, then (re-listed by the open
    server page) declares it invalid: the retry is refused before anything is sent, the operation
    fails with the product's own text, never a 500."""
    valid = {"name": "asks", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}}}}
    handle = _injection_server([valid])
    try:
        alice = await _login(seeded["users"]["alice"])
        acme = seeded["servers"]["acme"]
        server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Changing map", url=handle.url)
        op = await _until(await _start_op(alice, server, "asks", {"arg-region": "eu"}),
                          lambda o: o.status != Operation.Status.RUNNING)
        assert op.status == Operation.Status.AWAITING_INPUT
        handle.tools[:] = [{"name": "asks", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Bad Region"}}}}]
        page = await alice.get(f"/mcp/servers/{server.pk}/")  # the page re-reads the listing
        assert page.status_code == 200 and 'data-tool="asks"' not in page.content.decode()
        calls_before = len([s for s in handle.seen if s[0] == "tools/call"])
        assert (await alice.get(f"/mcp/operations/{op.id}/")).status_code == 200
        resp = await post_answer(alice, f"/mcp/operations/{op.id}/answer/",
                                 {"action": "accept", "round": "1", "in-go-go": "on"})
        assert resp.status_code in (302, 200, 409), resp.status_code
        op = await _until(op, lambda o: o.status in Operation.TERMINAL)
        assert op.status == Operation.Status.FAILED and op.error_code == "invalid_x_mcp_header", op.error_code
        assert "invalid x-mcp-header" in op.error_message
        assert len([s for s in handle.seen if s[0] == "tools/call"]) == calls_before  # nothing sent
        assert (await alice.get(f"/mcp/operations/{op.id}/")).status_code == 200
        await operations.wait_idle()
    finally:
        handle.stop()


async def test_coalesced_list_changed_still_tells_the_last_change(monkeypatch):
    """The coalescing of :func:`test_a_list_changed_flood_is_coalesced_not_pushed_and_logged_each_time`
    loses no change: the first notification is told at once, a burst after it once more when the
    window ends, a later one again; a call still due when the connection closes is made then."""
    from mrtrweb.mcp import McpConnection, list_changed

    monkeypatch.setattr(list_changed, "COALESCE_S", 0.3)
    told: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()

    async def record(kind: str) -> None:
        told.append((kind, loop.time()))

    conn = McpConnection("http://127.0.0.1:9/mcp", on_list_changed=record)
    start = loop.time()
    for _ in range(500):  # all before the first call runs: one call covers them
        conn._changed("tools")
    conn._changed("prompts")
    await asyncio.sleep(0.05)
    assert [k for k, _ in told] == ["tools", "prompts"]  # at once, one each
    for _ in range(500):  # within the window after that call: one more, when it ends
        conn._changed("tools")
    await asyncio.sleep(0.05)
    assert len(told) == 2
    await asyncio.sleep(0.4)
    assert [k for k, _ in told] == ["tools", "prompts", "tools"]  # the rest of the burst: once, after the window
    assert told[2][1] - start >= 0.29
    await asyncio.sleep(0.4)
    conn._changed("tools")  # a quiet window passed: told at once
    await asyncio.sleep(0.05)
    assert len(told) == 4
    conn._changed("tools")  # due in 0.3 s, but the connection closes first: told at close
    await conn.close()
    assert [k for k, _ in told] == ["tools", "prompts", "tools", "tools", "tools"]


# --------------------------------------------------------------------------------------------
# a 2026-07-28 server sending a server-to-client request on a call's stream (there are none at 2026)
# --------------------------------------------------------------------------------------------


async def test_a_server_request_on_a_2026_call_is_no_round(seeded):
    from mrtrweb.models import AuditEvent

    handle = _modern_asker()
    try:
        alice = await _login(seeded["users"]["alice"])
        acme = seeded["servers"]["acme"]
        server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Modern asker",
                                                 url=handle.url)
        op = await _until(await _start_op(alice, server, "sneaky"), lambda o: o.status != Operation.Status.RUNNING)
        assert op.rounds == 0 and op.status != Operation.Status.AWAITING_INPUT, (op.status, op.error_code)
        assert not await AuditEvent.objects.filter(operation_id=op.id, event="received").aexists()
        assert op.status == Operation.Status.COMPLETED, op.error_code
        # the SDK refuses it at 2026-07-28 (no such server request there): never answered as if asked
        assert [a.get("error", {}).get("code") for a in handle.answers] == [-32601], handle.answers
        await operations.wait_idle()
    finally:
        handle.stop()


async def test_a_listing_of_thousands_of_invalid_header_tools_does_not_flood_the_log(caplog):
    """A server listing 5,000 tools with an invalid x-mcp-header: all excluded, the log names a
    few of them and says how many more (not 5,000 warnings per connection)."""
    from mrtrweb.mcp import McpConnection

    bad = [{"name": f"bad_{i}", "inputSchema": {"type": "object", "properties": {
        "v": {"type": "string", "x-mcp-header": "Bad Header"}}}} for i in range(5000)]
    handle = _injection_server(bad + [{"name": "fine", "inputSchema": {"type": "object", "properties": {}}}])
    try:
        with caplog.at_level(logging.INFO, logger="mrtrweb.mcp"):
            async with McpConnection(handle.url, timeout_s=30) as conn:
                assert [t["name"] for t in await conn.list_tools()] == ["fine"]
                with pytest.raises(Exception) as err:
                    await conn.send("tools/call", {"name": "bad_4999", "arguments": {}}, f"t-{uuid.uuid4()}")
                assert getattr(err.value, "code", None) == "invalid_x_mcp_header"
        from mrtrweb.mcp.param_headers import LOGGED_EXCLUSIONS

        excluded = [r.getMessage() for r in caplog.records if "excluded" in r.getMessage()]
        assert len(excluded) == LOGGED_EXCLUSIONS + 1 <= 30, f"{len(excluded)} log lines"
        assert excluded[-1] == (f"{5000 - LOGGED_EXCLUSIONS} more tools excluded: their inputSchema has an "
                                "invalid x-mcp-header annotation (SEP-2243)")
    finally:
        handle.stop()


async def test_a_huge_header_argument_fails_clearly_and_is_never_logged(caplog):
    """An annotated argument of 300 kB (an HTTP header over most servers' limits; uvicorn here takes
    it): the call ends in bounded time, done or with a stable code, and the value is in no log line."""
    from mrtrweb.mcp import McpCallError, McpConnection

    handle = _injection_server([{"name": "big", "inputSchema": {"type": "object", "properties": {
        "v": {"type": "string", "x-mcp-header": "V"}}}}])
    value = "secretvalue-" + "x" * 300_000
    try:
        with caplog.at_level(logging.DEBUG):
            async with McpConnection(handle.url, timeout_s=10) as conn:
                started = time.monotonic()
                try:
                    raw = await conn.send("tools/call", {"name": "big", "arguments": {"v": value}}, f"t-{uuid.uuid4()}")
                    outcome = ("result", raw)
                except McpCallError as exc:
                    outcome = ("error", exc.code)
                took = time.monotonic() - started
        assert took < 10
        assert outcome in (("error", "transport_error"), ("error", "jsonrpc_error")) or \
            outcome[1]["content"][0]["text"] == "big done", outcome
        product = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("mrtrweb"))
        assert "secretvalue" not in product
    finally:
        handle.stop()


async def test_list_changed_from_a_server_the_person_may_no_longer_see_reaches_no_socket(seeded, flooder):
    """Alice's page watched the server; a tenant admin then disables it; the server keeps saying its
    tools changed (someone else's call): nothing reaches Alice's socket."""
    from mrtrweb.mcp import McpConnection

    alice = await _login(seeded["users"]["alice"])
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Disabled later", url=flooder.url)
    ws = _ws(alice)
    assert (await ws.connect())[0]
    assert (await alice.get(f"/mcp/servers/{server.pk}/")).status_code == 200  # her connection listens
    await McpServer.objects.filter(pk=server.pk).aupdate(enabled=False)
    async with McpConnection(flooder.url, timeout_s=30) as other:
        await other.send("tools/call", {"name": "flood", "arguments": {}}, "flood-other")
    got = await _drain(ws, quiet_s=2.0)
    assert not [m for m in got if m.get("type") == "listing"], got
    await ws.disconnect()


# --------------------------------------------------------------------------------------------
# a server that downgrades between a round and its retry (protocol "auto")
# --------------------------------------------------------------------------------------------


async def test_a_round_is_never_retried_at_another_protocol_version(seeded):
    """Protocol "auto": a round asked at 2026-07-28; the server then speaks only 2025-11-25 to the
    retry's new connection. The retry (inputResponses, requestState) is not sent on that session:
    the operation fails ``protocol_changed``, the answers unsent."""
    from mrtrweb.servers import connections

    handle = _downgrading_server()
    try:
        alice_user = seeded["users"]["alice"]
        alice = await _login(alice_user)
        acme = seeded["servers"]["acme"]
        server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Downgrader", url=handle.url)
        op = await _until(await _start_op(alice, server, "confirm"), lambda o: o.status != Operation.Status.RUNNING)
        assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1
        handle.legacy.set()  # the server now speaks only 2025-11-25...
        await connections.pool().close(str(alice_user.pk), connections.server_key(server))  # ...to a new connection
        handle.log.clear()
        await _answer_round(alice, op, {"action": "accept", "in-ok-go": "on"})
        op = await _until(op, lambda o: o.status in Operation.TERMINAL or o.rounds > 1)
        sent = [r for r in handle.log.tool_calls("confirm")]
        assert not any(r.is_retry for r in sent), "the MRTR retry went out on a 2025-11-25 session"
        assert (op.status, op.error_code) == (Operation.Status.FAILED, "protocol_changed")
        assert op.error_message == operations.message_for("protocol_changed")
        page = await alice.get(f"/mcp/operations/{op.id}/")
        assert page.status_code == 200 and "no longer speaks protocol version 2026-07-28" in page.content.decode()
        await operations.wait_idle()
    finally:
        handle.stop()


async def test_session_roots_follow_an_admin_flipping_allow_roots_between_calls(seeded, session_flooder):
    """Roots allowed: a roots/list asked aside gets the configured roots; the admin turns roots off:
    the next call's roots/list aside is refused (a pooled connection that declared roots asks the
    row too: tests/mcp/test_session_requests.py::test_the_session_roots_are_read_when_the_server_asks)."""
    import json

    acme = seeded["servers"]["acme"]
    roots = [{"uri": "file:///srv/project", "name": "p"}]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="Flip roots", url=session_flooder.url,
                                             allow_roots=True, roots=roots)
    alice = await _login(seeded["users"]["alice"])
    op = await _until(await _start_op(alice, server, "roots_aside"), lambda o: o.status in Operation.TERMINAL)
    assert json.loads(op.result["content"][0]["text"]) == {"roots": roots}
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_roots=False)
    server = await McpServer.objects.aget(pk=server.pk)
    op = await _until(await _start_op(alice, server, "roots_aside"), lambda o: o.status in Operation.TERMINAL)
    assert (op.status, op.rounds) == (Operation.Status.COMPLETED, 0)
    refused = json.loads(op.result["content"][0]["text"])
    assert refused["code"] == -32600 and "roots are not allowed" in refused["message"]
    await operations.wait_idle(timeout=15)
