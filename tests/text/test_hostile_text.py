"""Server text is text, everywhere (issue 12, items 2 and 7), in-process.

The hostile LISTING server (``tests/hostile.py``, :func:`hostile.serve_listing`) puts markup
(``<meta refresh>``, ``<base>``, ``<form action>``, ``<a>``, ``<img onerror>``, ``<style>``,
``<svg onload>``) and control/bidi characters (RLO, LRI, BEL, ESC, NUL, NEL, ZWSP) into every
string it sends. Every page (server, tool, prompt, resource, operation card, review, result,
failure, histories), every push over the WebSocket, the exports, the admin and ``mrtr_client``
must show each such string as text: no markup, no raw control or bidi character, the characters
made visible as ``⟨U+202E⟩``; and the names still reach the server unchanged. The browser's view
is tested in ``tests/text/test_browser_hostile_text.py``.
"""

from __future__ import annotations

import csv
import html as htmllib
import io
import json
import re
import urllib.parse
from pathlib import Path

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.core.management import call_command
from django.template import engines
from django.test import AsyncClient
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from mrtrweb.text import names, display
from mrtrweb import operations
from mrtrweb.gate.urls import check_url
from mrtrweb.models import AuditEvent, McpServer, Operation
from mrtrweb.site.asgi import application

from .. import hostile
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]

#: the hostile markup, as markup: never in a page (the product's own pages have none of these)
RAW_MARKUP = ("<meta http-equiv", "<base href", '<form action="http://127.0.0.1:1', '<a href="http://127.0.0.1:1',
              "<img src=x", "<style>body", "<svg onload", "<button>go", 'src="http://127.0.0.1:1',
              'href="http://127.0.0.1:1')
#: a raw control, bidi or invisible character (newline, tab and carriage return are page layout)
RAW_HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069"
                        "\u2028\u2029\ufeff]")


def _escaped(label: str) -> str:
    return htmllib.escape(hostile.hostile_shown(label))


def assert_text_only(page: str, where: str, *labels: str) -> None:
    """``page`` holds none of the hostile markup as markup, no raw hidden character, and shows
    each ``labels``' hostile string as escaped text with its characters made visible."""
    for raw in RAW_MARKUP:
        assert raw not in page, f"{raw!r} is in the {where} page"
    hidden = RAW_HIDDEN.search(page)
    assert hidden is None, f"raw U+{ord(hidden.group(0)):04X} in the {where} page: {page[max(0, hidden.start() - 80):hidden.end() + 80]!r}"
    for label in labels:
        assert _escaped(label) in page, f"{label!r} is not shown as text on the {where} page"


@pytest.fixture(autouse=True)
def _utf8_paths(monkeypatch):
    """Django's test client decodes a request path as ISO-8859-1 (the WSGI convention) even for
    ASGI, where servers (uvicorn) give the path decoded as UTF-8: do as the real server does, so a
    tool named with U+202E is requested as a browser requests it."""
    from django.test.client import RequestFactory

    monkeypatch.setattr(RequestFactory, "_get_path",
                        lambda self, parsed: urllib.parse.unquote_to_bytes(parsed.path).decode("utf-8"))


@pytest.fixture(scope="module")
def listing_mcp():
    handle = hostile.serve_listing()
    yield handle
    handle.stop()


@pytest.fixture
async def setup(seeded, listing_mcp):
    acme = seeded["servers"]["acme"].tenant
    server = await McpServer.objects.acreate(tenant=acme, name="Listing", url=listing_mcp.url)
    listing_mcp.log.clear()
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    await client.get("/mcp/")  # the CSRF cookie
    return client, server, listing_mcp


def _op_id(resp) -> str:
    assert resp.status_code == 302, resp.content.decode()[:800]
    return resp["Location"].rstrip("/").split("/")[-1]


FORM_ANSWER = {"text": "plain", "pick": "a", "legacy": "x", "many": ["p"]}


async def _ask(client, server) -> str:
    """Start the form tool (its flat form, with the defaults) and wait for its round."""
    resp = await client.post(names.call_url("tool", server.pk, hostile.ASK_TOOL),
                             {f"arg-{k}": v for k, v in FORM_ANSWER.items()})
    op_id = _op_id(resp)
    await operations.wait_idle()
    return op_id


