"""Round 2 of issue 12 (engineer E): server strings beyond the attack pass's own cases.

* ``mrtr_client --list`` prints at most ``names.MAX_LISTED_SHOWN`` items of each kind and cuts
  each description (text and ``--json``) and each name (text) like the server page does;
* the review page shows a field's long title and option labels as the card did (cut), not in full;
* a resource template's long variable name and a prompt's long name are cut in the page;
* an optional prompt argument named ``""`` gets a field, and what is typed there is sent as ``""``.

The hostile server is a raw JSON-RPC endpoint, as in ``tests/views/test_attack_pass.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import AsyncClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mrtrweb import conf, operations
from mrtrweb.text import names
from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.models import McpServer, Operation

pytestmark = [pytest.mark.django_db(transaction=True)]

SHOWN = conf.DEFAULTS["MAX_SHOWN_CHARS"]
LONG = 500_000
DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
            "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
LISTING = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
TOOLS = [{"name": "LN" * LONG, "description": "LD" * LONG, "inputSchema": {"type": "object"}},
         {"name": "review_me", "description": "d", "inputSchema": {"type": "object"}},
         *({"name": f"t{i}", "description": "d", "inputSchema": {"type": "object"}} for i in range(700))]
#: listed by /bad/mcp: strings holding lone surrogates
SURROGATE_TOOLS = [{"name": "surrogates", "description": "d\ud800", "inputSchema": {"type": "object", "properties": {
    "p": {"type": "string", "title": "t\udfff", "description": "x\ud800y"}}}}]
REVIEW_ROUND = {"resultType": "input_required", "requestState": "s", "inputRequests": {"q": {
    "method": "elicitation/create", "params": {"message": "m", "requestedSchema": {"type": "object", "properties": {
        "f": {"type": "string", "title": "RT" * LONG, "default": "x"},
        "c": {"type": "string", "oneOf": [{"const": "a", "title": "RO" * LONG}], "default": "a"}}}}}}}
PROMPTS = [{"name": "PN" * LONG, "description": "d", "arguments": []},
           {"name": "unnamed_arg", "description": "d", "arguments": [{"name": "", "description": "the empty one"},
                                                                   {"name": "b"}]}]
TEMPLATES = [{"uriTemplate": "t://{" + "TV" * LONG + "}", "name": "tv"}]
#: the arguments each prompts/get received
GOT: list[dict[str, Any]] = []


async def endpoint(request: Request) -> Response:
    message = await request.json()
    if "id" not in message:
        return Response(status_code=202)
    rid, method, params = message["id"], message.get("method"), message.get("params") or {}
    if method == "server/discover":
        result: Any = DISCOVER
    elif method == "tools/list":
        result = {"tools": SURROGATE_TOOLS if request.url.path.startswith("/bad/") else TOOLS, **LISTING}
    elif method == "prompts/list":
        result = {"prompts": PROMPTS, **LISTING}
    elif method == "resources/list":
        result = {"resources": [], **LISTING}
    elif method == "resources/templates/list":
        result = {"resourceTemplates": TEMPLATES, **LISTING}
    elif method == "tools/call" and not params.get("inputResponses"):
        result = REVIEW_ROUND
    elif method == "prompts/get":
        GOT.append(params.get("arguments"))
        result = {"messages": [{"role": "user", "content": {"type": "text", "text": "ok"}}]}
    else:
        result = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    # json.dumps escapes the lone surrogates some strings here hold ("\\ud800")
    return Response(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}), media_type="application/json")


@pytest.fixture(scope="module")
def mcp():
    handle = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"]),
                                                    Route("/bad/mcp", endpoint, methods=["POST"])]))
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, mcp):
    server = await McpServer.objects.acreate(tenant=seeded["servers"]["acme"].tenant, name="Long", url=mcp.url)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server


def _shown(body: str, pair: str) -> int:
    return body.count(pair * 1000) * 2000


def test_mrtr_client_list_is_bounded_like_the_server_page(seeded, mcp, capsys):
    call_command("mrtr_client", mcp.url, "--list")
    out = capsys.readouterr().out
    # before: over 2 MB (the long name and description in full), all 702 tools
    assert len(out) < 200_000, len(out)
    assert _shown(out, "LD") <= 2000 and _shown(out, "LN") <= 2000
    assert "more characters not shown" in out
    assert f"... {702 - names.MAX_LISTED_SHOWN} more not shown" in out
    call_command("mrtr_client", mcp.url, "--list", "--json")
    listing = json.loads(capsys.readouterr().out)
    assert len(listing["tools"]) == names.MAX_LISTED_SHOWN and listing["notShown"]["tools"] == 202
    assert listing["tools"][0]["name"] == "LN" * LONG  # what is called stays whole
    assert len(listing["tools"][0]["description"]) < 2100


async def test_the_review_shows_long_titles_and_option_labels_cut(setup):
    client, server = setup
    resp = await client.post(names.call_url("tool", server.pk, "review_me"), {})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_code
    card = await client.get(f"/mcp/operations/{op.id}/")
    assert card.status_code == 200
    review = await client.post(f"/mcp/operations/{op.id}/answer/", {"round": "1", "action": "accept",
                                                                    "in-q-f": "x", "in-q-c": "a"})
    body = review.content.decode()
    assert review.status_code == 200 and "review-answers" in body, body[:500]
    # before: both 1 MB strings in full on the review
    for pair in ("RT", "RO"):
        assert _shown(body, pair) <= SHOWN, (pair, _shown(body, pair))
    assert len(review.content) < 2 * SHOWN + 40_000


async def test_a_long_prompt_name_and_template_variable_are_cut_on_their_pages(setup):
    client, server = setup
    page = await client.get(names.call_url("prompt", server.pk, "PN" * LONG))
    assert page.status_code == 200
    assert _shown(page.content.decode(), "PN") <= 2000 and len(page.content) < 60_000
    page = await client.get(names.call_url("resource", server.pk, TEMPLATES[0]["uriTemplate"]))
    assert page.status_code == 200
    assert _shown(page.content.decode(), "TV") <= 2000 and len(page.content) < 60_000


async def test_a_prompt_argument_named_empty_gets_a_field_and_is_sent(setup):
    client, server = setup
    url = names.call_url("prompt", server.pk, "unnamed_arg")
    page = await client.get(url)
    body = page.content.decode()
    assert page.status_code == 200
    assert 'name="arg-"' in body and "the empty one" in body  # before: no field at all
    GOT.clear()
    resp = await client.post(url, {"arg-": "given", "arg-b": ""})
    assert resp.status_code == 302, resp.content.decode()[:300]
    await operations.wait_idle()
    assert GOT == [{"": "given"}]


async def test_the_server_page_cuts_long_listed_names(setup):
    client, server = setup
    page = await client.get(f"/mcp/servers/{server.pk}/")
    body = page.content.decode()
    assert page.status_code == 200
    # before: the 1 MB tool name twice (link text and data-tool), the 1.5 MB template variable too
    for pair in ("LN", "TV", "PN"):
        assert _shown(body, pair) <= 2 * 2000, (pair, _shown(body, pair))
    assert names.call_url("tool", server.pk, "LN" * LONG) in body  # still linked (by its digest)


def test_a_sampling_card_bounds_its_model_hints():
    from mrtrweb.consent import sampling

    view = sampling.sampling_view({"messages": [], "maxTokens": 5, "modelPreferences": {
        "hints": [{"name": "HN" * LONG}] + [{"name": f"h{i}"} for i in range(5000)]}})
    # before: 5,001 hints, the first 1 MB long
    assert len(view["hints"]) == sampling.MAX_SHOWN_HINTS + 1 and "more hints not shown" in view["hints"][-1]
    assert sum(len(h) for h in view["hints"]) < 2000



async def test_lone_surrogates_from_a_server_never_break_a_page(setup, mcp):
    client, server = setup
    server = await McpServer.objects.acreate(tenant_id=server.tenant_id, name="Bad", url=mcp.url.replace("/mcp", "/bad/mcp"))
    # the SDK refuses such a listing (a clean 503 saying the server failed); whatever reaches a page
    # is shown with the surrogate marked, never a 500 (UnicodeEncodeError)
    for url in (names.call_url("tool", server.pk, "surrogates"), f"/mcp/servers/{server.pk}/"):
        page = await client.get(url)
        assert page.status_code in (200, 503), (url, page.status_code)


def test_lone_surrogates_are_shown_as_markers():
    from mrtrweb.text import display
    from mrtrweb.consent import forms

    assert display.shown("a\ud800b") == "a⟨U+D800⟩b" and display.shown_text("\udfff\n") == "⟨U+DFFF⟩\n"
    assert display.html("\ud800").encode("utf-8") and json.loads(display.json_text(["\ud800"])) == ["\ud800"]
    assert forms.stand_in_keys(["ok", "x\ud800"]) == {"ok": "ok", "x\ud800": "#1"}
