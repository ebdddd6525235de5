"""Nothing a server names is ever fetched or read, and no check of a server's schema stalls the product.

A real HTTP listener on 127.0.0.1 counts every request; a local file holds a schema that would
change validation if it were read (Python's audit hook records every ``open`` of it and every
``urllib`` request). A hostile MCP server (``tests/hostile_refs.py``) names both from its tools'
``inputSchema`` (``$ref``, ``$schema``, ``$id``-relative refs, ``$dynamicRef``, ``$recursiveRef``),
its icons, its results and its rounds' ``requestedSchema``. Pathological schemas (catastrophic
patterns, a 5,000-deep schema, a huge enum, exponential ``oneOf`` recursion) end with a stable
code, quickly, while the event loop keeps serving.
"""

from __future__ import annotations

import html
import json
import sys
import threading

import pytest
from django.test import AsyncClient

from mrtrweb.consent import argschema
from mrtrweb import operations
from mrtrweb.gate import content as gate_content, schema as gate_schema
from mrtrweb.models import AuditEvent, McpServer, Operation

from .. import hostile_refs
from ..answering import post_answer
from ..offloop import spy

pytestmark = [pytest.mark.django_db(transaction=True)]

#: what the person is told per code (the form's English wording)
UNCHECKED = {
    "schema_ref_outside": "it refers to a document outside itself ($ref), and mrtrweb never fetches one",
    "schema_dialect_nested": "it changes its JSON Schema dialect ($schema) inside itself",
    "schema_too_deep": "it is nested too deeply",
    "schema_too_large": "it is too large",
    "schema_pattern_invalid": "one of its patterns is not a regular expression mrtrweb can check",
    "check_timeout": "checking these arguments against it took too long",
}

_opened: list[str] = []
_watched: set[str] = set()
_hook_lock = threading.Lock()


def _audit(event: str, args: tuple) -> None:
    if not _watched:
        return
    if event == "open" and args and isinstance(args[0], str) and args[0] in _watched:
        with _hook_lock:
            _opened.append(args[0])
    elif event == "urllib.Request":
        with _hook_lock:
            _opened.append(str(args[0]))


sys.addaudithook(_audit)  # audit hooks cannot be removed; it does nothing unless a file is watched


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    path = tmp_path_factory.mktemp("refs") / "integer.json"
    path.write_text('{"type": "integer"}')
    listener = hostile_refs.listener()
    server = hostile_refs.serve(listener.url, path.as_uri())
    _watched.add(str(path))
    yield listener, server, str(path)
    _watched.discard(str(path))
    server.stop()
    listener.stop()


@pytest.fixture
async def setup(seeded, world):
    listener, mcp, path = world
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Refs", url=mcp.url)
    listener.hits.clear()
    mcp.log.clear()
    _opened.clear()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server, listener, mcp


def _nothing_fetched(listener) -> None:
    assert listener.hits == [], listener.hits
    assert _opened == [], _opened


def _tool_url(server: McpServer, tool: str) -> str:
    return f"/mcp/servers/{server.pk}/tools/{tool}/"


async def _post(client: AsyncClient, server: McpServer, tool: str, arguments: dict):
    return await client.post(_tool_url(server, tool), {"arguments": json.dumps(arguments)})


def _text(resp) -> str:
    return html.unescape(resp.content.decode())


def _unchecked_message(code: str) -> str:
    return f"The tool's input schema cannot be checked here: {UNCHECKED[code]}. Nothing was sent."


@pytest.mark.parametrize("tool, code", [
    ("ref_http", "schema_ref_outside"),
    ("ref_file", "schema_ref_outside"),
    ("id_relative", "schema_ref_outside"),
    ("dynamic_ref", "schema_ref_outside"),
    ("nested_dialect", "schema_dialect_nested"),
])
async def test_a_schema_naming_another_document_is_refused_and_nothing_is_fetched(setup, caplog, tool, code):
    client, server, listener, mcp = setup
    page = await client.get(_tool_url(server, tool))
    assert page.status_code == 200 and 'name="arguments"' in page.content.decode()  # the JSON editor
    with caplog.at_level("WARNING", logger="mrtrweb.forms"):
        resp = await _post(client, server, tool, {"x": "text", "cfg": {}})
    _nothing_fetched(listener)
    assert resp.status_code == 200
    assert _unchecked_message(code) in _text(resp)
    assert f"inputSchema cannot be checked ({code})" in caplog.text
    assert mcp.log.tool_calls() == [] and await Operation.objects.acount() == 0  # nothing was sent


