"""The consent card's finished fields and the readable review, in a real browser at 1100 and 390 px
(Playwright + Debian Chromium against the live ASGI app; fixtures from ``tests/browser.py``).

A test MCP server (the SDK's ``MCPServer`` on loopback) asks, in one form round, for: a required
ticket with a ``pattern`` (holding ``<b>``, which must stay text) and a description; a required
code whose description already states its length bounds; a required integer; a required titled
multi-select with an item count; an optional boolean, date and note. On the retry it returns the
content it received as JSON, and its recorded retry is read back to check the integer's type.

Asserted, at each width: required fields marked (a visible asterisk that is not read aloud,
``aria-required`` on the inputs, "(required)" in the checkbox group's legend, the note); each
bound said once; a pattern error quoting the pattern as text with the description as a hint; the
review's values as a person reads them, with the exact JSON one click away; no horizontal overflow.
Screenshots (var/screenshots/): ``card-required``, ``card-pattern-error``, ``review-readable``
(``-390`` at 390 px).
"""

from __future__ import annotations

import json

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from tests.browser import OP_URL, screenshot, op_status, expect

pytestmark = [pytest.mark.browser]

KEY = "change"
PATTERN = "^(?!.*<b>)CHG-[0-9]{1,6}$"
SCHEMA = {
    "type": "object",
    "properties": {
        "ticket": {"type": "string", "title": "Change ticket", "description": "Your change ticket, like CHG-1042.",
                   "pattern": PATTERN},
        "code": {"type": "string", "title": "Team code",
                 "description": "The code of your team (3 to 32 characters).", "minLength": 3, "maxLength": 32},
        "seats": {"type": "integer", "title": "Seats", "description": "Desks you need.", "minimum": 1,
                  "maximum": 5000},
        "channels": {"type": "array", "title": "Channels", "description": "Where to tell you.", "minItems": 1,
                     "maxItems": 2,
                     "items": {"anyOf": [{"const": "slack", "title": "Slack channel"},
                                         {"const": "mail", "title": "E-mail"},
                                         {"const": "pager", "title": "Pager"}]}},
        "urgent": {"type": "boolean", "title": "Urgent", "description": "Page the on-call person."},
        "start": {"type": "string", "format": "date", "title": "Start date", "description": "First day."},
        "note": {"type": "string", "title": "Note", "description": "Anything else."},
    },
    "required": ["ticket", "code", "seats", "channels"],
}
REQUIRED = ["ticket", "code", "seats"]
OPTIONAL = ["start", "note"]
#: what is sent after the fixes (note left empty: not sent)
EXPECTED = {"ticket": "CHG-1815", "code": "ENG", "seats": 1200, "channels": ["slack", "mail"], "urgent": True,
            "start": "2026-12-24"}


