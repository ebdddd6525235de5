"""Regressions found by the attack pass on the running demo after issue 12 (one test per fault):

* kind 11 (unbounded): a server's long schema property ``title`` / ``description`` / enum label
  (the tool page), prompt argument ``title`` / ``description`` (the prompt page) and elicitation
  field ``title`` / ``description`` (the card) are shown in full: only descriptions of listed
  items and messages are capped by ``MAX_SHOWN_CHARS``;
* kind 7 (bidi reaches the person): a URL-mode URL sent with raw right-to-left characters
  (``https://مثال.إختبار/moc.elgoog``, ``https://evil.example/اختبار/moc.elgoog``) is shown as is in
  the card's address line: Chromium draws the host's labels in reverse order (the TLD first) and
  the RTL run reorders the neutral characters around it; the same URL sent in its ASCII form
  (punycode, percent-encoding) is shown in ASCII;
* kind 7 (bidi reaches the person): a server's ``default`` is prefilled raw into the text box
  the person reads (the card's field, the tool page's argument field): ``https://evil.example/``
  U+202E ``moc.elgoog`` reads ``https://evil.example/google.com`` in the box (the labels, options and
  the review page show ``⟨U+202E⟩``);
* kind 3 (access that ended still answers): a WebSocket opened by a session keeps receiving
  every pushed card (server text, the card's form) after that session signed out;
* kind 1 (event-loop stall by server input): a server listing 30,000 tools, prompts, resources
  and resource templates (about 15 MB of JSON, each list well-formed) freezes every user's pages
  for 4-5 s each time its server page is opened (measured on the demo: another user's sign-in page
  took 4.6 s); its prompt page for 2-3 s. The listing is parsed and checked on the
  event loop; so is a tool result of 200,000 small text blocks (about 6 MB): every user's pages
  wait 2.5 s while the call's result is read (measured on the demo);
* 500 from bad browser input: the JSON editor accepts arguments holding a lone surrogate
  (``{"u": "\\ud800"}``): the call starts (and fails, ``transport_error``), its ``params`` are
  stored with the surrogate, and the admin's page of that operation is a 500 from then on;
* 500 from bad browser input: a lone surrogate (``"\\ud800"``) in the roots JSON of the server
  settings form (and the admin's) gives ``UnicodeEncodeError`` while the page is rendered.

The hostile server here is a raw JSON-RPC endpoint (Streamable HTTP, JSON responses), as
``tests/hostile_names.py``."""

from __future__ import annotations

from typing import Any

import json

import pytest
from django.test import AsyncClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from mrtrweb import conf, operations
from mrtrweb.text import names, results
from mrtrweb.bench import hostile
from mrtrweb.demo.server import serve_asgi_in_thread
from mrtrweb.mcp import listing
from mrtrweb.models import McpServer, Operation
from mrtrweb.operations import rounds
from mrtrweb.views import calls as views_calls
from mrtrweb.views import servers as views_servers

from ..offloop import spy

pytestmark = [pytest.mark.django_db(transaction=True)]

SHOWN = conf.DEFAULTS["MAX_SHOWN_CHARS"]
#: a page's own markup besides the capped server text (layout, card, links): generous
PAGE_OVERHEAD = 40_000
MB = 1024 * 1024
#: each long string is one letter pair repeated: ``page.count(pair * 1000)`` measures what is shown
LONG = 500_000

DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}, "prompts": {}},
            "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}

BIG_PROPERTY_SCHEMA = {"type": "object", "properties": {
    "p": {"type": "string", "title": "PT" * LONG, "description": "PD" * LONG},
    "e": {"type": "string", "oneOf": [{"const": "a", "title": "EL" * LONG}, {"const": "b", "title": "B"}]},
}}
BIG_ROUND = {"resultType": "input_required", "requestState": "s", "inputRequests": {"q": {
    "method": "elicitation/create",
    "params": {"message": "short", "requestedSchema": {"type": "object", "properties": {
        "f": {"type": "string", "title": "FT" * LONG, "description": "FD" * LONG}}}}}}}
