"""Every field type of the restricted schema, URL-mode IDN warnings, roots and sampling allowed and
denied -- in a real browser (Playwright + Debian Chromium against the live ASGI app under uvicorn,
fixtures from ``tests/browser.py``).

A real MCP server (the SDK's ``MCPServer`` over Streamable HTTP on loopback, recorded by the demo's
``CountingMiddleware``) is built here and registered as an ``McpServer`` row of tenant acme:

* ``fill_profile`` asks, in form mode, for one answer of every field type (plain string, string
  with minLength/maxLength, pattern, format email/uri/date/date-time, integer and number with
  minimum/maximum, boolean, single-select ``enum``, titled ``oneOf``, legacy ``enumNames``,
  multi-select array of ``enum`` and of titled ``anyOf`` with minItems/maxItems), with defaults on
  several; on the retry it returns the content it received as JSON.
* ``open_idn_page`` asks, in URL mode, to open a URL whose host is an IDN (punycode or Unicode).

Roots and sampling use the valved demo server ("Demo server" of the seeded tenants): denied by
default, allowed on the server's settings page by the tenant admin.
"""

from __future__ import annotations

import json
import re

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitRequestURLParams, InputRequiredResult

from tests.browser import OP_URL, op_status, expect

pytestmark = [pytest.mark.browser]

KEY = "profile"

SCHEMA = {
    "type": "object",
    "properties": {
        "full_name": {"type": "string", "title": "Full name", "description": "As printed on your badge."},
        "team_code": {"type": "string", "title": "Team code", "description": "Short code of your team.",
                      "minLength": 3, "maxLength": 6, "default": "OPS"},
        "ticket": {"type": "string", "title": "Change ticket", "description": "The ticket of this change.",
                   "pattern": "^CHG-[0-9]+$"},
        "email": {"type": "string", "title": "Contact email", "description": "Where we write to you.",
                  "format": "email"},
        "homepage": {"type": "string", "title": "Homepage", "description": "Your public page.", "format": "uri"},
        "start": {"type": "string", "title": "Start date", "description": "First working day.", "format": "date",
                  "default": "2026-12-01"},
        "kickoff": {"type": "string", "title": "Kickoff meeting", "description": "When we meet first.",
                    "format": "date-time"},
        "seats": {"type": "integer", "title": "Seats", "description": "Desks you need.", "minimum": 1, "maximum": 10,
                  "default": 2},
        "budget": {"type": "number", "title": "Budget (k€)", "description": "Yearly budget.", "minimum": 0.5,
                   "maximum": 99.5},
        "nda": {"type": "boolean", "title": "NDA signed", "description": "You signed the agreement.",
                "default": True},
        "env": {"type": "string", "title": "Environment", "description": "Where you work first.",
                "enum": ["dev", "staging", "prod"], "default": "staging"},
        "tier": {"type": "string", "title": "Support tier", "description": "Your support level.",
                 "oneOf": [{"const": "gold", "title": "Gold tier"}, {"const": "silver", "title": "Silver tier"},
                           {"const": "bronze", "title": "Bronze tier"}], "default": "silver"},
        "region": {"type": "string", "title": "Region", "description": "Your data region.",
                   "enum": ["eu", "us"], "enumNames": ["Europe", "United States"]},
        "tags": {"type": "array", "title": "Tags", "description": "Pick one or two.", "minItems": 1, "maxItems": 2,
                 "items": {"type": "string", "enum": ["alpha", "beta", "gamma"]}, "default": ["alpha"]},
        "channels": {"type": "array", "title": "Channels", "description": "How to reach you.", "minItems": 1,
                     "maxItems": 2,
                     "items": {"anyOf": [{"const": "email", "title": "E-mail"}, {"const": "sms", "title": "Text message"},
                                         {"const": "push", "title": "Push notification"}]}},
    },
    "required": ["full_name", "team_code", "ticket", "email", "homepage", "start", "kickoff", "seats", "budget",
                 "nda", "env", "tier", "region", "tags", "channels"],
}

