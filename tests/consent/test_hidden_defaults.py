"""A server's ``default`` holding control, bidi or invisible characters is never pre-filled raw.

A text box (or a pre-selected option, or a pre-checked box) cannot show markers: the default
``https://evil.example/`` U+202E ``moc.elgoog`` reads ``https://evil.example/google.com`` in the box.
Such a default is not filled in (a select shows its empty option); the field's help says why and
quotes it with its characters marked (``⟨U+202E⟩``); left empty, the gate fills it into the retry as
for any default, and the review shows exactly that value, marked, as "the server's default". A clean
default is pre-filled as before. Elicitation cards and the tool page share the form
(:class:`mrtrweb.consent.forms.SchemaForm`)."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.test import AsyncClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mrtrweb.text import names
from mrtrweb import operations
from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.consent.forms import SchemaForm
from mrtrweb.gate import check_requested_schema
from mrtrweb.models import McpServer, Operation

from ..answering import post_review

pytestmark = [pytest.mark.django_db(transaction=True)]

RLO_URL = "https://evil.example/\u202emoc.elgoog\x1b[2J"
SCHEMA = {"type": "object", "properties": {
    "url": {"type": "string", "title": "Callback", "default": RLO_URL},
    "pick": {"type": "string", "title": "Pick", "enum": ["ok", "e\x1bvil"], "default": "e\x1bvil"},
    "many": {"type": "array", "title": "Many", "items": {"enum": ["p", "q\u200b"]}, "default": ["q\u200b"]},
    "clean": {"type": "string", "title": "Clean", "default": "plain"},
}, "required": ["pick"]}
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _boxes(body: str) -> dict[str, str]:
    """The pre-filled values of the boxes a person reads (an option's value attribute is not shown)."""
    return {m.group(1): html.unescape(m.group(2))
            for m in re.finditer(r'<input type="(?:text|email|url|date|number)" name="([^"]+)" value="([^"]*)"', body)}


def test_a_default_with_hidden_characters_is_not_prefilled_and_is_quoted_marked():
    form = SchemaForm(check_requested_schema(SCHEMA), prefix="x")
    body = form.as_div()
    assert 'value="plain"' in body  # a clean default: pre-filled
    boxes = _boxes(body)
    assert "x-url" not in boxes or boxes["x-url"] == "", boxes
    assert not [v for v in boxes.values() if HIDDEN.search(v)], boxes
    select = re.search(r'<select name="x-pick".*?</select>', body, re.S).group(0)
    assert re.findall(r'<option value="([^"]*)" selected>', select) == [""], select  # nothing pre-selected
    assert "checked" not in re.search(r'<div id="id_x-many">.*?</div>', body, re.S).group(0)
    assert "not filled in: https://evil.example/⟨U+202E⟩moc.elgoog⟨U+001B⟩[2J" in body
    assert "not filled in: e⟨U+001B⟩vil" in body
    assert 'not filled in: [&quot;q⟨U+200B⟩&quot;]' in body
    assert not HIDDEN.search(re.sub(r' value="[^"]*"', "", body))  # (an option's value attribute is not shown)


def test_a_long_hidden_default_is_quoted_in_part():
    form = SchemaForm(check_requested_schema({"type": "object", "properties": {
        "u": {"type": "string", "default": "\u202e" + "x" * 100_000}}}), prefix="x")
    assert len(form.as_div()) < 5_000


async def endpoint(request: Request) -> Response:
    message = await request.json()
    if "id" not in message:
        return Response(status_code=202)
    rid, method, params = message["id"], message.get("method"), message.get("params") or {}
    listing = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    if method == "server/discover":
        result = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                  "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
    elif method == "tools/list":
        result = {"tools": [{"name": "args", "inputSchema": SCHEMA},
                            {"name": "ask", "inputSchema": {"type": "object"}}], **listing}
    elif method == "tools/call" and params.get("name") == "ask" and not params.get("inputResponses"):
        result = {"resultType": "input_required", "requestState": "s", "inputRequests": {"q": {
            "method": "elicitation/create", "params": {"message": "m", "requestedSchema": SCHEMA}}}}
    elif method == "tools/call":
        SENT.append(params)
        result = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    else:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "nf"}})
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})


SENT: list[dict] = []


@pytest.fixture(scope="module")
def defaults_mcp():
    handle = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]))
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, defaults_mcp):
    server = await McpServer.objects.acreate(tenant=seeded["servers"]["acme"].tenant, name="Defaults",
                                             url=defaults_mcp.url)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server


async def test_the_tool_page_does_not_prefill_a_hidden_default(setup):
    client, server = setup
    body = (await client.get(names.call_url("tool", server.pk, "args"))).content.decode()
    assert 'value="plain"' in body
    assert not [v for v in _boxes(body).values() if HIDDEN.search(v)]
    assert "not filled in: https://evil.example/⟨U+202E⟩moc.elgoog⟨U+001B⟩[2J" in body


async def test_the_review_shows_the_hidden_default_the_gate_sends_marked(setup):
    client, server = setup
    SENT.clear()
    resp = await client.post(names.call_url("tool", server.pk, "ask"), {})
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_message
    card = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert not [v for v in _boxes(card).values() if HIDDEN.search(v)]
    assert "not filled in: https://evil.example/⟨U+202E⟩moc.elgoog⟨U+001B⟩[2J" in card
    # every hidden default left empty (the required select chooses the other option)
    url = f"/mcp/operations/{op.id}/answer/"
    data = {"round": "1", "action": "accept", "in-q-pick": "ok", "in-q-clean": "plain"}
    review, token = await post_review(client, url, data)
    body = review.content.decode()
    assert token and not HIDDEN.search(re.sub(r' value="[^"]*"', "", body))
    row = re.search(r'<dd data-name="url">(.*?)</dd>', body, re.S).group(1)
    assert "https://evil.example/⟨U+202E⟩moc.elgoog⟨U+001B⟩[2J" in row and "the server’s default" in row.replace("'", "’")
    row = re.search(r'<dd data-name="many">(.*?)</dd>', body, re.S).group(1)
    assert "q⟨U+200B⟩" in row
    sent = await client.post(url, dict(data, action="send", review_token=token))
    assert sent.status_code == 302
    await operations.wait_idle()
    # what the review showed is what was sent: the server's own default, unchanged
    content = SENT[-1]["inputResponses"]["q"]["content"]
    assert content == {"url": RLO_URL, "pick": "ok", "many": ["q\u200b"], "clean": "plain"}, json.dumps(content)