#: tool name -> the URL-mode URL it asks the person to open (raw right-to-left characters)
RTL_URLS = {
    "rtl_host": "https://\u0645\u062b\u0627\u0644.\u0625\u062e\u062a\u0628\u0627\u0631/moc.elgoog",
    "rtl_path": "https://evil.example/\u0627\u062e\u062a\u0628\u0627\u0631/moc.elgoog",
}
#: a tool result of 200,000 small text blocks, its JSON made once (``%s``: the JSON-RPC id)
MANY_BLOCKS = 200_000
MANY_BLOCKS_JSON = '{"jsonrpc":"2.0","id":%s,"result":' + hostile.many_blocks_body(MANY_BLOCKS).replace("%", "%%") + "}"
#: a server default that reads differently from what it is
BIDI_DEFAULT = "https://evil.example/\u202emoc.elgoog\x1b[2J"
BIDI_DEFAULT_SCHEMA = {"type": "object", "properties": {"u": {"type": "string", "title": "Callback", "default": BIDI_DEFAULT}}}
#: not flat: the tool page shows the JSON editor
NESTED = {"type": "object", "properties": {"cfg": {"type": "object"}, "u": {"type": "string"}}}
PROMPT = {"name": "big_args", "description": "d", "arguments": [
    {"name": "a", "title": "AT" * LONG, "description": "AD" * LONG}]}


async def endpoint(request: Request) -> Response:
    try:
        message = await request.json()
    except ValueError:
        return PlainTextResponse("bad json", status_code=400)
    if "id" not in message:
        return Response(status_code=202)
    rid, method = message["id"], message.get("method")
    params = message.get("params") or {}
    listing = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    result: Any
    if method == "server/discover":
        result = DISCOVER
    elif method == "tools/list":
        result = {"tools": [{"name": "big_property", "description": "d", "inputSchema": BIG_PROPERTY_SCHEMA},
                            {"name": "big_round", "description": "d",
                             "inputSchema": {"type": "object", "properties": {}}},
                            {"name": "nested", "description": "d", "inputSchema": NESTED},
                            {"name": "bidi_default_args", "description": "d", "inputSchema": BIDI_DEFAULT_SCHEMA},
                            {"name": "bidi_default_round", "description": "d", "inputSchema": {"type": "object", "properties": {}}},
                            {"name": "many_blocks", "description": "d", "inputSchema": {"type": "object", "properties": {}}},
                            *({"name": n, "description": "d", "inputSchema": {"type": "object", "properties": {}}}
                              for n in RTL_URLS)], **listing}
    elif method == "prompts/list":
        result = {"prompts": [PROMPT], **listing}
    elif method == "tools/call" and params.get("name") == "bidi_default_round" and not params.get("inputResponses"):
        result = {"resultType": "input_required", "requestState": "s", "inputRequests": {"q": {
            "method": "elicitation/create", "params": {"message": "m", "requestedSchema": BIDI_DEFAULT_SCHEMA}}}}
    elif method == "tools/call" and params.get("name") == "many_blocks":
        return Response(MANY_BLOCKS_JSON % json.dumps(rid), media_type="application/json")
    elif method == "tools/call" and params.get("name") == "big_round" and not params.get("inputResponses"):
        result = BIG_ROUND
    elif method == "tools/call" and params.get("name") in RTL_URLS and not params.get("inputResponses"):
        result = {"resultType": "input_required", "inputRequests": {"u": {"method": "elicitation/create", "params": {
            "mode": "url", "elicitationId": "e1", "message": "go", "url": RTL_URLS[params["name"]]}}}}
    elif method in ("tools/call", "prompts/get"):
        result = {"content": [{"type": "text", "text": "ok"}], "isError": False,
                  "messages": [{"role": "user", "content": {"type": "text", "text": "ok"}}]}
    else:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
    return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})