#: what the person types (after fixing the invalid values), exactly as the server must receive it
EXPECTED = {
    "full_name": "Ada Lovelace", "team_code": "ENG42", "ticket": "CHG-1815", "email": "ada@example.test",
    "homepage": "https://example.test/ada", "start": "2026-12-24", "kickoff": "2026-12-24T09:30:00Z",
    "seats": 3, "budget": 12.5, "nda": False, "env": "prod", "tier": "gold", "region": "us",
    "tags": ["alpha", "gamma"], "channels": ["email", "sms"],
}

IDN_PUNYCODE = "https://xn--pypal-4ve.example/login?next=%2Fpay"  # pаypal, with a Cyrillic а
IDN_UNICODE = "https://аррӏе.example/signin"  # all Cyrillic
IDN_CYRILLIC_ONLY = "https://пример.рф/"  # Cyrillic label and Cyrillic TLD
ROOTS = [{"uri": "file:///home/alice/projects", "name": "Projects"}, {"uri": "file:///srv/shared-data"}]


def _fields_mcp():
    from mrtrweb.demo.server import serve_in_thread

    mcp = MCPServer(name="fields-server", version="0.1.0", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def fill_profile(ctx: Context) -> str | InputRequiredResult:
        """Ask for a profile with every field type."""
        response = (ctx.input_responses or {}).get(KEY)
        if response is None:
            request = ElicitRequest(params=ElicitRequestFormParams(message="Complete your profile.",
                                                                   requested_schema=SCHEMA))
            return InputRequiredResult(input_requests={KEY: request}, request_state=json.dumps({"t": KEY}))
        content = getattr(response, "content", None)
        return f"{getattr(response, 'action', '?')}: " + json.dumps(content, sort_keys=True, ensure_ascii=False)

    @mcp.tool(structured_output=False)
    async def open_idn_page(url: str, ctx: Context) -> str | InputRequiredResult:
        """Ask the person to open ``url``."""
        response = (ctx.input_responses or {}).get("open")
        if response is None:
            request = ElicitRequest(params=ElicitRequestURLParams(message="Sign in to pay.", url=url,
                                                                  elicitation_id="idn-1"))
            return InputRequiredResult(input_requests={"open": request}, request_state=json.dumps({"t": "open"}))
        return f"Opened: {getattr(response, 'action', '?')}."

    return serve_in_thread(server=mcp)


@pytest.fixture(scope="module")
def fields_mcp():
    handle = _fields_mcp()
    yield handle
    handle.stop()


@pytest.fixture
def fields_server(app, fields_mcp):
    from mrtrweb.models import McpServer

    fields_mcp.log.clear()
    return McpServer.objects.create(tenant=app.seeded["servers"]["acme"].tenant, name="Fields server",
                                    url=fields_mcp.url)


def _call(page, server, tool: str, fill: dict[str, str] | None = None) -> str:
    page.goto(f"/mcp/servers/{server.pk}/tools/{tool}/")
    expect(page.get_by_role("heading", name=f"Call {tool}")).to_be_visible()
    for name, value in (fill or {}).items():
        page.locator(f"[name='arg-{name}']").fill(value)
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    return OP_URL.search(page.url).group(1)


def _input(card, name: str):
    return card.locator(f"[name='in-{KEY}-{name}']")


def _labelled(card, name: str):
    """The control whose accessible name is the field's label (its title, with Django's colon)."""
    return card.get_by_label(SCHEMA["properties"][name]["title"] + ":", exact=True)


def _box(card, name: str):
    """The field's wrapper (.field) holding the inputs named ``name``."""
    return card.locator(".field").filter(has=card.page.locator(f"[name='in-{KEY}-{name}']"))


def _retries(handle, tool: str):
    return [r for r in handle.log.tool_calls(tool) if r.is_retry]


#: invalid values typed into every field that can hold one (a date input and a select cannot);
#: besides, tags gets all three options (maxItems 2) and channels none (minItems 1)
INVALID = {
    "full_name": "",  # required
    "team_code": "AB",  # minLength 3
    "ticket": "CHG-x",  # pattern
    "email": "not-an-email",  # format email
    "homepage": "not a uri",  # format uri
    "kickoff": "next tuesday",  # format date-time
    "seats": "11",  # maximum 10
    "budget": "0.25",  # minimum 0.5
}
#: the message next to each invalid field: the form's own checks ...
DJANGO_MESSAGES = {
    "full_name": "This field is required.",
    "team_code": "Ensure this value has at least 3 characters (it has 2).",
    "seats": "Ensure this value is less than or equal to 10.",
    "budget": "Ensure this value is greater than or equal to 0.5.",
    "channels": "This field is required.",
    "region": "This field is required.",  # left on "— choose —"
}
#: ... and the gate's
GATE_MESSAGES = {
    "ticket": "Enter a value in the requested pattern. Expected (the server's pattern, a regular expression): "
              "^CHG-[0-9]+$ The server's hint: The ticket of this change.",
    "email": "Enter an email address (name@domain.example).",
    "homepage": "Enter an absolute URI (for example https://example.com/path).",
    "kickoff": "Enter a date and time (YYYY-MM-DDTHH:MM:SSZ).",
    "tags": "Choose at most 2.",
}
MESSAGES = {**DJANGO_MESSAGES, **GATE_MESSAGES}


def _fill_invalid(card) -> None:
    for name, value in INVALID.items():
        _input(card, name).fill(value)
    _box(card, "tags").get_by_label("beta", exact=True).check()
    _box(card, "tags").get_by_label("gamma", exact=True).check()
    for box in _input(card, "channels").all():
        expect(box).not_to_be_checked()


def _invalid_names(card) -> list[str]:
    """The fields marked invalid on the card (by their input's name)."""
    return card.locator(".field.invalid").evaluate_all(
        "fs => fs.map(f => f.querySelector('input,select,textarea').name.replace(/^in-[^-]+-/, ''))")


def _expect_messages(card, messages: dict[str, str]) -> None:
    """Each message is shown inside its field's box, announced, and tied to the field."""
    for name, text in messages.items():
        error = _box(card, name).locator(".field-error")
        expect(error).to_be_visible()
        expect(error).to_have_attribute("role", "alert")
        expect(error).to_have_text(text)
    for name in set(SCHEMA["properties"]) - set(messages):
        expect(_box(card, name).locator(".field-error")).to_have_count(0)


def _expect_refused(page, handle, op_id: str) -> None:
    """The card came back with messages: no review, nothing sent."""
    expect(page.locator(".panel > .error")).to_have_text("Some answers need attention.")
    expect(page.locator("#operation form.review")).to_have_count(0)
    expect(page.locator("#operation form.card")).to_be_visible()
    assert handle.calls[("fill_profile", True)] == 0
    assert _retries(handle, "fill_profile") == []
    assert op_status(op_id) == "awaiting_input"


# ------------------------------------------------------------------------------------------------
# 1. every field type: widgets, labels, help, defaults, messages, review, exact content sent
# ------------------------------------------------------------------------------------------------


def test_every_field_type_widgets_defaults_messages_review_and_exact_content(app, fields_server, fields_mcp):
    page = app.sign_in("alice")
    op_id = _call(page, fields_server, "fill_profile")
    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".server-message")).to_have_text("Complete your profile.")
    expect(card.locator(".field")).to_have_count(len(SCHEMA["properties"]))

    # Labels from title (in schema order), help from description.
    # (a checkbox group is a fieldset: its legend says "(required)" to a screen reader)
    expect(card.locator(".field > label, .field > legend")).to_have_text(
        [p["title"] + (": (required)" if name == "channels" else ":") for name, p in SCHEMA["properties"].items()])
    for name, prop in SCHEMA["properties"].items():
        expect(_box(card, name).locator("small.help")).to_contain_text(prop["description"])

    # The widget per type.
    text_like = {"full_name": "text", "team_code": "text", "ticket": "text", "email": "email", "homepage": "url",
                 "start": "date", "kickoff": "text", "seats": "number", "budget": "number"}
    for name, type_ in text_like.items():
        expect(_input(card, name)).to_have_attribute("type", type_)
        expect(_labelled(card, name)).to_have_attribute(
            "name", f"in-{KEY}-{name}")  # the label is tied to its input
    expect(_input(card, "team_code")).to_have_attribute("minlength", "3")
    expect(_input(card, "team_code")).to_have_attribute("maxlength", "6")
    expect(_input(card, "seats")).to_have_attribute("min", "1")
    expect(_input(card, "seats")).to_have_attribute("max", "10")
    expect(_input(card, "budget")).to_have_attribute("min", "0.5")
    expect(_input(card, "budget")).to_have_attribute("max", "99.5")
    expect(_input(card, "budget")).to_have_attribute("step", "any")
    expect(_labelled(card, "nda")).to_have_attribute("type", "checkbox")
    # A field with a default may be left empty ("—": the server's default is then sent); a required one
    # without a default starts on "— choose —" (nothing chosen for the person) and must be picked.
    for name, options in {"env": ["—", "dev", "staging", "prod"],
                          "tier": ["—", "Gold tier", "Silver tier", "Bronze tier"],
                          "region": ["— choose —", "Europe", "United States"]}.items():
        select = _labelled(card, name)
        assert select.evaluate("e => e.tagName") == "SELECT", name
        expect(select.locator("option")).to_have_text(options)  # titles / enumNames as the labels
    assert _labelled(card, "tier").locator("option").evaluate_all("os => os.map(o => o.value)") == [
        "", "gold", "silver", "bronze"]
    assert _labelled(card, "region").locator("option").evaluate_all("os => os.map(o => o.value)") == ["", "eu", "us"]
    expect(_labelled(card, "region")).to_have_value("")
    for name, labels in {"tags": ["alpha", "beta", "gamma"],
                         "channels": ["E-mail", "Text message", "Push notification"]}.items():
        boxes = _input(card, name)
        expect(boxes).to_have_count(len(labels))
        assert boxes.evaluate_all("bs => bs.map(b => b.type)") == ["checkbox"] * len(labels)
        for label in labels:
            expect(_box(card, name).get_by_label(label, exact=True)).to_have_attribute("name", f"in-{KEY}-{name}")
        expect(_box(card, name).locator("small.help")).to_contain_text("(choose 1 to 2)")

    # Defaults pre-filled; the rest empty.
    expect(_input(card, "team_code")).to_have_value("OPS")
    expect(_input(card, "start")).to_have_value("2026-12-01")
    expect(_input(card, "seats")).to_have_value("2")
    expect(_labelled(card, "nda")).to_be_checked()
    expect(_labelled(card, "env")).to_have_value("staging")
    expect(_labelled(card, "tier")).to_have_value("silver")
    expect(_box(card, "tags").get_by_label("alpha", exact=True)).to_be_checked()
    expect(_box(card, "tags").get_by_label("beta", exact=True)).not_to_be_checked()
    for name in ("full_name", "ticket", "email", "homepage", "kickoff", "budget"):
        expect(_input(card, name)).to_have_value("")
    for label in ("E-mail", "Text message", "Push notification"):
        expect(_box(card, "channels").get_by_label(label, exact=True)).not_to_be_checked()

    # Invalid values in every field that can hold one (a date input and a select cannot).
    _fill_invalid(card)
    app.submit(page, "Accept")
    _expect_refused(page, fields_mcp, op_id)
    # Every invalid field has its message at the first Accept: the form's own checks (required,
    # length, bounds, item count) and the gate's (pattern, formats, maxItems) together.
    assert sorted(_invalid_names(card)) == sorted(MESSAGES)
    _expect_messages(card, MESSAGES)
    for name, value in INVALID.items():  # what was typed is kept
        expect(_input(card, name)).to_have_value(value)
    expect(_box(card, "tags").locator("input:checked")).to_have_count(3)

    # Fix them (and change some defaults), Accept, review, Send.
    for name in ("full_name", "team_code", "ticket", "email", "homepage", "start", "kickoff"):
        _input(card, name).fill(EXPECTED[name])
    _input(card, "seats").fill("3")
    _input(card, "budget").fill("12.5")
    _labelled(card, "nda").uncheck()
    _labelled(card, "env").select_option("prod")
    _labelled(card, "tier").select_option(label="Gold tier")
    _labelled(card, "region").select_option(label="United States")
    _box(card, "tags").get_by_label("beta", exact=True).uncheck()
    _box(card, "channels").get_by_label("E-mail", exact=True).check()
    _box(card, "channels").get_by_label("Text message", exact=True).check()
    app.submit(page, "Accept")
    review = app.expect_review(page)
    expect(review.locator(".review-answers dt")).to_have_text([p["title"] for p in SCHEMA["properties"].values()])
    # as a person reads them: option titles, chosen options as a list, yes/no, a date in words
    shown = dict(EXPECTED, nda="No", tier="Gold tier", region="United States", start="Dec. 24, 2026", seats="3",
                 budget="12.5")
    lists = {"tags": ["alpha", "gamma"], "channels": ["E-mail", "Text message"]}
    for name, value in shown.items():
        dd = review.locator(f".review-answers dd[data-name='{name}']")
        if name in lists:
            expect(dd.locator(".review-value li")).to_have_text(lists[name])
        else:
            expect(dd.locator(".review-value")).to_have_text(value)
    exact = review.locator("details.review-json")
    exact.locator("summary").click()
    assert json.loads(exact.locator("pre").inner_text()) == EXPECTED  # exactly what is sent
    page.wait_for_timeout(300)
    assert fields_mcp.calls[("fill_profile", True)] == 0  # nothing sent before Send

    app.submit(page, "Send")
    expect(page.locator(".result pre.block")).to_have_text(
        "accept: " + json.dumps(EXPECTED, sort_keys=True, ensure_ascii=False))
    retries = _retries(fields_mcp, "fill_profile")
    assert len(retries) == 1
    assert retries[0].params["inputResponses"] == {KEY: {"action": "accept", "content": EXPECTED}}
    assert op_status(op_id) == "completed"


