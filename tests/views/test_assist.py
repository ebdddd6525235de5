"""Issue 28 item 4: suggestions as a person types (``completion/complete``) and a server's log
messages during a call (``notifications/message``), in process against real servers on loopback:
the demo server built with ``assist=True`` (:mod:`mrtrweb.demo.assist`; spoken to at 2026-07-28,
and pinned to 2025-11-25), a hostile SDK server, and npm ``server-everything`` (2025-11-25).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse

import pytest
from channels.layers import get_channel_layer
from django.test import AsyncClient
from mcp.server.mcpserver import MCPServer
from mcp_types import Completion

from mrtrweb import completions, operations
from mrtrweb.completions import throttle
from mrtrweb.demo.serving import serve_in_thread
from mrtrweb.demo.tools import build_demo_server
from mrtrweb.models import McpServer, Operation, ServerLogLevel
from tests.thirdparty import everything_server  # noqa: F401 -- a module fixture

pytestmark = [pytest.mark.django_db(transaction=True)]

TEMPLATE = "demo%3A%2F%2Freports%2F%7Bteam%7D"


@pytest.fixture(scope="module")
def assist_mcp():
    handle = serve_in_thread(server=build_demo_server(assist=True))
    yield handle
    handle.stop()


def _hostile_server() -> MCPServer:
    mcp = MCPServer(name="hostile", log_level="WARNING")

    @mcp.prompt()
    async def pick(choice: str) -> str:
        """A prompt whose completions are hostile."""
        return choice

    @mcp.completion()
    async def complete(ref, argument, context):
        if argument.value == "boom":
            raise ValueError("the server fails")
        return Completion(values=["\u202egnp.exe", "x" * 300, "ok", "ok", "<b>bold</b>"], hasMore=True)

    return mcp


@pytest.fixture(scope="module")
def hostile_mcp():
    handle = serve_in_thread(server=_hostile_server())
    yield handle
    handle.stop()


@pytest.fixture
def assist(seeded, assist_mcp):
    acme, globex = seeded["servers"]["acme"], seeded["servers"]["globex"]
    server = McpServer.objects.create(tenant=acme.tenant, name="Assisting demo", url=assist_mcp.url)
    legacy = McpServer.objects.create(tenant=acme.tenant, name="Assisting demo (2025-11-25)", url=assist_mcp.url,
                                      protocol="2025-11-25")
    assist_mcp.log.clear()
    return {**seeded, "server": server, "legacy": legacy, "plain": acme, "other": globex, "mcp": assist_mcp,
            "plain_mcp": seeded["mcp"]}


async def _client(user) -> AsyncClient:
    c = AsyncClient()
    await c.aforce_login(user)
    return c


def _complete_url(server, kind: str, query: str) -> str:
    return f"/mcp/servers/{server.pk}/complete/{kind}/?{query}"


async def _ask(client: AsyncClient, server, kind: str, query: str, **kwargs):
    """POST the suggestions endpoint as the page does: the names in the URL, what was typed
    (``arg-...``) in the body."""
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    url = _complete_url(server, kind, urllib.parse.urlencode([(k, v) for k, v in pairs if not k.startswith("arg-")]))
    return await client.post(url, {k: v for k, v in pairs if k.startswith("arg-")}, **kwargs)


# -- suggestions ---------------------------------------------------------------------------------


async def test_suggestions_for_a_prompt_argument_and_a_template_variable(assist):
    alice, server, mcp = await _client(assist["users"]["alice"]), assist["server"], assist["mcp"]
    page = (await alice.get(f"/mcp/servers/{server.pk}/prompts/?name=release_notes")).content.decode()
    assert f'data-complete="/mcp/servers/{server.pk}/complete/prompt/?name=release_notes"' in page
    assert "mrtrweb/complete.js" in page
    resp = await _ask(alice, server, "prompt", "name=release_notes&field=arg-version&arg-version=1.")
    assert resp.status_code == 200 and resp.json() == {"values": ["1.0.0", "1.1.0", "1.2.0"], "hasMore": False}
    asked = mcp.log.records("completion/complete")
    assert [r.params["ref"] for r in asked] == [{"type": "ref/prompt", "name": "release_notes"}]
    assert asked[0].params["argument"] == {"name": "version", "value": "1."}
    page = (await alice.get(f"/mcp/servers/{server.pk}/resources/?template={TEMPLATE}")).content.decode()
    assert "data-complete=" in page
    resp = await _ask(alice, server, "template", f"template={TEMPLATE}&field=arg-team&arg-team=p")
    assert resp.json()["values"] == ["payments", "people", "platform"]
    assert mcp.log.records("completion/complete")[-1].params["ref"] == {"type": "ref/resource",
                                                                       "uri": "demo://reports/{team}"}
    # a suggestion is only a suggestion: what is sent is checked as any typed value (500 characters at most)
    resp = await alice.post(f"/mcp/servers/{server.pk}/resources/?template={TEMPLATE}", {"arg-team": "p" * 501})
    assert resp.status_code == 200 and "at most 500 characters" in resp.content.decode()
    assert not mcp.log.records("resources/read")


async def test_only_for_people_who_may_use_the_server_and_only_by_post(assist):
    server, mcp = assist["server"], assist["mcp"]
    query = "name=release_notes&field=arg-version&arg-version=1"
    bob = await _client(assist["users"]["bob"])  # another tenant
    assert (await _ask(bob, server, "prompt", query)).status_code == 404
    anonymous = await _ask(AsyncClient(), server, "prompt", query)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    alice = await _client(assist["users"]["alice"])
    assert (await alice.get(_complete_url(server, "prompt", query))).status_code == 405  # typed values in a URL
    assert (await _ask(alice, server, "tools", query)).status_code == 404
    cross = await _ask(alice, server, "prompt", query, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403 and cross.json()["reason"] == "cross_site"
    same = await _ask(alice, server, "prompt", query, headers={"Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200 and same.json()["values"]
    assert len(mcp.log.records("completion/complete")) == 1
    forged = AsyncClient(enforce_csrf_checks=True)  # a POST without the page's CSRF token (another site's)
    await forged.aforce_login(assist["users"]["alice"])
    assert (await _ask(forged, server, "prompt", query)).status_code == 403
    assert len(mcp.log.records("completion/complete")) == 1
    mcp.log.clear()
    assert not mcp.log.records("completion/complete")


async def test_nothing_asked_of_a_server_without_completions(assist):
    alice, plain = await _client(assist["users"]["alice"]), assist["plain"]
    page = (await alice.get(f"/mcp/servers/{plain.pk}/prompts/?name=release_notes")).content.decode()
    assert "data-complete" not in page and "complete.js" not in page
    resp = await _ask(alice, plain, "prompt", "name=release_notes&field=arg-version&arg-version=1")
    assert resp.json() == {"values": [], "hasMore": False, "reason": "not_declared"}
    assert not assist["plain_mcp"].log.records("completion/complete")


async def test_bounds_of_the_ask(assist):
    alice, server, mcp = await _client(assist["users"]["alice"]), assist["server"], assist["mcp"]
    long = "1" * (completions.MAX_VALUE_CHARS + 1)
    resp = await _ask(alice, server, "prompt", f"name=release_notes&field=arg-version&arg-version={long}")
    assert resp.json()["reason"] == "value_too_long"
    resp = await _ask(alice, server, "prompt", "name=release_notes&field=arg-nope&arg-nope=1")
    assert resp.status_code == 400 and resp.json()["reason"] == "no_such_field"
    resp = await _ask(alice, server, "prompt", "name=unlisted&field=arg-version&arg-version=1")
    assert resp.status_code == 404 and resp.json()["reason"] == "not_listed"
    resp = await _ask(alice, server, "prompt", "field=arg-version&arg-version=1")
    assert resp.status_code == 400
    assert not mcp.log.records("completion/complete")


def _one_window(monkeypatch) -> None:
    """The throttle's clock held inside one window: the asks of a test on a loaded machine may
    otherwise straddle a window's end (a new window counts from 0) and be let through."""
    import types

    now = (int(time.time() // throttle.WINDOW_S) + 1000) * throttle.WINDOW_S + 1.0  # a window no other test used
    monkeypatch.setattr(throttle, "time", types.SimpleNamespace(time=lambda: now))


async def test_rate_limited_per_person(assist, monkeypatch):
    monkeypatch.setattr(throttle, "LIMIT", 2)
    _one_window(monkeypatch)
    server, mcp = assist["server"], assist["mcp"]
    alice, carol = await _client(assist["users"]["alice"]), await _client(assist["users"]["carol"])
    query = "name=release_notes&field=arg-version&arg-version=1"
    statuses = [(await _ask(alice, server, "prompt", query)).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert (await _ask(carol, server, "prompt", query)).status_code == 200  # per person
    assert len(mcp.log.records("completion/complete")) == 3


async def test_rate_limited_per_server_too(assist, monkeypatch):
    """The asks of all a server's people together are bounded as well: a tenant's many people (or
    a few scripts) must not flood one server; another server is counted apart."""
    monkeypatch.setattr(throttle, "SERVER_LIMIT", 3, raising=False)
    _one_window(monkeypatch)
    server, legacy, mcp = assist["server"], assist["legacy"], assist["mcp"]
    alice, carol = await _client(assist["users"]["alice"]), await _client(assist["users"]["carol"])
    query = "name=release_notes&field=arg-version&arg-version=1"
    statuses = [(await _ask(who, server, "prompt", query)).status_code for who in (alice, carol) * 2]
    assert statuses == [200, 200, 200, 429]
    assert (await _ask(carol, legacy, "prompt", query)).status_code == 200  # per server
    assert len(mcp.log.records("completion/complete")) == 4


async def test_hostile_answers_are_bounded_and_shown_as_text(assist, hostile_mcp):
    alice = await _client(assist["users"]["alice"])
    server = await McpServer.objects.acreate(tenant_id=assist["server"].tenant_id, name="Hostile", url=hostile_mcp.url)
    resp = await _ask(alice, server, "prompt", "name=pick&field=arg-choice&arg-choice=o")
    body = resp.json()
    # the bidi override made visible, the 300 characters left out (never cut), "ok" once; markup stays text
    assert resp.status_code == 200 and body["hasMore"] is True
    assert body["values"] == ["\u27e8U+202E\u27e9gnp.exe", "ok", "<b>bold</b>"]
    failed = await _ask(alice, server, "prompt", "name=pick&field=arg-choice&arg-choice=boom")
    assert failed.status_code == 200 and failed.json() == {"values": [], "hasMore": False, "reason": "jsonrpc_error"}


def test_values_of_malformed_answers():
    assert completions.values_of({"completion": {"values": "abc"}}) == ([], False, 0)
    assert completions.values_of({"nothing": 1}) == ([], False, 0)
    values, more, dropped = completions.values_of({"completion": {"values": [1, None, "a", *[f"v{i}" for i in range(150)]]}})
    assert len(values) == completions.MAX_VALUES and values[0] == "a" and more is True and dropped == 53


def test_values_of_a_million_values_looks_at_what_it_shows():
    """A million values (checked on the event loop): only those up to the last one shown are looked at."""
    looked: list[int] = []

    class Counted(list):
        def __iter__(self):
            for value in super().__iter__():
                looked.append(1)
                yield value

    raw = Counted(f"v{i}" for i in range(10 ** 6))
    values, more, dropped = completions.values_of({"completion": {"values": raw}})
    assert len(values) == completions.MAX_VALUES and more is True and dropped == 10 ** 6 - completions.MAX_VALUES
    assert len(looked) <= completions.MAX_VALUES + 1


async def test_everything_server_completes_with_context(assist, everything_server):  # noqa: F811
    alice = await _client(assist["users"]["alice"])
    server = await McpServer.objects.acreate(tenant_id=assist["server"].tenant_id, name="Everything",
                                             url=everything_server.url)
    page = (await alice.get(f"/mcp/servers/{server.pk}/prompts/?name=completable-prompt")).content.decode()
    assert "data-complete=" in page
    base = "name=completable-prompt&field=arg-{}"
    resp = await _ask(alice, server, "prompt", base.format("department") + "&arg-department=Eng")
    assert resp.json()["values"] == ["Engineering"]
    resp = await _ask(alice, server, "prompt", base.format("name") + "&arg-department=Sales&arg-name=")
    assert resp.json()["values"] == ["David", "Eve", "Frank"]


# -- log messages ----------------------------------------------------------------------------------


async def _pushed_logs(layer, channel) -> list[dict]:
    logs = []
    while True:
        try:
            event = await asyncio.wait_for(layer.receive(channel), timeout=0.5)
        except TimeoutError:
            return logs
        if event.get("type") == "operation.log":
            logs.append(event)


async def _chatty(client, server, lines: int) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/?name=chatty", {"arg-lines": str(lines)})
    assert resp.status_code == 302, resp.content.decode()[:400]
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == "completed", (op.error_code, op.error_message)
    return op


async def test_the_level_is_the_persons_choice_on_the_server_page(assist):
    alice, server = await _client(assist["users"]["alice"]), assist["server"]
    page = (await alice.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert 'name="level"' in page and '<option value="" selected' not in page
    assert 'name="level"' not in (await alice.get(f"/mcp/servers/{assist['plain'].pk}/")).content.decode()
    assert (await alice.post(f"/mcp/servers/{server.pk}/log-level/", {"level": "loud"})).status_code == 400
    assert (await alice.get(f"/mcp/servers/{server.pk}/log-level/")).status_code == 405
    assert (await alice.post(f"/mcp/servers/{server.pk}/log-level/", {"level": "notice"})).status_code == 302
    assert '<option value="notice" selected>' in (await alice.get(f"/mcp/servers/{server.pk}/")).content.decode()
    bob = await _client(assist["users"]["bob"])
    assert (await bob.post(f"/mcp/servers/{server.pk}/log-level/", {"level": "debug"})).status_code == 404
    assert [r async for r in ServerLogLevel.objects.values_list("user__username", "level")] == [("alice", "notice")]
    assert (await alice.post(f"/mcp/servers/{server.pk}/log-level/", {"level": ""})).status_code == 302
    assert not await ServerLogLevel.objects.aexists()


async def test_log_messages_at_2026_07_28_asked_per_request_and_pushed(assist):
    alice, server, mcp = await _client(assist["users"]["alice"]), assist["server"], assist["mcp"]
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(operations.user_group(assist["users"]["alice"].pk), channel)
    await _chatty(alice, server, 5)  # no level chosen: none asked, none pushed
    assert "io.modelcontextprotocol/logLevel" not in mcp.log.tool_calls("chatty")[-1].params.get("_meta", {})
    assert await _pushed_logs(layer, channel) == []
    await ServerLogLevel.objects.acreate(user=assist["users"]["alice"], server=server, level="notice")
    op = await _chatty(alice, server, 5)
    assert mcp.log.tool_calls("chatty")[-1].params["_meta"]["io.modelcontextprotocol/logLevel"] == "notice"
    assert not mcp.log.records("logging/setLevel")
    logs = await _pushed_logs(layer, channel)
    assert [(e["level"], e["logger"], json.loads(e["data"])) for e in logs] == [
        ("notice", "chatty", {"step": 3, "of": 5}), ("warning", "chatty", {"step": 4, "of": 5}),
        ("error", "chatty", {"step": 5, "of": 5})]
    assert {e["operation_id"] for e in logs} == {str(op.id)}
    op = await Operation.objects.aget(pk=op.pk)  # kept with the operation, as pushed: a reload shows them
    assert op.server_log == [[e["level"], e["logger"], e["data"]] for e in logs]
    page = (await alice.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert ('<li class="log-line" data-level="error"><span class="log-level">error</span><span class="log-logger"> '
            'chatty</span> <code class="log-data">{&quot;step&quot;: 5, &quot;of&quot;: 5}</code></li>') in page
    assert '<section id="server-log" class="server-log" data-held=' in page  # not hidden
    first = (await alice.get(f"/mcp/operations/{(await Operation.objects.order_by('created_at').afirst()).pk}/"))
    assert '<section id="server-log" class="server-log" hidden' in first.content.decode()  # nothing kept


async def test_log_messages_at_2025_11_25_set_level_on_each_session_first(assist):
    alice, server, mcp = await _client(assist["users"]["alice"]), assist["legacy"], assist["mcp"]
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(operations.user_group(assist["users"]["alice"].pk), channel)
    await ServerLogLevel.objects.acreate(user=assist["users"]["alice"], server=server, level="warning")
    await _chatty(alice, server, 5)
    await _chatty(alice, server, 5)
    # each 2025-11-25 operation has a session of its own: its level is set first, once
    sent = [(r.method, r.params.get("level")) for r in mcp.log.records() if r.method in ("logging/setLevel", "tools/call")]
    assert sent == [("logging/setLevel", "warning"), ("tools/call", None)] * 2
    assert all("io.modelcontextprotocol/logLevel" not in (r.params.get("_meta") or {})
               for r in mcp.log.tool_calls("chatty"))
    logs = await _pushed_logs(layer, channel)  # the server sends all five; only warning and above shown
    assert [e["level"] for e in logs] == ["warning", "error"] * 2


async def test_log_pushes_are_bounded_rate_limited_and_made_visible(monkeypatch):
    from types import SimpleNamespace

    from mrtrweb.operations import serverlog

    pushed = []

    async def group_send(group, event, *, what):
        pushed.append(event)
        return True

    monkeypatch.setattr(serverlog.push, "group_send", group_send)
    clock = [100.0]
    monkeypatch.setattr(serverlog.asyncio, "get_running_loop", lambda: SimpleNamespace(time=lambda: clock[0]))
    on_log = serverlog.LogPush(SimpleNamespace(id="op-1", user_id=7), "info")
    await on_log("debug", "x", "below the level")
    await on_log("warning", "a\u202eb", {"secret?": "x" * 5000})
    for i in range(serverlog.PER_SECOND + 4):
        await on_log("info", None, i)
    assert len(pushed) == serverlog.PER_SECOND  # the rest of this second held back
    first = pushed[0]
    assert first["level"] == "warning" and first["logger"] == "a\u27e8U+202E\u27e9b"
    assert len(first["data"]) == serverlog.MAX_DATA and first["data"].endswith("…")
    clock[0] += 1.0
    await on_log("shout", None, "a level the protocol does not have")
    assert pushed[-1]["level"] == "info" and pushed[-1]["held"] == 5  # said on the next line pushed
    for _ in range(serverlog.MAX_LINES * 2):
        clock[0] += 1.0
        await on_log("error", None, "again")
    assert len(pushed) == serverlog.MAX_LINES  # per request, at most
    assert len(on_log.lines) == serverlog.KEPT_LINES and on_log.lines[-1] == ["error", "", '"again"']
    # the end of the flood: how many were held back after the last line is said when the request ends,
    # live (no line) and kept (a HELD line), as it is before a line pushed after a burst
    held = on_log.held
    assert held > serverlog.MAX_LINES  # every "again" after the 200th push
    kept = []
    monkeypatch.setattr(serverlog, "keep_lines", lambda op_id, lines: kept.extend(lines))
    monkeypatch.setattr(serverlog.asyncio, "get_running_loop", asyncio.events.get_running_loop)  # the real one
    await on_log.keep()
    assert pushed[-1]["line"] is False and pushed[-1]["held"] == held and len(pushed) == serverlog.MAX_LINES + 1
    assert kept[-1] == [serverlog.HELD, "", str(held)] and on_log.held == 0


async def test_kept_lines_are_the_newest_of_the_operation(assist):
    from asgiref.sync import sync_to_async

    from mrtrweb.operations import serverlog

    alice = await _client(assist["users"]["alice"])
    op = await _chatty(alice, assist["server"], 1)
    await sync_to_async(serverlog.keep_lines)(op.pk, [["info", "", str(i)] for i in range(60)])
    await sync_to_async(serverlog.keep_lines)(op.pk, [["info", "", str(i)] for i in range(60, 120)])
    kept = (await Operation.objects.aget(pk=op.pk)).server_log
    assert [line[2] for line in kept] == [str(i) for i in range(120 - serverlog.KEPT_LINES, 120)]
    # a kept HELD line is the page's sentence, not a line of the server's
    await sync_to_async(serverlog.keep_lines)(op.pk, [[serverlog.HELD, "", "7"], ["info", "", "after"]])
    page = (await alice.get(f"/mcp/operations/{op.pk}/")).content.decode()
    assert '<li class="log-held muted">(7 more messages were not shown: too many, too fast)</li>' in page
    assert 'data-level="held"' not in page


async def test_the_socket_sends_log_lines_only_of_the_persons_own_operations(assist):
    import uuid

    from tests.sockets import csrf_client, open_socket

    alice = assist["users"]["alice"]
    client = await csrf_client(alice)
    await ServerLogLevel.objects.acreate(user=alice, server=assist["server"], level="error")
    ws = open_socket(client)
    assert (await ws.connect())[0]
    try:
        op = await _chatty(client, assist["server"], 5)
        await get_channel_layer().group_send(operations.user_group(alice.pk), {
            "type": "operation.log", "operation_id": str(uuid.uuid4()), "level": "error", "logger": "",
            "data": "forged", "held": 0})
        sent = []
        while not await ws.receive_nothing(timeout=1):
            sent.append(await ws.receive_json_from())
        logs = [m for m in sent if m.get("type") == "log"]
        assert logs == [{"type": "log", "id": str(op.id), "level": "error", "logger": "chatty",
                         "data": '{"step": 5, "of": 5}', "held": 0, "line": True}]
    finally:
        await ws.disconnect()