# ------------------------------------------------------------------------------------------------
# Pages
# ------------------------------------------------------------------------------------------------


async def test_listing_pages_show_every_server_string_as_text(setup):
    client, server, _ = setup
    page = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert_text_only(page, "server", "Ask", "Url", "Fail", "Slow", "Nested", "Prompt", "Template")
    for name in (hostile.ASK_TOOL, hostile.PROMPT, hostile.URL_TOOL):
        assert htmllib.escape(display.shown(name)) in page  # the names, BEL/ESC/RLO visible
    # the links still name the tools exactly (percent-encoded)
    assert htmllib.escape(names.call_url("tool", server.pk, hostile.ASK_TOOL)) in page

    tool = await client.get(names.call_url("tool", server.pk, hostile.ASK_TOOL))
    assert tool.status_code == 200
    # property titles (labels), descriptions (help texts), oneOf titles, enumNames, anyOf item titles
    assert_text_only(tool.content.decode(), "tool", "Ask", "Text", "Text help", "Pick", "Pick help", "Option A",
                     "Legacy", "Name X", "Many", "Many help", "Item P")

    nested = await client.get(names.call_url("tool", server.pk, hostile.NESTED_TOOL))
    assert nested.status_code == 200 and 'name="arguments"' in nested.content.decode()  # the JSON editor
    assert_text_only(nested.content.decode(), "nested tool", "Nested")
    # the schema the product pretty-prints keeps its own line breaks; the server's strings in it stay
    # JSON-escaped: a newline and U+202E inside them are written \n and \u202e, never raw or a marker
    schema = re.search(r'<details class="schema input-schema">.*?<pre>(.*?)</pre>', nested.content.decode(), re.S)
    assert schema, "no input schema on the nested tool page"
    lines = schema.group(1).split("\n")
    assert len(lines) > 5 and lines[0] == "{" and lines[1].startswith('  &quot;'), lines[:3]
    assert "⟨U+000A⟩" not in schema.group(1)
    assert "first line\\nsecond line" in schema.group(1) and "\\u202e" in schema.group(1)

    prompt = await client.get(names.call_url("prompt", server.pk, hostile.PROMPT))
    assert prompt.status_code == 200
    assert_text_only(prompt.content.decode(), "prompt", "Prompt", "Who", "Who help")

    resource = await client.get(f"/mcp/servers/{server.pk}/resources/?"
                                + urllib.parse.urlencode({"template": hostile.TEMPLATE}))
    assert resource.status_code == 200
    assert_text_only(resource.content.decode(), "resource", "Template")
    assert htmllib.escape(display.shown(hostile.TEMPLATE)) in resource.content.decode()