def test_all_invalid_fields_are_reported_at_the_first_accept(app, fields_server, fields_mcp):
    page = app.sign_in("alice")
    op_id = _call(page, fields_server, "fill_profile")
    card = app.card(page)
    expect(card).to_be_visible()
    _fill_invalid(card)
    app.submit(page, "Accept")
    _expect_refused(page, fields_mcp, op_id)
    assert sorted(_invalid_names(card)) == sorted(MESSAGES)
    _expect_messages(card, MESSAGES)


# ------------------------------------------------------------------------------------------------
# 2. URL mode: an IDN host is flagged on the card
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url,ascii_host,display_host,mixed", [
    (IDN_PUNYCODE, "xn--pypal-4ve.example", "pаypal.example", True),
    # all-Cyrillic label: the whole host still mixes it with the Latin "example"
    (IDN_UNICODE, "xn--80ak6aa92e.example", "аррӏе.example", True),
    (IDN_CYRILLIC_ONLY, "xn--e1afmkfd.xn--p1ai", "пример.рф", False),  # one script throughout
])
def test_url_mode_idn_host_warning_is_visible(app, fields_server, fields_mcp, url, ascii_host, display_host, mixed):
    assert display_host.encode("idna").decode() == ascii_host  # the test's own premise
    page = app.sign_in("alice")
    op_id = _call(page, fields_server, "open_idn_page", fill={"url": url})
    card = app.card(page)
    expect(card).to_be_visible()
    request = card.locator("fieldset[data-kind='url']")
    expect(request.locator(".server-message")).to_have_text("Sign in to pay.")
    expect(request.locator("mark.host")).to_have_text(display_host)
    expect(request.locator(".url-host code")).to_have_text(ascii_host)
    warnings = request.locator("p.warning[role='alert']")
    expected = ["⚠ The host uses international (punycode/IDN) characters and may imitate another site: its ASCII "
                f"form is {ascii_host}."]
    if mixed:
        expected.append("⚠ The host mixes characters from different alphabets.")
    expect(warnings).to_have_text(expected)
    for i in range(len(expected)):
        expect(warnings.nth(i)).to_be_visible()
    expect(request.get_by_role("link", name=f"Open {ascii_host} in a new tab")).to_be_visible()
    assert fields_mcp.calls[("open_idn_page", True)] == 0
    assert op_status(op_id) == "awaiting_input"


