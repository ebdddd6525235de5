"""Interop in a real browser: a person completes every tool of the TypeScript MRTR server
(``@modelcontextprotocol/server@2.4.0``, ``tests/ts_server/``) through the consent card.

Debian Chromium driven by Playwright against the whole ASGI app under uvicorn
(:class:`tests.live_server.LiveAsgiServer`), the TypeScript server on loopback (:func:`tests.ts_peer.ts_server`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import expect
from tests.thirdparty_pages import accept, call_from_list, card
from tests.ts_peer import ts_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser]

TIMEOUT_MS = 10_000
TS_SERVER_NAME = "TypeScript server"


@pytest.fixture
def page(seeded, browser, live, ts_server):  # noqa: F811
    """Alice, signed in, with a "TypeScript server" in her tenant pointing at the TypeScript server."""
    from mrtrweb.models import McpServer

    McpServer.objects.create(tenant=seeded["servers"]["acme"].tenant, name=TS_SERVER_NAME, url=ts_server.url)
    ts_server.clear()
    context = browser.new_context(base_url=live.url, viewport={"width": 1100, "height": 1400})
    context.set_default_timeout(TIMEOUT_MS)
    p = context.new_page()
    p.goto("/accounts/login/?next=/mcp/")
    p.get_by_label("Username").fill("alice")
    p.get_by_label("Password").fill("alice-demo-pw")
    p.get_by_role("button", name="Sign in").click()
    expect(p.locator("header .who")).to_have_text("Signed in as alice")
    try:
        yield p
    finally:
        context.close()


# -- the person's steps (one place each, so a review step can be added here) ------------------------


def call_tool(page, tool: str, args: dict[str, str], server_name: str = TS_SERVER_NAME) -> str:
    """The TypeScript server's tool, from the server list (:func:`tests.thirdparty_pages.call_from_list`)."""
    return call_from_list(page, tool, args, server_name)


def result(page):
    return page.locator(".result pre.block")


def _op(op_id: str) -> Any:
    from mrtrweb.models import Operation

    return Operation.objects.get(pk=op_id)


def _assert_each_retry_once(ts_server, tool: str, rounds: int) -> None:  # noqa: F811
    """The server got the call once and each round's retry once, echoing the state it minted."""
    calls = ts_server.tool_calls(tool)
    minted = ts_server.minted(tool)
    assert len(minted) == rounds and len(calls) == rounds + 1, [c["params"] for c in calls]
    assert [c["params"].get("requestState") for c in calls[1:]] == [m["requestState"] for m in minted]
    assert ts_server.entries("refused") == []


# -- tests -------------------------------------------------------------------------------------------


def test_form_tool_through_the_card(page, ts_server):  # noqa: F811
    op_id = call_tool(page, "form", {"subject": "tea"})
    c = card(page)
    expect(c.locator(".server-name")).to_have_text(TS_SERVER_NAME)
    expect(c.locator(".server-message")).to_have_text("Order tea: who orders, and what?")
    # the SDK's zod-converted schema: every field with its label, type and default
    expect(c.get_by_label("Quantity")).to_have_value("2")
    expect(c.get_by_label("Budget (EUR)")).to_have_value("99.5")
    expect(c.get_by_label("Color")).to_have_value("green")
    expect(c.get_by_label("Email")).to_have_attribute("type", "email")
    expect(c.get_by_label("express", exact=True)).to_be_checked()
    expect(c.get_by_label("Confirm")).not_to_be_checked()

    c.get_by_label("Confirm").check()
    c.get_by_label("Full name").fill("Ada Lovelace")
    c.get_by_label("Email").fill("ada@example.test")
    c.get_by_label("Quantity").fill("3")
    c.get_by_label("Color").select_option("red")
    c.get_by_label("insurance", exact=True).check()
    accept(page)

    expect(result(page)).to_have_text("Order of tea for Ada Lovelace <ada@example.test>: confirm=true, quantity=3, "
                                      "budget=99.5, color=red, extras=express+insurance.")
    expect(card(page)).to_have_count(0)
    assert _op(op_id).status == "completed"
    _assert_each_retry_once(ts_server, "form", 1)