#: items in each list of the huge listing server (about 15 MB of JSON in all)
HUGE = 30_000
#: the JSON of each huge list, made once (the server thread only sends bytes)
HUGE_JSON = hostile.huge_listing_bodies(HUGE)


@pytest.fixture(scope="module")
def long_mcp():
    handle = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"]),
                                                    Route("/huge/mcp", hostile.listing_endpoint(HUGE_JSON), methods=["POST"])]))
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, long_mcp):
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Long strings", url=long_mcp.url)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    return client, server


def _shown(body: str, pair: str) -> int:
    """How many characters of the long string made of ``pair`` the page shows (about)."""
    return body.count(pair * 1000) * 2000


async def test_a_tool_page_bounds_long_schema_titles_descriptions_and_labels(setup):
    client, server = setup
    page = await client.get(names.call_url("tool", server.pk, "big_property"))
    body = page.content.decode()
    assert page.status_code == 200
    # today: 2.4 MB, each 1 MB string in full
    for pair in ("PT", "PD", "EL"):
        assert _shown(body, pair) <= SHOWN, (pair, _shown(body, pair))
    assert len(page.content) < 3 * SHOWN + PAGE_OVERHEAD, len(page.content)


async def test_a_prompt_page_bounds_long_argument_titles_and_descriptions(setup):
    client, server = setup
    page = await client.get(names.call_url("prompt", server.pk, "big_args"))
    body = page.content.decode()
    assert page.status_code == 200
    # today: 2 MB, both 1 MB strings in full
    for pair in ("AT", "AD"):
        assert _shown(body, pair) <= SHOWN, (pair, _shown(body, pair))
    assert len(page.content) < 2 * SHOWN + PAGE_OVERHEAD, len(page.content)


async def test_a_card_bounds_long_field_titles_and_descriptions(setup):
    client, server = setup
    resp = await client.post(names.call_url("tool", server.pk, "big_round"), {})
    assert resp.status_code == 302, resp.content.decode()[:300]
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    for url in (f"/mcp/operations/{op.id}/", f"/mcp/operations/{op.id}/panel/"):
        page = await client.get(url)
        body = page.content.decode()
        assert page.status_code == 200 and 'class="card"' in body
        # today: the message is cut, but the field's 1 MB title and 1 MB description are shown in full
        for pair in ("FT", "FD"):
            assert _shown(body, pair) <= SHOWN, (url, pair, _shown(body, pair))
        assert len(page.content) < 2 * SHOWN + PAGE_OVERHEAD, (url, len(page.content))


LONE_SURROGATES = ['[{"uri": "file:///x\\ud800"}]', '[{"uri": "file:///x", "name": "\\udfff"}]']


@pytest.mark.parametrize("roots", LONE_SURROGATES)
async def test_server_settings_refuse_lone_surrogates_with_a_form_error(seeded, roots):
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    # today: 500 (UnicodeEncodeError: surrogates not allowed, while rendering the form again)
    resp = await client.post(f"/mcp/servers/{server.pk}/settings/", {"allow_roots": "on", "roots": roots})
    assert resp.status_code == 400, resp.content[:300]
    assert 'class="field-error"' in resp.content.decode()
    await server.arefresh_from_db()
    assert not server.allow_roots
    page = await client.get(f"/mcp/servers/{server.pk}/settings/")
    assert page.status_code == 200