def test_url_mode_plain_ascii_host_has_no_idn_warning(app, fields_server, fields_mcp):
    """The control: the warning above comes from the IDN host, not from URL mode as such."""
    page = app.sign_in("alice")
    _call(page, fields_server, "open_idn_page", fill={"url": "https://paypal.example/login"})
    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator("mark.host")).to_have_text("paypal.example")
    expect(card.locator(".url-host code")).to_have_count(0)
    expect(card.locator("p.warning")).to_have_count(0)


# ------------------------------------------------------------------------------------------------
# 3. roots: allowed (settings page) and denied (default)
# ------------------------------------------------------------------------------------------------


def test_roots_allowed_on_the_settings_page_are_shown_reviewed_and_sent(app):
    page = app.sign_in("alice")
    server = app.seeded["servers"]["acme"]
    page.goto(f"/mcp/servers/{server.pk}/settings/")
    page.get_by_label("allow roots (deprecated)").check()
    page.get_by_label("Roots (a JSON list):", exact=True).fill(json.dumps(ROOTS))
    with page.expect_navigation():
        page.get_by_role("button", name="Save").click()
    expect(page.locator("p.notice")).to_have_text("Saved.")
    server.refresh_from_db()
    assert server.allow_roots is True and server.roots == ROOTS and server.allow_sampling is False

    page.goto("/mcp/")
    op_id = app.call_tool(page, "list_my_roots")
    card = app.card(page)
    expect(card).to_be_visible()
    request = card.locator("fieldset[data-kind='roots']")
    expect(request.locator("legend")).to_have_text("Your roots (a deprecated capability)")
    expect(request.locator(".root-uri")).to_have_text([r["uri"] for r in ROOTS])
    expect(request.locator(".root-name")).to_have_text(["Projects"])
    assert app.mcp.log.responses() == []
    assert app.mcp.calls[("list_my_roots", True)] == 0

    app.submit(page, "Accept")
    review = app.expect_review(page)
    section = review.locator("section[data-kind='roots']")
    expect(section.locator(".root-uri")).to_have_text([r["uri"] for r in ROOTS])
    expect(section.locator(".root-name")).to_have_text(["Projects"])
    page.wait_for_timeout(300)
    assert app.mcp.calls[("list_my_roots", True)] == 0  # nothing sent before Send
    app.submit(page, "Send")
    expect(page.locator(".result pre.block")).to_have_text(
        "Roots: file:///home/alice/projects (Projects); file:///srv/shared-data")
    retries = _retries(app.mcp, "list_my_roots")
    assert len(retries) == 1 and retries[0].params["inputResponses"] == {"roots": {"roots": ROOTS}}
    assert op_status(op_id) == "completed"