async def test_card_review_result_and_histories_show_server_text_as_text(setup):
    client, server, mcp = setup
    op_id = await _ask(client, server)
    op = await Operation.objects.aget(pk=op_id)
    assert op.status == Operation.Status.AWAITING_INPUT, op.error_message
    card = (await client.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert_text_only(card, "card", "Message", "Text", "Text help", "Pick", "Option A", "Name X", "Many", "Item P")
    assert htmllib.escape(display.shown(hostile.ASK_TOOL)) in card

    url = f"/mcp/operations/{op_id}/answer/"
    data = {"round": "1", **{f"in-q-{k}": v for k, v in FORM_ANSWER.items()}}
    review = await client.post(url, dict(data, action="accept"))
    assert review.status_code == 200 and 'class="card review"' in review.content.decode()
    assert_text_only(review.content.decode(), "review", "Message", "Text", "Option A", "Name X", "Item P")

    sent = await post_answer(client, url, dict(data, action="accept"))
    assert sent.status_code == 302
    await operations.wait_idle()
    result = (await client.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.COMPLETED
    # text, the resource link's name, the embedded resource, structured content: text (issue 28: each
    # as what it is, no longer as JSON); the link is never an <a>, its URI is read only on Read
    assert_text_only(result, "result", "Result")
    for label, show in (("Link", display.shown), ("Embedded", display.shown_text), ("Structured", display.shown_text)):
        assert htmllib.escape(show(hostile.hostile_text(label).replace("\x00", "\ufffd"))) in result, label
    assert "http://127.0.0.1:1/leak" in result and 'href="http://127.0.0.1:1/leak' not in result

    # the tool name went back to the server unchanged, in the call and in its retry
    calls = mcp.log.tool_calls(hostile.ASK_TOOL)
    assert len(calls) == 2 and calls[1].is_retry

    for where, path in (("own history", "/mcp/history/"), ("tenant history", "/mcp/tenants/acme/history/"),
                        ("timeline", f"/mcp/history/operations/{op_id}/"), ("index", "/mcp/")):
        page = await client.get(path)
        assert page.status_code == 200
        assert_text_only(page.content.decode(), where)
        assert htmllib.escape(display.shown(hostile.ASK_TOOL)) in page.content.decode(), where


async def test_url_mode_card_shows_the_bidi_url_visibly_and_warns(setup):
    client, server, _ = setup
    op_id = _op_id(await client.post(names.call_url("tool", server.pk, hostile.URL_TOOL), {}))
    await operations.wait_idle()
    card = (await client.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert_text_only(card, "URL card", "Open")
    # the address line in its ASCII form (nothing in it reorders); the form the server wrote on its
    # own line, its U+202E visible, drawn left to right in stored order
    assert '<p class="url-full"><code dir="ltr">https://evil.example/%E2%80%AEmoc.elgoog/%D7%90%D7%91%D7%92?next=1</code>' in card
    assert '<code dir="ltr"><bdo dir="ltr">https://evil.example/⟨U+202E⟩moc.elgoog/\u05d0\u05d1\u05d2?next=1</bdo></code>' in card
    assert "invisible or direction-changing characters" in card
    # the link opens what the server sent, its invisible character percent-encoded as a browser
    # encodes it anyway (so that no raw bidi character is in the page), on the person's click only
    assert ('<a class="open-url" href="https://evil.example/%E2%80%AEmoc.elgoog/\u05d0\u05d1\u05d2?next=1" '
            'target="_blank"') in card


async def test_failed_prompt_and_resource_operations_show_text(setup):
    client, server, _ = setup
    fail = _op_id(await client.post(names.call_url("tool", server.pk, hostile.FAIL_TOOL), {"arguments": "{}"}))
    await operations.wait_idle()
    page = (await client.get(f"/mcp/operations/{fail}/")).content.decode()
    assert (await Operation.objects.aget(pk=fail)).status == Operation.Status.FAILED
    assert_text_only(page, "failure")

    prompt = _op_id(await client.post(names.call_url("prompt", server.pk, hostile.PROMPT), {"arg-who": "me"}))
    await operations.wait_idle()
    page = (await client.get(f"/mcp/operations/{prompt}/")).content.decode()
    assert_text_only(page, "prompt card", "Message", "Text help")

    resource = _op_id(await client.post(f"/mcp/servers/{server.pk}/resources/?"
                                        + urllib.parse.urlencode({"template": hostile.TEMPLATE}), {"arg-team": "ops"}))
    await operations.wait_idle()
    page = (await client.get(f"/mcp/operations/{resource}/")).content.decode()
    assert (await Operation.objects.aget(pk=resource)).status == Operation.Status.COMPLETED
    assert_text_only(page, "resource result", "Resource")


async def test_sampling_card_shows_the_request_as_text(setup):
    client, server, _ = setup
    server.allow_sampling = True
    await server.asave()
    op_id = _op_id(await client.post(names.call_url("tool", server.pk, hostile.SAMPLE_TOOL), {}))
    await operations.wait_idle()
    assert (await Operation.objects.aget(pk=op_id)).status == Operation.Status.AWAITING_INPUT
    card = (await client.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert 'data-kind="sampling"' in card
    assert_text_only(card, "sampling card", "Sampled message", "System prompt", "Hint")
    assert "[image image/png, 12 base64 characters]" in card  # summarized, never an image
    assert htmllib.escape(display.shown(json.dumps({"note": hostile.hostile_text("Metadata")},
                                                   ensure_ascii=False))) in card


async def test_names_chosen_by_admins_and_users_show_their_characters(setup, seeded):
    """Server, tenant and user names are chosen by people, not servers: shown the same way."""
    client, server, _ = setup
    server.name = "Listing\u202e<b>x"
    await server.asave()
    tenant = server.tenant
    tenant.name = "Acme\x07\u2066"
    await tenant.asave()
    alice = seeded["users"]["alice"]
    alice.username = "alice\u202e"
    await alice.asave()
    for path in ("/mcp/", f"/mcp/servers/{server.pk}/", "/mcp/history/", "/mcp/tenants/acme/history/",
                 f"/mcp/servers/{server.pk}/settings/"):
        page = (await client.get(path)).content.decode()
        # a filter's option value stays the exact name (it is sent back, never shown)
        assert_text_only(re.sub(r'<option value="[^"]*"', "<option", page), path)
        assert "alice⟨U+202E⟩" in page, path
    page = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    assert "Listing⟨U+202E⟩&lt;b&gt;x" in page and "Acme⟨U+0007⟩⟨U+2066⟩" in page


# ------------------------------------------------------------------------------------------------
# Pushes
# ------------------------------------------------------------------------------------------------


def _ws(client: AsyncClient) -> WebsocketCommunicator:
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items())
    return WebsocketCommunicator(application, "/ws/mrtrweb/", headers=[
        (b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())])


async def test_pushed_card_and_progress_are_text(setup):
    client, server, _ = setup
    ws = _ws(client)
    assert (await ws.connect())[0]
    try:
        op_id = await _ask(client, server)
        msg = await ws.receive_json_from(timeout=10)
        while msg.get("type") != "operation" or msg.get("status") != "awaiting_input":
            msg = await ws.receive_json_from(timeout=10)
        assert msg["id"] == op_id
        assert_text_only(msg["html"], "pushed card", "Message", "Text help", "Option A")

        slow = _op_id(await client.post(names.call_url("tool", server.pk, hostile.SLOW_TOOL),
                                        {"arguments": "{}"}))
        progress = None
        while progress is None:
            msg = await ws.receive_json_from(timeout=10)
            if msg.get("type") == "progress" and msg.get("id") == slow:
                progress = msg
        # pushed as data (the page sets it as textContent), its control characters made visible
        assert progress["message"] == display.shown(hostile.PROGRESS_MESSAGE)
        assert hostile.CONTROLS_SHOWN in progress["message"]
        assert RAW_HIDDEN.search(progress["message"]) is None
        await operations.wait_idle()
    finally:
        await ws.disconnect()


# ------------------------------------------------------------------------------------------------
# Exports, admin, mrtr_client
# ------------------------------------------------------------------------------------------------


async def test_exports_carry_names_exactly_and_nothing_invisible(setup):
    client, server, _ = setup
    await _ask(client, server)
    raw_json = b"".join([c async for c in (await client.get("/mcp/tenants/acme/history/?format=json"))
                         .streaming_content]).decode()
    assert RAW_HIDDEN.search(raw_json) is None  # escaped as \uXXXX ...
    assert hostile.ASK_TOOL in {e["name"] for e in json.loads(raw_json)}  # ... and exact once parsed
    raw_csv = b"".join([c async for c in (await client.get("/mcp/tenants/acme/history/?format=csv"))
                        .streaming_content]).decode()
    assert RAW_HIDDEN.search(raw_csv) is None
    rows = list(csv.DictReader(io.StringIO(raw_csv)))
    assert display.shown(hostile.ASK_TOOL) in {r["name"] for r in rows}


async def test_admin_shows_server_text_visibly(setup, seeded):
    client, server, _ = setup
    op_id = _op_id(await client.post(names.call_url("tool", server.pk, hostile.FAIL_TOOL),
                                     {"arguments": "{}"}))
    await operations.wait_idle()
    admin = AsyncClient()
    await admin.aforce_login(seeded["users"]["admin"])
    event = await AuditEvent.objects.filter(operation_id=op_id).afirst()
    shown_name = htmllib.escape(display.shown(hostile.FAIL_TOOL))
    for path in ("/admin/mrtrweb/operation/", f"/admin/mrtrweb/operation/{op_id}/change/",
                 "/admin/mrtrweb/auditevent/", f"/admin/mrtrweb/auditevent/{event.pk}/change/"):
        resp = await admin.get(path)
        assert resp.status_code == 200, path
        page = resp.content.decode()
        assert_text_only(page, path)
        assert shown_name in page, path
    change = (await admin.get(f"/admin/mrtrweb/operation/{op_id}/change/")).content.decode()
    assert 'name="name"' not in change and 'name="error_message"' not in change  # shown, never editable


def test_mrtr_client_prints_nothing_a_terminal_would_act_on(seeded, listing_mcp):
    out = io.StringIO()
    call_command("mrtr_client", listing_mcp.url, "--list", stdout=out)
    text = out.getvalue()
    assert RAW_HIDDEN.search(text) is None and "\x1b" not in text
    assert display.shown(hostile.ASK_TOOL) in text
    out = io.StringIO()
    call_command("mrtr_client", listing_mcp.url, "--list", "--json", stdout=out)
    assert RAW_HIDDEN.search(out.getvalue()) is None
    assert hostile.ASK_TOOL in [t["name"] for t in json.loads(out.getvalue())["tools"]]
    out = io.StringIO()
    call_command("mrtr_client", listing_mcp.url, "--tool", hostile.NESTED_TOOL, stdout=out)
    text = out.getvalue()
    assert RAW_HIDDEN.search(text) is None and hostile.hostile_shown("Result") in text
    assert listing_mcp.log.tool_calls(hostile.NESTED_TOOL)  # called by its exact name


# ------------------------------------------------------------------------------------------------
# The display rules and their use in every template
# ------------------------------------------------------------------------------------------------


def test_display_rules():
    assert display.shown("a\u202eb\x07c\nd\te") == "a⟨U+202E⟩b⟨U+0007⟩c⟨U+000A⟩d⟨U+0009⟩e"
    assert display.shown_text("a\u202eb\r\nc\rd\te\x1b") == "a⟨U+202E⟩b\nc\nd\te⟨U+001B⟩"
    assert display.shown("\U000e0041\u2066\u061c\x85") == "⟨U+E0041⟩⟨U+2066⟩⟨U+061C⟩⟨U+0085⟩"
    assert display.shown("naïve café — 東京") == "naïve café — 東京"  # readable Unicode untouched
    assert display.shown(3) == 3 and display.shown(None) is None
    label = display.html('<b>x</b>\u202e')
    assert isinstance(label, SafeString) and label == "&lt;b&gt;x&lt;/b&gt;⟨U+202E⟩"
    value = {"k": "a\u202e\x85\U000e0041\x1b\n", "é": 1}
    text = display.json_text(value, indent=2)
    assert json.loads(text) == value and RAW_HIDDEN.search(text) is None and "é" in text


def test_filters_escape_once_and_keep_safe_strings_safe():
    t = engines["django"].from_string("{% load mrtrweb_display %}{{ a|shown }}|{{ b|shown }}|{{ c|shown_text }}")
    out = t.render({"a": "<i>\u202e", "b": mark_safe("&lt;i&gt;\x07"), "c": "x\ny\x1b"})
    assert out == "&lt;i&gt;⟨U+202E⟩|&lt;i&gt;⟨U+0007⟩|x\ny⟨U+001B⟩"


def test_django_form_templates_print_help_text_as_text():
    """Django's own form templates print ``help_text`` with ``|safe``: the escaped SafeStrings of
    SchemaForm survive that (and a portal's templates that do not use ``|safe`` alike)."""
    from mrtrweb.consent.forms import SchemaForm
    from mrtrweb.gate import check_requested_schema

    form = SchemaForm(check_requested_schema(hostile.LISTING_SCHEMA), prefix="x")
    for rendered in (form.as_div(), form.as_p(), form.as_table(), form.as_ul()):
        assert_text_only(str(rendered), "Django form template", "Text", "Text help", "Pick", "Option A", "Name X",
                         "Item P")


def test_url_with_bidi_characters_is_warned_about():
    view = check_url(hostile.BIDI_URL)
    assert view.url == hostile.BIDI_URL  # opened exactly as sent, on the person's click
    assert any("invisible or direction-changing" in w for w in view.warnings)
    assert not any("invisible" in w for w in check_url("https://example.com/google.com").warnings)


@pytest.mark.parametrize("url,ascii_form", [
    ("https://example.com/a?b=1#c", "https://example.com/a?b=1#c"),  # ASCII: unchanged
    ("https://xn--mgbh0fb.xn--kgbechtv/moc.elgoog", "https://xn--mgbh0fb.xn--kgbechtv/moc.elgoog"),
    ("https://\u0645\u062b\u0627\u0644.\u0625\u062e\u062a\u0628\u0627\u0631:8443/moc.elgoog",
     "https://xn--mgbh0fb.xn--kgbechtv:8443/moc.elgoog"),
    ("https://evil.example/\u0627\u062e/x?\u05d0=\u202e#\u2066",
     "https://evil.example/%D8%A7%D8%AE/x?%D7%90=%E2%80%AE#%E2%81%A6"),
    ("https://\u0430\u0440\u0440\u04cf\u0435.example/", "https://xn--80ak6aa92e.example/"),
])
def test_the_ascii_form_of_a_url_mode_url_holds_printable_ascii_only(url, ascii_form):
    assert display.ascii_url(url) == ascii_form
    assert re.fullmatch(r"[\x21-\x7e]+", display.ascii_url(url))


TEMPLATES = Path(__file__).resolve().parents[2] / "mrtrweb" / "templates" / "mrtrweb"
#: template expressions that are the product's own (ids, numbers, codes of the product, CSRF,
#: rendered form parts whose server text is escaped in the form) or must stay raw (hidden inputs
#: resubmitted, the URL-mode href, a percent-encoded query)
PRODUCT_EXPRESSIONS = {
    # issue 32 (mrtrweb.views.chat): product choices (a conversation's state, a message's role, a
    # proposal's status and its product reason, an offer's kind, a policy rule's value and label),
    # ids, the product's notice codes said in the reader's language (mrtrweb.chat.messages), the
    # model's markdown rendered and sanitised (nh3) and an operation's panel the product rendered
    "conversation.state", "conversation.pk", "item.role", "item.notice", "item.html", "item.s.pk", "o.pk", "o.kind",
    "pv.p.status", "pv.p.pk", "pv.p.get_status_display", "pv.refusal", "pv.panel.op.id", "pv.panel.html",
    "m.tenant.slug", "r", "v", "l",
    # the page's timers (mrtrweb.views.chat: seconds until a step counts as lost, the fallback's period)
    "stale_in", "fallback_ms",
    # issue 29: the servers pages' bounds (MRTRWEB), a count of pending operations, a URL the view reversed
    "max_servers", "pending", "back",
    # issue 31: the sandbox proxy's URL (the configured sandbox origin, a path, a signed site origin)
    "app_proxy_url",
    "op.id", "csrf_token", "task_required_message", "round.number", "n", "total", "op.status", "op.method", "method",
    "op.get_status_display", "item.view.kind", "item.kind", "block.kind", "review.token", "name", "value",
    "field.auto_id", "field.label_tag", "field", "field.help_text", "field.errors",
    "form.non_field_errors", "form.as_div", "p.0", "row.event", "row.sequence", "row.round_number",
    "row.request_id", "row.retry_id", "row.user_digest", "row.state_digest",
    "row.display_digest", "row.config_digest", "row.hash", "row.method", "op.status_code", "op.request_id", "op_id", "op.status", "what",
    "clock", "tz", "iso", "sampling", "roots", "host", "server", "logout_url", "next", "LANGUAGE_CODE",
    "op.rounds", "page_obj.number", "page_obj.paginator.num_pages", "page_obj.paginator.count",
    "reused_states", "run_again_url", "shown_chars", "total_chars", "stored_truncated.original_bytes",
    "stored_truncated.stored_bytes", "max_shown", "duplicates", "not_shown",
    "row.auth_mode", "row.auth_digest", "row.auth_identity",
    # issue 13: an auth error code (a product constant), message levels, a server's primary key
    "auth_failure.code", "m.tags", "c.server.pk", "auth_form.non_field_errors",
    # issue 14: the 503 page's own sentence (mrtrweb.runtime.outage.ServiceUnavailable.message, a product constant)
    "unavailable_message",
    # issue 15: a server's primary key (the server page's data-server, for its listing pushes)
    "server.pk",
    # issue 17: page numbers of the history pages (the paginator's)
    "number", "page_obj.start_index", "page_obj.end_index",
    # issue 17: counts of the person's waiting rounds, and a URL reversed by the template
    "nav.count", "count", "listed", "waiting_url",
    # issue 17: an audit event's translated label (mrtrweb.audit.history.rows.EVENT_LABELS)
    "row.event_label",
    # issue 17: an operation's shown status and outcome heading (mrtrweb.consent.outcomes: product labels)
    "status_label", "outcome_heading",
    # issue 26: the URL of the product's own live script ({% static %}), named when it was not served
    "live_script",
    # issue 28: data: URLs the product rebuilt from checked bytes (mrtrweb.text.media: an allowed
    # type, canonical base64, nothing of the server's text), Markdown as nh3-cleaned HTML with
    # every hidden character made visible (mrtrweb.rendering.markdown), product codes and numbers
    "block.src", "identity.icon", "tool.catalog.icon", "prompt.catalog.icon", "t.catalog.icon", "r.catalog.icon",
    "block.html", "block.role", "block.size", "block.index", "r.catalog.size", "structured.verdict",
    "structured.unchecked_reason", "line.depth", "badge", "unreachable.reason", "unreachable.status",
    # issue 28 item 4: the suggestions endpoint's URL (reversed, the name query built by mrtrweb.text.names),
    # the log level choices (ServerLogLevel.Level: product values and labels) and the person's chosen one
    "complete_url", "level.0", "level.1", "log_level", "kept_log_lines",
    # issue 28 item 2: the tool page's own query with json=1 or without it (urlencoded: ASCII)
    "json_url", "fields_url",
    # issue 31: an app's approval (mrtrweb.appapproval): its status (a product choice), the digest the
    # product computed, the size it counted, how many wait
    "a.status", "a.get_status_display", "a.digest", "a.size", "apps_pending",
    # issue 31 item 4/5: an app request card's kind and URLs (reversed), a file's size (a number); the
    # history's initiator (a product choice) and its labels (mrtrweb.audit.history.rows)
    "kind", "decide_url", "f.url", "f.size", "row.initiator", "row.initiator_label", "row.confirmation_label",
    # issue 31 item 4: the longest reply an app's sampling card takes (mrtrweb.appcalls.sampling.MAX_REPLY_CHARS),
    # its pending draft's random token (secrets.token_urlsafe)
    "max_reply", "sampling_token",
}
#: filters whose output is the product's own text whatever their input (mrtrweb.consent.outcomes.status_label:
#: a status label, never server text)
PRODUCT_FILTERS = ("status_label",)


def test_every_template_expression_is_shown_or_the_products_own():
    """Every ``{{ ... }}`` and ``with x=...`` in the product's templates passes server text through
    ``|shown``/``|shown_text``; what does not is listed above as the product's own."""
    unfiltered = []
    for path in sorted(TEMPLATES.rglob("*.html")):  # authz/ too
        source = path.read_text()
        blocks = re.findall(r"\{%\s*blocktranslate([^%]*)%\}(.*?)\{%\s*endblocktranslate", source, re.S)
        bound = {m for attrs, _ in blocks for m in re.findall(r"(\w+)=", attrs)}
        exprs = re.findall(r"\{\{\s*(.*?)\s*\}\}", source)
        exprs += re.findall(r"\b\w+=([\w.]+(?:\|[\w:\"',_()]+)?)", " ".join(attrs for attrs, _ in blocks))
        for expr in exprs:
            base, _, filters = expr.partition("|")
            if filters.startswith("translated|"):  # a product message in the page's language, then shown
                filters = filters.removeprefix("translated|")
            first = filters.split("|")[0].split(":")[0]
            if first in ("shown", "shown_text", "href", "ascii_url", "short_id", *PRODUCT_FILTERS) or base in PRODUCT_EXPRESSIONS:
                continue
            if base.startswith(("row.created_at", "op.created_at")) or filters.startswith(("date", "yesno", "time", "when", "urlencode")):
                continue  # dates, product choices, a percent-encoded query
            if base in bound:
                continue  # a blocktranslate variable, filtered where it is bound
            unfiltered.append(f"{path.name}: {{{{ {expr} }}}}")
    assert not unfiltered, "server text printed without |shown:\n" + "\n".join(unfiltered)