@pytest.mark.parametrize("roots", LONE_SURROGATES)
async def test_admin_refuses_lone_surrogates_with_a_form_error(seeded, roots):
    from django.contrib.auth import get_user_model

    admin = await get_user_model().objects.aget(username="admin")
    client = AsyncClient()
    await client.aforce_login(admin)
    server = seeded["servers"]["acme"]
    url = f"/admin/mrtrweb/mcpserver/{server.pk}/change/"
    data = {"tenant": server.tenant_id, "name": server.name, "url": server.url, "enabled": "on",
            "allow_roots": "on", "roots": roots}
    resp = await client.post(url, data)
    assert resp.status_code in (200, 302), resp.content[:300]
    # whatever the admin did, every page that shows the roots still renders
    assert (await client.get(url)).status_code == 200
    alice = AsyncClient()
    await alice.aforce_login(seeded["users"]["alice"])
    assert (await alice.get(f"/mcp/servers/{server.pk}/settings/")).status_code == 200
    assert (await alice.get(f"/mcp/servers/{server.pk}/")).status_code == 200


async def test_the_json_editor_refuses_a_lone_surrogate_and_no_page_breaks(setup, seeded):
    from django.contrib.auth import get_user_model

    client, server = setup
    url = names.call_url("tool", server.pk, "nested")
    page = await client.get(url)  # generated fields (mrtrweb.argforms); the JSON box one link away
    assert page.status_code == 200 and 'name="arg-u"' in page.content.decode()
    page = await client.get(url + "&json=1")
    assert page.status_code == 200 and 'name="arguments"' in page.content.decode()
    before = await Operation.objects.filter(server=server).acount()
    resp = await client.post(url, {"arguments": '{"cfg": {}, "u": "x\\ud800y"}'})
    await operations.wait_idle()
    # whatever was stored, every page of every operation of this server renders
    admin = await get_user_model().objects.aget(username="admin")
    staff = AsyncClient()
    await staff.aforce_login(admin)
    async for op in Operation.objects.filter(server=server):
        for who, path in ((staff, f"/admin/mrtrweb/operation/{op.pk}/change/"), (client, f"/mcp/operations/{op.pk}/"),
                          (client, f"/mcp/history/operations/{op.pk}/")):
            # today: the admin's change page is a 500 (UnicodeEncodeError: surrogates not allowed)
            assert (await who.get(path)).status_code == 200, path
    # today: the operation is started (302), fails with transport_error, and keeps the surrogate
    assert resp.status_code in (200, 400), resp.status_code
    assert await Operation.objects.filter(server=server).acount() == before


@pytest.mark.parametrize("tool", sorted(RTL_URLS))
async def test_the_url_mode_address_line_holds_no_right_to_left_characters(setup, tool):
    import html
    import re
    import unicodedata

    client, server = setup
    resp = await client.post(names.call_url("tool", server.pk, tool), {})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    body = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    line = re.search(r'<p class="url-full">(.*?)</p>', body, re.S)
    assert line, body[:2000]
    shown = html.unescape(re.sub(r"<[^>]+>", "", line.group(1)))
    # today: the raw Arabic letters, which Chromium reorders (the host's labels drawn TLD first)
    rtl = [c for c in shown if unicodedata.bidirectional(c) in ("R", "AL", "AN")]
    assert not rtl, (shown, rtl)


async def test_a_socket_of_a_session_that_signed_out_gets_no_more_pushes(setup, seeded):
    from channels.testing.websocket import WebsocketCommunicator

    from mrtrweb.site.asgi import application

    client, server = setup
    await client.get("/mcp/")
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    ws = WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])
    connected, _ = await ws.connect()
    assert connected
    resp = await client.post("/accounts/logout/")
    assert resp.status_code == 302
    assert (await client.get("/mcp/")).status_code == 302  # this session is signed out
    # the same person, signed in elsewhere, starts an operation that asks for input
    other = AsyncClient()
    await other.aforce_login(seeded["users"]["alice"])
    started = await other.post(names.call_url("tool", server.pk, "rtl_path"), {})
    assert started.status_code == 302
    await operations.wait_idle()
    # today: the signed-out session's socket receives the card ({"type": "operation", "html": ...})
    pushed = []
    while not await ws.receive_nothing(timeout=1):
        message = await ws.receive_output(timeout=1)
        if message.get("type") == "websocket.close":
            break
        pushed.append(message)
    await ws.disconnect()
    assert not [m for m in pushed if m.get("type") == "websocket.send"], pushed[:1]