async def test_an_unknown_dialect_is_never_looked_up(setup):
    """``$schema`` naming the listener: not a dialect jsonschema ships, so the arguments are checked
    as 2020-12 (as with no ``$schema``), and the URL is never opened."""
    client, server, listener, mcp = setup
    resp = await _post(client, server, "schema_http", {"x": 5, "cfg": {}})
    _nothing_fetched(listener)
    assert resp.status_code == 200 and "Arguments do not match the tool's schema at x: type" in _text(resp)
    resp = await _post(client, server, "schema_http", {"x": "text", "cfg": {}})
    assert resp.status_code == 302, _text(resp)[:2000]
    await operations.wait_idle()
    _nothing_fetched(listener)


async def test_recursive_ref_stays_in_the_document(setup):
    """A 2019-09 ``$recursiveRef`` naming the listener resolves to the schema itself (that is what
    the keyword means): the arguments are judged against it, nothing is fetched."""
    client, server, listener, mcp = setup
    resp = await _post(client, server, "recursive_ref", {"x": "text", "cfg": {}})
    assert resp.status_code == 200
    assert "Arguments do not match the tool's schema at x: type" in _text(resp)
    _nothing_fetched(listener)


async def test_local_refs_and_bundled_metaschemas_still_work(setup):
    client, server, listener, mcp = setup
    resp = await _post(client, server, "local_ref", {"x": "text", "cfg": {}})
    assert resp.status_code == 200 and "Arguments do not match the tool's schema at x: type" in _text(resp)
    resp = await _post(client, server, "local_ref", {"x": 3, "cfg": {}})
    assert resp.status_code == 302, _text(resp)[:2000]
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.COMPLETED and op.result["content"][0]["text"] == "local_ref done"
    # the 2020-12 metaschema is bundled with jsonschema: resolved locally, never downloaded
    resp = await _post(client, server, "metaschema_ref", {"x": {"type": 5}, "cfg": {}})
    assert resp.status_code == 200 and "Arguments do not match the tool's schema at x" in _text(resp)
    resp = await _post(client, server, "metaschema_ref", {"x": {"type": "string"}, "cfg": {}})
    assert resp.status_code == 302
    await operations.wait_idle()
    _nothing_fetched(listener)


