"""Issue 15, the third-party server matrix in a real browser: a person completes the elicitation
tools of FastMCP 3.4.11 (``tests/thirdparty_servers/fastmcp_features.py``) and of the npm
everything server 2026.8.31 on the consent card, and approves FastMCP's sampling request where the
tenant admin allowed it (its roots go out at session level); the tool's result shows what the server
received.

Debian Chromium driven by Playwright against the whole ASGI app under uvicorn
(:class:`tests.live_server.LiveAsgiServer`); the servers from :mod:`tests.thirdparty` (one process each
for the module).
"""

from __future__ import annotations

import json

import pytest

from tests.browser import expect
from tests.thirdparty_pages import OP_URL, ROOTS, accept, call_tool, card, results
from tests.thirdparty import everything_server, fastmcp3_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser]


def _status(op_id: str) -> str:
    from mrtrweb.models import Operation

    return Operation.objects.get(pk=op_id).status


def _json_after(prefix: str, text: str):
    assert text.startswith(prefix), text
    return json.loads(text.removeprefix(prefix))


# -- FastMCP 3 ---------------------------------------------------------------------------------------

FASTMCP = "FastMCP 3"


def test_fastmcp_profile_form_filled_by_a_person(signed_in, fastmcp3_server):  # noqa: F811
    page = signed_in(FASTMCP, fastmcp3_server.url)
    op_id = call_tool(page, FASTMCP, "profile_form", {})
    c = card(page)
    expect(c.locator(".server-message")).to_have_text("Your profile")
    expect(c.get_by_label("Age")).to_have_value("30")  # the schema's defaults, pre-filled
    expect(c.get_by_label("Team")).to_have_value("ops")
    expect(c.get_by_label("Email")).to_have_attribute("type", "email")
    c.get_by_label("Name").fill("Ada Lovelace")
    c.get_by_label("Email").fill("ada@example.test")
    c.get_by_label("Age").fill("36")
    c.get_by_label("Height").fill("1.65")
    c.get_by_label("Subscribe").check()
    c.get_by_label("Plan").select_option("pro")
    c.get_by_label("Colour").select_option(label="Blue")  # a titled oneOf
    c.get_by_label("de", exact=True).check()  # the multi-select, en kept
    accept(page)
    expect(results(page)).to_have_count(1)
    got = _json_after("profile: accept: ", results(page).inner_text())
    assert got == {"name": "Ada Lovelace", "email": "ada@example.test", "team": "ops", "birthday": "2000-01-31",
                   "age": 36, "height": 1.65, "subscribe": True, "plan": "pro", "colour": "b",
                   "languages": ["en", "de"]}
    assert _status(op_id) == "completed"


def test_fastmcp_order_form_accepted_untouched(signed_in, fastmcp3_server):  # noqa: F811
    page = signed_in(FASTMCP, fastmcp3_server.url)
    op_id = call_tool(page, FASTMCP, "order_form", {"item": "tea"})
    expect(card(page).locator(".server-message")).to_have_text("Order details for tea")
    accept(page)
    expect(results(page)).to_have_text('order tea: accept: {"code": "ABC-123", "gift": true, "seats": 2, '
                                       '"size": "m", "tip": 12.5, "toppings": ["cheese"]}')
    assert _status(op_id) == "completed"


def test_fastmcp_decline(signed_in, fastmcp3_server):  # noqa: F811
    page = signed_in(FASTMCP, fastmcp3_server.url)
    op_id = call_tool(page, FASTMCP, "confirm", {})
    with page.expect_navigation():
        card(page).get_by_role("button", name="Decline", exact=True).click()
    expect(results(page)).to_have_text("confirm: decline")
    assert _status(op_id) == "completed"


def test_fastmcp_sampling_approved_with_a_written_reply(signed_in, fastmcp3_server):  # noqa: F811
    page = signed_in(FASTMCP, fastmcp3_server.url, allow_sampling=True)
    op_id = call_tool(page, FASTMCP, "summarize", {"text": "<b>a long story</b>"})
    c = card(page)
    request = c.locator("fieldset[data-kind='sampling']")
    expect(request.locator(".message-text")).to_have_text("Summarize: <b>a long story</b>")  # as text
    assert page.locator(".message-text b").count() == 0
    c.get_by_label("I approve this sampling request").check()
    c.get_by_label("Your reply (sent to the server as the assistant's message)").fill("It was long.")
    accept(page)
    expect(results(page)).to_have_text("sampled: It was long.")
    assert _status(op_id) == "completed"


def test_fastmcp_roots_answered_at_session_level_without_a_card(signed_in, fastmcp3_server):  # noqa: F811
    """FastMCP's ``ctx.list_roots()`` asks on the standalone stream, related to no call: the
    configured roots go out at session level (issue 15 item 2); no card, no round."""
    page = signed_in(FASTMCP, fastmcp3_server.url, allow_roots=True, roots=ROOTS)
    op_id = call_tool(page, FASTMCP, "show_roots", {})
    expect(results(page)).to_have_text('roots: [{"name": "project", "uri": "file:///srv/project"}]')
    assert card(page).count() == 0
    assert _status(op_id) == "completed"