def test_url_tool_through_the_card(page, ts_server):  # noqa: F811
    hits: list[str] = []
    page.context.on("request", lambda r: hits.append(r.url) if "auth.example.test" in r.url else None)
    op_id = call_tool(page, "url", {"provider": "github"})
    c = card(page)
    expect(c.locator(".server-message")).to_have_text("Sign in to github to connect your account.")
    [state] = ts_server.minted("url")
    url = f"https://auth.example.test/ts-connect?provider=github&e={state['payload']['elicitation']}"
    expect(c.locator(".url-full")).to_have_text(url)
    expect(c.locator("mark.host")).to_have_text("auth.example.test")
    expect(c.get_by_role("link", name="Open auth.example.test in a new tab")).to_have_attribute("href", url)
    accept(page)
    expect(result(page)).to_have_text(f"Account at github connected (elicitation {state['payload']['elicitation']}).")
    assert _op(op_id).status == "completed"
    assert hits == []  # nothing fetched from the sign-in site unless the person opens it
    _assert_each_retry_once(ts_server, "url", 1)


def test_state_only_tool_completes_without_a_card(page, ts_server):  # noqa: F811
    op_id = call_tool(page, "state_only", {"ticket": "JOB-9"})
    expect(result(page)).to_contain_text("Job JOB-9 done")
    [state] = ts_server.minted("state_only")
    nonce = state["payload"]["nonce"]
    expect(result(page)).to_have_text(f"Job JOB-9 done after a state-only round (state nonce {nonce}).")
    expect(card(page)).to_have_count(0)  # nothing to ask the person
    assert _op(op_id).status == "completed"
    _assert_each_retry_once(ts_server, "state_only", 1)


def test_multi_round_tool_through_two_cards(page, ts_server):  # noqa: F811
    op_id = call_tool(page, "multi_round", {"destination": "Oslo"})
    c = card(page)
    expect(c).to_contain_text("round 1")
    expect(c.locator(".server-message")).to_have_text("When do you travel to Oslo?")
    expect(c.get_by_label("Nights")).to_have_value("3")
    c.get_by_label("Start date").fill("2026-12-01")
    accept(page)

    expect(c).to_contain_text("round 2")
    expect(c.locator(".server-message")).to_have_text("3 night(s) in Oslo from 2026-12-01: choose your seat.")
    expect(c.get_by_label("Meal included")).to_be_checked()
    c.get_by_label("Seat").select_option("aisle")
    accept(page)

    expect(result(page)).to_have_text("Booked 3 night(s) in Oslo from 2026-12-01, aisle seat, meal included.")
    expect(page.locator(".status")).to_contain_text("2 rounds")
    assert _op(op_id).status == "completed"
    _assert_each_retry_once(ts_server, "multi_round", 2)


def test_two_requests_in_one_card(page, ts_server):  # noqa: F811
    op_id = call_tool(page, "two_questions", {"topic": "db-down"})
    c = card(page)
    expect(c).to_contain_text("Incident db-down: how urgent is it?")
    expect(c).to_contain_text("Verify your identity.")
    expect(c.locator(".url-full")).to_have_text("https://verify.example.test/ts-verify?topic=db-down")
    priority = c.get_by_label("Priority")
    expect(priority).to_have_value("p2")  # the default of the titled oneOf
    priority.select_option(label="P1: page someone now")
    c.get_by_label("Note").fill("disk full")
    accept(page)
    expect(result(page)).to_have_text('Incident db-down: contact priority p1, note "disk full"; verify accept.')
    assert _op(op_id).status == "completed"
    _assert_each_retry_once(ts_server, "two_questions", 1)


def test_defaults_form_accepted_untouched(page, ts_server):  # noqa: F811
    """Every field pre-filled with the server's default: Accept without touching sends them."""
    op_id = call_tool(page, "defaults_form", {"item": "pizza"})
    c = card(page)
    expect(c.locator(".server-message")).to_have_text("Order pizza: check the details.")
    expect(c.get_by_label("Accept the terms")).to_be_checked()
    expect(c.get_by_label("Nickname")).to_have_value("guest")
    accept(page)
    expect(result(page)).to_have_text("pizza for guest <guest@example.test>: accept=true, seats=1, tip=2.5, size=m, "
                                      "toppings=cheese+basil.")
    assert _op(op_id).status == "completed"
    _assert_each_retry_once(ts_server, "defaults_form", 1)