def _card_mcp():
    from mrtrweb.demo.server import serve_in_thread

    mcp = MCPServer(name="card-server", version="0.1.0", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def request_change(ctx: Context) -> str | InputRequiredResult:
        """Ask for a change request's details."""
        response = (ctx.input_responses or {}).get(KEY)
        if response is None:
            request = ElicitRequest(params=ElicitRequestFormParams(message="Describe the change.",
                                                                   requested_schema=SCHEMA))
            return InputRequiredResult(input_requests={KEY: request}, request_state=json.dumps({"t": KEY}))
        return "received " + json.dumps(getattr(response, "content", None), sort_keys=True)

    return serve_in_thread(server=mcp)


@pytest.fixture(scope="module")
def card_mcp():
    handle = _card_mcp()
    yield handle
    handle.stop()


@pytest.fixture
def card_server(app, card_mcp):
    from mrtrweb.models import McpServer

    card_mcp.log.clear()
    return McpServer.objects.create(tenant=app.seeded["servers"]["acme"].tenant, name="Card server",
                                    url=card_mcp.url)


def _input(card, name: str):
    return card.locator(f"[name='in-{KEY}-{name}']")


def _box(card, name: str):
    return card.locator(".field").filter(has=card.page.locator(f"[name='in-{KEY}-{name}']"))


def _no_overflow(page, *locators) -> None:
    """Nothing is wider than the viewport: the document, and each given element's box."""
    width = page.evaluate("() => window.innerWidth")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    for locator in locators:
        box = locator.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (box, width)


@pytest.mark.parametrize("width", [1100, 390])
def test_required_bounds_pattern_error_and_readable_review(app, card_server, card_mcp, width):
    suffix = "" if width == 1100 else f"-{width}"
    page = app.sign_in("alice")
    page.set_viewport_size({"width": width, "height": 844 if width < 600 else 1400})
    page.goto(f"/mcp/servers/{card_server.pk}/tools/request_change/")
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)
    card = app.card(page)
    expect(card).to_be_visible()

    # -- required fields are marked before anything fails ------------------------------------------
    expect(card.locator(".required-note")).to_have_text("Fields marked * are required.")
    for name in REQUIRED:
        control = _input(card, name)
        expect(control).to_have_attribute("aria-required", "true")
        expect(control).not_to_have_attribute("required", "")
        label = _box(card, name).locator("label.required")
        title = SCHEMA["properties"][name]["title"]
        expect(label).to_have_text(f"{title}:")
        # a visible asterisk after the label, with no text for a screen reader (which hears aria-required)
        assert "*" in label.evaluate("l => getComputedStyle(l, '::after').content")
        expect(control).to_have_accessible_name(f"{title}:")
    for name in OPTIONAL:
        expect(_input(card, name)).not_to_have_attribute("aria-required", "true")
        assert _box(card, name).locator("label").evaluate("l => getComputedStyle(l, '::after').content") in (
            "none", "normal")
    expect(_box(card, "urgent").locator("label.required")).to_have_count(0)  # a box answers either way
    group = card.locator("fieldset.field.required")
    expect(group).to_have_count(1)
    expect(group.locator("legend")).to_have_text("Channels: (required)")
    expect(group.locator(".visually-hidden")).to_have_text("(required)")
    expect(group).to_have_accessible_name("Channels: (required)")
    assert "*" in group.locator("legend").evaluate("l => getComputedStyle(l, '::after').content")

    # -- each bound said once ---------------------------------------------------------------------
    expect(_box(card, "code").locator("small.help")).to_have_text("The code of your team (3 to 32 characters).")
    expect(_box(card, "seats").locator("small.help")).to_have_text("Desks you need. (1 to 5000)")
    expect(_box(card, "channels").locator("small.help")).to_have_text("Where to tell you. (choose 1 to 2)")
    expect(_box(card, "ticket").locator("small.help")).to_have_text(
        "Your change ticket, like CHG-1042. (must match the pattern the server gave)")
    for name in SCHEMA["properties"]:
        expect(_box(card, name).locator(".field-error")).to_have_count(0)
    _no_overflow(page, card)
    screenshot(page, f"card-required{suffix}.png")

    # -- a pattern error says what is expected (the pattern as text, the description as a hint) ----
    _input(card, "ticket").fill("chg 1815 <b>")
    _input(card, "code").fill("ENG")
    _input(card, "seats").fill("1200")
    _box(card, "channels").get_by_label("Slack channel", exact=True).check()
    _box(card, "channels").get_by_label("E-mail", exact=True).check()
    _box(card, "urgent").get_by_label("Urgent:").check()
    _input(card, "start").fill("2026-12-24")
    app.submit(page, "Accept")
    expect(page.locator(".panel > .error")).to_have_text("Some answers need attention.")
    error = _box(card, "ticket").locator(".field-error")
    expect(error).to_be_visible()
    expect(error).to_have_attribute("role", "alert")
    expect(error.locator("p").first).to_have_text("Enter a value in the requested pattern.")
    expect(error.locator("code.expected-pattern")).to_have_text(PATTERN)  # the server's text, as text
    expect(error.locator("b")).to_have_count(0)
    expect(error.locator(".expected")).to_have_text(
        f"Expected (the server's pattern, a regular expression): {PATTERN}")
    expect(error.locator(".expected-hint")).to_have_text("The server's hint: Your change ticket, like CHG-1042.")
    expect(card.locator(".field.invalid")).to_have_count(1)
    expect(_input(card, "seats")).to_have_value("1200")  # the rest is kept
    _no_overflow(page, card, error)
    error.scroll_into_view_if_needed()
    screenshot(page, f"card-pattern-error{suffix}.png")
    assert card_mcp.calls[("request_change", True)] == 0

    # -- the review reads as text; the exact JSON is one click away ---------------------------------
    _input(card, "ticket").fill("CHG-1815")
    app.submit(page, "Accept")
    review = app.expect_review(page)

    def value(name: str):
        return review.locator(f".review-answers dd[data-name='{name}'] .review-value")

    expect(value("ticket")).to_have_text("CHG-1815")
    expect(value("seats")).to_have_text("1200")
    expect(value("channels").locator("li")).to_have_text(["Slack channel", "E-mail"])
    # read as "Slack channel, E-mail": the comma is drawn between the items
    assert value("channels").locator("li").evaluate_all(
        "ls => ls.map(l => getComputedStyle(l, '::before').content)") == ["none", '", "']
    assert value("channels").evaluate("e => getComputedStyle(e).display") == "inline"
    expect(value("urgent")).to_have_text("Yes")
    expect(value("start")).to_have_text("Dec. 24, 2026")
    expect(value("start")).to_have_attribute("datetime", "2026-12-24")
    expect(review.locator(".review-answers dd[data-name='note']")).to_have_text("(left empty: not sent)")
    answers = review.locator(".review-answers").inner_text()
    for raw in ('["', "1200.0", "True", "None", "true"):
        assert raw not in answers, raw
    exact = review.locator("details.review-json")
    expect(exact.locator("pre")).not_to_be_visible()  # closed until asked for
    exact.locator("summary").click()
    expect(exact.locator("pre")).to_be_visible()
    assert json.loads(exact.locator("pre").inner_text()) == EXPECTED
    _no_overflow(page, review, exact)
    screenshot(page, f"review-readable{suffix}.png")
    assert card_mcp.calls[("request_change", True)] == 0

    # -- Send: what arrives is what the JSON said; the integer is an int on the wire ---------------
    app.submit(page, "Send")
    expect(page.locator(".result pre.block")).to_have_text("received " + json.dumps(EXPECTED, sort_keys=True))
    retries = [r for r in card_mcp.log.tool_calls("request_change") if r.is_retry]
    assert len(retries) == 1
    seats = retries[0].params["inputResponses"][KEY]["content"]["seats"]
    assert seats == 1200 and type(seats) is int
    assert op_status(op_id) == "completed"