@pytest.mark.parametrize("page", ["server", "prompt"])
async def test_a_huge_listing_does_not_stall_the_event_loop(setup, long_mcp, page, monkeypatch):
    """The listing's pages are checked item by item (``listing.check_page``) and the page's view of
    them is made (``_shown_lists``: the server page; ``_find_listed``: a call page) off the event
    loop. Structural, not timed (issue 25): how long the loop waits is the benchmark's
    (``loopstall``)."""
    client, server = setup
    huge = await McpServer.objects.acreate(tenant=server.tenant, name="Huge listing",
                                           url=long_mcp.url.replace("/mcp", "/huge/mcp"))
    url = {"server": f"/mcp/servers/{huge.pk}/",
           "prompt": names.call_url("prompt", huge.pk, f"p{HUGE - 1}"),
           "resource": names.call_url("resource-uri", huge.pk, f"r://{HUGE - 1}")}[page]
    checked = spy(monkeypatch, listing, "check_page")
    shown = spy(monkeypatch, views_servers, "_shown_lists") if page == "server" else \
        spy(monkeypatch, views_calls, "_find_listed")
    resp = await client.get(url)
    assert resp.status_code == 200, resp.status_code
    # the finding: the listing was parsed on the event loop (4-5 s on the demo: every other user waited)
    checked.assert_ran_off_the_loop()
    shown.assert_ran_off_the_loop()
    # the huge pages themselves went through the spied check (check_page(raw, field, ...))
    assert max(len(args[0][args[1]]) for args, _ in checked.calls) == HUGE


async def test_a_result_of_many_blocks_does_not_stall_the_event_loop(setup, monkeypatch):
    """The final result's check (``parse_final``: the SDK's types, block by block) and its storage
    (``results.for_storage``) run off the event loop. Structural, not timed (issue 25)."""
    client, server = setup
    parsed = spy(monkeypatch, rounds, "parse_final")
    stored = spy(monkeypatch, results, "for_storage")
    resp = await client.post(names.call_url("tool", server.pk, "many_blocks"), {})
    await operations.wait_idle()
    assert resp.status_code == 302
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    # the finding: seconds (the result was parsed and stored on the event loop)
    parsed.assert_ran_off_the_loop()
    stored.assert_ran_off_the_loop()
    assert len(parsed.calls[-1][0][1]["content"]) == MANY_BLOCKS  # the 200,000 blocks went through the spied check


_CONTROLS = {chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F,
                              *range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def _shown_values(body: str) -> list[str]:
    """The values of the text boxes a page shows (``<input type=text value>``, ``<textarea>``)."""
    import html
    import re

    values = [html.unescape(m.group(1)) for m in re.finditer(r'<input type="text"[^>]*\svalue="([^"]*)"', body)]
    values += [html.unescape(m.group(1)) for m in re.finditer(r"<textarea[^>]*>(.*?)</textarea>", body, re.S)]
    return values


async def test_a_prefilled_server_default_shows_no_bidi_or_control_characters(setup):
    client, server = setup
    page = (await client.get(names.call_url("tool", server.pk, "bidi_default_args"))).content.decode()
    values = _shown_values(page)  # (a default refused or not prefilled passes too)
    # today: the tool page's box holds the raw U+202E and ESC
    assert not [v for v in values if set(v) & _CONTROLS], values
    resp = await client.post(names.call_url("tool", server.pk, "bidi_default_round"), {})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status in (Operation.Status.AWAITING_INPUT, Operation.Status.FAILED), op.status  # or refused by the gate
    card = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    values = _shown_values(card)
    # today: the card's box holds the raw U+202E and ESC
    assert not [v for v in values if set(v) & _CONTROLS], values