def _assert_denied(app, page, op_id: str, tool: str, *, admin: bool) -> None:
    server = app.seeded["servers"]["acme"]
    failure = page.locator(".failure")
    expect(failure).to_be_visible()
    expect(failure.locator("h2")).to_have_text("The operation failed")
    refusal = failure.locator(".deprecated-refusal")
    expect(refusal).to_be_visible()
    expect(refusal).to_contain_text("Demo server asked this client for something it does not grant this server: "
                                    "model sampling (sampling/createMessage), your roots (roots/list)")
    expect(refusal).to_contain_text("they are not allowed for this server, so nothing was sent and the operation "
                                    "was stopped.")
    expect(refusal).to_contain_text("For this server: sampling not allowed, roots not allowed.")
    expect(refusal).to_contain_text("A tenant admin can allow sampling or roots for this server, per server")
    link = refusal.get_by_role("link", name="Open the server settings")
    if admin:
        expect(link).to_have_attribute("href", f"/mcp/servers/{server.pk}/settings/")
    else:
        expect(link).to_have_count(0)
    expect(failure.locator("code")).to_have_text(["sampling/createMessage", "roots/list",
                                                  "unapproved_deprecated_client_request"])
    expect(app.card(page)).to_have_count(0)
    page.wait_for_timeout(500)
    assert op_status(op_id) == "failed"
    assert app.mcp.calls[(tool, False)] == 1
    assert app.mcp.calls[(tool, True)] == 0 and _retries(app.mcp, tool) == []
    assert app.mcp.log.responses() == []  # no roots/sampling result went to the server either


def test_roots_denied_by_default_explained_and_nothing_sent(app):
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "list_my_roots")
    _assert_denied(app, page, op_id, "list_my_roots", admin=True)


# ------------------------------------------------------------------------------------------------
# 4. sampling denied (default)
# ------------------------------------------------------------------------------------------------


def test_sampling_denied_by_default_explained_and_nothing_sent(app):
    page = app.sign_in("carol")  # a member: the explanation, without the settings link
    op_id = app.call_tool(page, "summarize_with_sampling", fill={"text": "Quarterly numbers went up"})
    _assert_denied(app, page, op_id, "summarize_with_sampling", admin=False)