def test_fastmcp_pydantic_models_filled_in_generated_fields(signed_in, fastmcp3_server):  # noqa: F811
    """Issue 28 item 2: ``ship`` takes Pydantic models (FastMCP 3 lists them inlined, ``anyOf`` null kept):
    a person fills the nested fields, adds rows (the page again, what was typed kept, nothing
    sent), chooses null for the Optional note, and the tool says what Pydantic received."""
    page = signed_in(FASTMCP, fastmcp3_server.url)
    page.goto("/mcp/")
    page.get_by_role("link", name=FASTMCP).click()
    page.locator("a[data-tool='ship']").click()
    expect(page.get_by_role("heading", name="Call ship")).to_be_visible()
    form = page.locator("form.call-form")
    form.get_by_label("Recipient").fill("Ada")
    address = form.locator("fieldset[data-path='shipment.address']")
    address.get_by_label("Street").fill("1 Loop Rd")
    address.get_by_label("City").fill("London")
    form.get_by_label("Speed").select_option("express")
    with page.expect_navigation():
        form.locator("fieldset[data-path='shipment.tags']").get_by_role("button", name="Add a row").click()
    expect(form.get_by_label("Recipient")).to_have_value("Ada")  # kept across the row's round trip
    form.locator("[name='arg-shipment.tags.0']").fill("fragile")
    with page.expect_navigation():
        form.locator("fieldset[data-path='shipment.parcels']").get_by_role("button", name="Add a row").click()
    parcel = form.locator("fieldset[data-path='shipment.parcels'] .arg-row").first
    parcel.get_by_label("label").fill("box")  # FastMCP 3 lists the models inlined, titles dropped: the names
    parcel.get_by_label("weight_kg").fill("2.5")
    form.locator("[name='arg-note.__null']").check()
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    expect(results(page)).to_have_count(1)
    got = _json_after("ship: ", results(page).inner_text())
    assert got == {"note": None, "shipment": {
        "recipient": "Ada", "address": {"street": "1 Loop Rd", "city": "London", "zip_code": None},
        "speed": "express", "insured_value": None, "tags": ["fragile"], "parcels": [{"label": "box", "weight_kg": 2.5}]}}
    assert _status(OP_URL.search(page.url).group(1)) == "completed"
    # ``plant``'s self-recursive model: the JSON box, checked against the schema as the person types
    page.goto("/mcp/")
    page.get_by_role("link", name=FASTMCP).click()
    page.locator("a[data-tool='plant']").click()
    box, said = page.locator("textarea[name=arguments]"), page.locator(".json-check")
    box.fill('{"tree": {"children": []}}')
    expect(said).to_have_attribute("data-state", "bad")
    expect(said).to_contain_text("Does not match the tool's input schema: Arguments do not match the tool's "
                                 "schema at tree: required")
    box.fill('{"tree": {"name": "oak", "children": []}}')
    expect(said).to_have_text("Matches the tool's input schema.")
    from mrtrweb.models import Operation

    assert not Operation.objects.filter(name="plant").exists()  # checking sent nothing


# -- the everything server ---------------------------------------------------------------------------

EVERYTHING = "Everything"


def test_everything_elicitation_filled_by_a_person(signed_in, everything_server):  # noqa: F811
    page = signed_in(EVERYTHING, everything_server.url)
    op_id = call_tool(page, EVERYTHING, "trigger-elicitation-request", {})
    c = card(page)
    expect(c.locator(".server-message")).to_have_text("Please provide inputs for the following fields:")
    expect(c.get_by_label("Integer:", exact=True)).to_have_value("42")
    c.get_by_label("String:", exact=True).fill("Ada Lovelace")
    c.get_by_label("Boolean:", exact=True).check()
    c.get_by_label("String with email format:", exact=True).fill("ada@example.test")
    c.get_by_label("String with date format:", exact=True).fill("1815-12-10")
    c.get_by_label("Integer:", exact=True).fill("7")
    c.get_by_label("Untitled Single Select Enum:", exact=True).select_option("Ross")
    c.get_by_label("Titled Single Select Enum:", exact=True).select_option(label="Wonder Woman")
    c.get_by_label("Legacy Titled Single Select Enum:", exact=True).select_option(label="Dogs")
    c.get_by_label("Piano", exact=True).check()
    c.get_by_label("Salmon", exact=True).check()
    accept(page)
    blocks = results(page)
    expect(blocks.first).to_have_text("✅ User provided the requested information!")
    raw = _json_after("Raw result: ", blocks.last.inner_text().strip())
    assert raw == {"action": "accept", "content": {
        "name": "Ada Lovelace", "check": True, "firstLine": "It was a dark and stormy night.",
        "email": "ada@example.test", "birthdate": "1815-12-10", "integer": 7, "number": 3.14,
        "untitledSingleSelectEnum": "Ross", "untitledMultipleSelectEnum": ["Guitar", "Piano"],
        "titledSingleSelectEnum": "hero-3", "titledMultipleSelectEnum": ["fish-1", "fish-2"],
        "legacyTitledEnum": "pet-2"}}
    assert _status(op_id) == "completed"
