"""Hostile server results through the whole product: every malformed result ends the operation
with a stable code (never a 500, nothing sent); server text is always escaped, never a link."""

from __future__ import annotations

import html as htmllib
import json
import re

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.gate import ALL_CODES
from mrtrweb.models import AuditEvent, McpServer, Operation

from .. import hostile
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def hostile_mcp():
    handle = hostile.serve()
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, hostile_mcp):
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Hostile", url=hostile_mcp.url)
    hostile_mcp.log.clear()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server, hostile_mcp


async def _call(client: AsyncClient, server: McpServer, tool: str) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {"arguments": "{}"})
    assert resp.status_code == 302, resp.content.decode()[:500]
    await operations.wait_idle()
    return await Operation.objects.select_related("server").aget(pk=resp["Location"].rstrip("/").split("/")[-1])


def _assert_no_markup(page: str) -> None:
    assert "<script>window.__xss" not in page
    assert "<img src=x" not in page
    assert 'href="javascript:' not in page.lower()
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in page


@pytest.mark.parametrize("tool", sorted(hostile.MALFORMED))
async def test_malformed_result_fails_closed_with_its_code(setup, tool):
    client, server, mcp = setup
    op = await _call(client, server, tool)
    expected = hostile.MALFORMED[tool][1]
    assert op.status == Operation.Status.FAILED and op.error_code == expected, (op.error_code, op.error_message)
    page = await client.get(f"/mcp/operations/{op.id}/")
    assert page.status_code == 200 and expected in page.content.decode()
    # nothing was answered: the server saw exactly the one original request
    assert [r.tool for r in mcp.log.tool_calls()].count(tool) == 1
    events = [e async for e in AuditEvent.objects.filter(operation_id=op.id).values_list("event", "code")]
    if expected in ALL_CODES:
        assert ("rejected", expected) in events
    assert events[-1][0] == "failed"


async def test_jsonrpc_error_is_a_clean_failure(setup, caplog):
    client, server, _ = setup
    with caplog.at_level("DEBUG", logger="mrtrweb"):
        op = await _call(client, server, "jsonrpc_error")
    assert op.status == Operation.Status.FAILED and op.error_code == "jsonrpc_error"
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "<script>window.__xss" not in page
    # the server's own code and message are shown to the person, escaped ...
    said = "The MCP server answered with an error. It said (JSON-RPC error -32000): " + hostile.XSS
    assert op.error_message == said
    assert htmllib.escape(said) in page
    # ... and kept out of the logs and the audit trail (server text may echo what was sent)
    assert hostile.XSS not in caplog.text
    async for row in AuditEvent.objects.filter(operation_id=op.id).values():
        assert hostile.XSS not in json.dumps(row, default=str)


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain", "plain"),
    ("line one\nline two\r\n\tend", "line one line two end"),
    ("evil\u202etxt.exe \u200bzero\x00nul", "evil txt.exe zero nul"),
    ("x" * 400, "x" * 299 + "…"),
    ("   ", ""),
    (None, ""),
    (42, ""),
])
def test_server_error_text(raw, shown):
    assert operations.server_error_text(raw) == shown


async def test_server_text_is_escaped_on_every_page(setup):
    client, server, _ = setup
    page = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    _assert_no_markup(page)
    page = (await client.get(f"/mcp/servers/{server.pk}/tools/xss_round/")).content.decode()
    _assert_no_markup(page)

    op = await _call(client, server, "xss_round")
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_code
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    _assert_no_markup(page)
    card = page[page.index('<form method="post" action="/mcp/operations/'):]
    # no link at all on a form card: URLs in the message stay text
    assert "<a " not in card.split("</form>")[0]
    assert "https://evil.example/x" in card

    op = await _call(client, server, "xss_url")
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    _assert_no_markup(page)
    links = re.findall(r'<a class="open-url" href="([^"]*)"', page)
    assert links == [htmllib.escape("https://xn--80ak6aa92e.com/login?next=%3Cscript%3E")]
    assert "punycode/IDN" in page  # the confusable-host warning

    op = await _call(client, server, "xss_final")
    assert op.status == Operation.Status.COMPLETED
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    _assert_no_markup(page)


async def test_bad_browser_input_gets_clear_errors_not_500(setup, seeded):
    client, server, mcp = setup
    op = await _call(client, server, "xss_round")
    url = f"/mcp/operations/{op.id}/answer/"
    assert (await client.post(url, {"action": "explode", "round": "1"})).status_code == 400
    assert (await post_answer(client, url, {"action": "accept", "round": "99"})).status_code == 409
    assert (await post_answer(client, url, {"action": "accept"})).status_code == 409
    assert (await post_answer(client, url, {"action": "accept", "round": "1", "in-q-pick": "zzz"})).status_code == 400
    assert (await client.get(url)).status_code == 405
    assert (await client.get("/mcp/operations/not-a-uuid/")).status_code == 404
    bad_json = await client.post(f"/mcp/servers/{server.pk}/tools/xss_round/", {"arguments": "[1"})
    assert bad_json.status_code == 200 and "Enter valid JSON." in bad_json.content.decode()
    not_object = await client.post(f"/mcp/servers/{server.pk}/tools/xss_round/", {"arguments": "[1]"})
    assert not_object.status_code == 200 and "must be a JSON object" in not_object.content.decode()
    schema_bad = await client.post(f"/mcp/servers/{server.pk}/tools/xss_round/", {"arguments": '{"cfg": 5}'})
    assert schema_bad.status_code == 200 and "do not match" in schema_bad.content.decode()
    assert (await client.get(f"/mcp/servers/{server.pk}/tools/no_such_tool/")).status_code == 404
    assert [r.tool for r in mcp.log.tool_calls()].count("xss_round") == 1  # nothing was answered