def _nest(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("tool, arguments, code", [
    ("slow_pattern", {"x": hostile_refs.SLOW_VALUE, "cfg": {}}, "check_timeout"),
    ("slow_pattern_properties", {hostile_refs.SLOW_VALUE: 1, "cfg": {}}, "check_timeout"),
    ("nested_dialect", {"x": hostile_refs.SLOW_VALUE, "cfg": {}}, "schema_dialect_nested"),
    ("exponential", {"x": _nest(40)}, "check_timeout"),
    ("deep", {"a": {}}, "schema_too_deep"),
    ("huge_enum", {"x": 1, "cfg": {}}, "schema_too_large"),
    ("bad_pattern", {"x": "a", "cfg": {}}, "schema_pattern_invalid"),
])
async def test_pathological_schemas_end_with_a_code_without_stalling_the_event_loop(setup, caplog, monkeypatch, tool,
                                                                                     arguments, code):
    """The check (``argschema.check_arguments``) runs off the event loop and ends with its code;
    every regular expression it runs is bounded by the check's deadline (a timeout of at most
    ``CHECK_TIMEOUT_S``). Structural, not timed (issue 25)."""
    client, server, listener, mcp = setup
    page = await client.get(_tool_url(server, tool))
    assert page.status_code == 200
    checked = spy(monkeypatch, argschema, "check_arguments")
    searches = _bounded_searches(monkeypatch)
    with caplog.at_level("WARNING", logger="mrtrweb.forms"):
        resp = await _post(client, server, tool, arguments)
    assert resp.status_code == 200, resp.status_code
    assert _unchecked_message(code) in _text(resp)
    assert f"inputSchema cannot be checked ({code})" in caplog.text
    assert mcp.log.tool_calls() == []
    # the event loop kept running while the check ran in a thread (a blocked loop waited as long as the check)
    checked.assert_ran_off_the_loop()
    assert [getattr(e, "code", e) for e in checked.outcomes] == [code]
    # "does not hang": the check ends by its own bound (check_timeout: its deadline passed); each
    # regular expression searched within what was left of that deadline, never without a timeout
    assert all(t is not None and 0 < t <= argschema.CHECK_TIMEOUT_S for t in searches), searches
    if tool.startswith("slow_pattern"):
        assert searches  # the catastrophic pattern was searched, under a timeout
    _nothing_fetched(listener)


def _bounded_searches(monkeypatch) -> list:
    """The timeouts each regular-expression search of :mod:`mrtrweb.consent.argschema` was given."""
    timeouts: list = []
    real = argschema.compile_pattern

    class Recording:
        def __init__(self, compiled) -> None:
            self.compiled = compiled

        def search(self, value, *args, **kwargs):
            timeouts.append(kwargs.get("timeout"))
            return self.compiled.search(value, *args, **kwargs)

    monkeypatch.setattr(argschema, "compile_pattern", lambda pattern: Recording(real(pattern)))
    return timeouts


async def test_a_listing_too_deep_to_parse_is_a_clean_error(setup, world):
    client, server, listener, mcp = setup
    huge = await McpServer.objects.acreate(tenant=server.tenant, name="Huge", url=world[1].huge_url)
    page = await client.get(_tool_url(huge, "huge_deep"))
    assert page.status_code == 503  # the server's listing could not be read: said on the page, never a 500
    assert (await client.post(_tool_url(huge, "huge_deep"), {"arguments": "{}"})).status_code == 503
    assert mcp.log.tool_calls() == []
    _nothing_fetched(listener)


async def test_icons_and_links_in_listings_and_results_are_never_fetched(setup):
    client, server, listener, mcp = setup
    assert (await client.get(f"/mcp/servers/{server.pk}/")).status_code == 200
    assert (await client.get(_tool_url(server, "with_icons"))).status_code == 200
    resp = await client.post(_tool_url(server, "links_result"), {})
    assert resp.status_code == 302, _text(resp)[:2000]
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    panel = (await client.get(f"/mcp/operations/{op.id}/panel/")).content.decode()
    for shown in (page, panel):
        assert f'src="{listener.url}' not in shown and f'href="{listener.url}' not in shown
        assert 'src="file:' not in shown and 'href="file:' not in shown
    _nothing_fetched(listener)


async def _start_round(client: AsyncClient, server: McpServer, tool: str) -> Operation:
    resp = await client.post(_tool_url(server, tool), {})
    assert resp.status_code == 302, _text(resp)[:2000]
    await operations.wait_idle()
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


@pytest.mark.parametrize("tool, code", [
    ("elicit_ref_http", "invalid_form_requestedSchema"),
    ("elicit_ref_file", "invalid_form_requestedSchema"),
    ("elicit_deep", "invalid_form_requestedSchema"),
    ("elicit_huge_deep", "transport_error"),  # the SDK's JSON parser refuses 5,000 levels
])
async def test_a_requested_schema_naming_another_document_is_rejected_by_the_gate(setup, tool, code):
    client, server, listener, mcp = setup
    op = await _start_round(client, server, tool)
    assert op.status == Operation.Status.FAILED and op.error_code == code, (op.error_code, op.error_message)
    events = [e async for e in AuditEvent.objects.filter(operation_id=op.id).values_list("event", "code")]
    if code == "invalid_form_requestedSchema":
        assert ("rejected", code) in events
    assert events[-1][0] == "failed"
    assert [r.tool for r in mcp.log.tool_calls()] == [tool]  # no retry
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    _nothing_fetched(listener)


async def test_a_requested_schema_with_a_foreign_dialect_and_id_is_answered_without_fetching(setup):
    """``$schema`` and ``$id`` are annotations of the restricted subset: the round is shown and
    answered, and neither URL is ever opened."""
    client, server, listener, mcp = setup
    op = await _start_round(client, server, "elicit_schema_http")
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/",
                             {"action": "accept", "round": str(op.rounds), "in-q-ok": "on"})
    assert resp.status_code == 302, _text(resp)[:2000]
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    _nothing_fetched(listener)


async def test_many_slow_patterns_in_one_answer_share_one_time_budget(setup, monkeypatch):
    """40 fields, each with a catastrophic pattern and a default it backtracks on: the gate's
    checks of the answer end within their shared budget (not 40 x the per-pattern timeout), the
    answer is refused with the pattern message, nothing is sent, the event loop keeps running."""
    client, server, listener, mcp = setup
    op = await _start_round(client, server, "elicit_slow_defaults")
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    matched = spy(monkeypatch, gate_content, "pattern_matches")
    resp = await client.post(f"/mcp/operations/{op.id}/answer/", {"action": "accept", "round": str(op.rounds)})
    assert resp.status_code == 400
    assert "Enter a value in the requested pattern." in _text(resp)
    # the event loop kept running: the patterns were checked in a thread
    matched.assert_ran_off_the_loop()
    # "does not hang" (40 x 0.5 s = 20 s before the shared budget): each field's search got at most
    # PATTERN_TIMEOUT_S, all of them together at most PATTERN_BUDGET_S, and the fields left when the
    # budget ran out were refused without a search (a timeout of 0 or less)
    granted = [args[2] for args, _ in matched.calls]
    assert len(granted) == hostile_refs.SLOW_FIELDS, granted
    assert all(t <= gate_schema.PATTERN_TIMEOUT_S for t in granted), granted
    assert sum(t for t in granted if t > 0) <= gate_schema.PATTERN_BUDGET_S + 0.01, granted
    assert granted[-1] <= 0, granted
    assert [r.tool for r in mcp.log.tool_calls()] == ["elicit_slow_defaults"]  # no retry
    assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.AWAITING_INPUT
