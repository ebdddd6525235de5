"""Real-browser end-to-end tests: Debian Chromium driven by Playwright against the whole ASGI app
(HTTP + Channels WebSocket) under uvicorn, and a real demo MCP server on loopback.

Each test is a person's path: sign in through the login form, click through to a tool, call it,
see the consent card the server pushes over the WebSocket, answer it, read the result.

The demo MCP server used here is the real one (``build_demo_server``) behind a :class:`Valve`
(``tests/live_server.py``) that can hold a ``tools/call``: a test puts the browser on the operation page,
waits for its WebSocket, and only then lets the request through, so the card (or the result)
provably arrives by push, not with the page load.

Escaping of hostile server text is not tested here (the demo server's strings are safe); see the
tests using ``tests/hostile.py``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser import DEPLOY_RESULT, OP_URL, expect, op_status, screenshot

pytestmark = [pytest.mark.browser]


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------


def test_deploy_card_is_pushed_answered_and_result_pushed(app):
    page = app.sign_in("alice")
    frames = app.record_frames(page)
    first = app.valve.hold("deploy")
    op_id = app.call_tool(page, "deploy", fill={"replicas": "3"}, select={"env": "production"})
    card = app.card(page)

    # The page is up before the server has answered: waiting, no card.
    expect(page.locator(".panel")).to_have_attribute("data-status", "running")
    expect(page.get_by_text("Waiting for the server…")).to_be_visible()
    app.wait_live(page)
    expect(card).to_have_count(0)
    app.mark_document(page)

    first.wait_arrived()
    first.release()
    expect(card).to_be_visible()  # pushed over the WebSocket
    app.assert_same_document(page)
    pushed = [f for f in frames if f.get("type") == "operation" and f.get("status") == "awaiting_input"]
    assert pushed and pushed[-1]["id"] == op_id and 'class="card"' in pushed[-1]["html"]

    # Who asks, for what, and what happens next.
    expect(card.locator(".server-name")).to_have_text("Demo server")
    expect(card.locator(".server-origin")).to_have_text(re.sub(r"/mcp$", "", app.mcp.url))
    expect(card.locator(".op-method")).to_have_text("tools/call")
    expect(card.locator(".op-name")).to_have_text("deploy")
    expect(card.locator(".server-message")).to_have_text("Deploy 3 replica(s) to production?")
    expect(card.locator(".effect")).to_have_text("Your answer goes to Demo server as the retry of tools/call deploy.")
    expect(card.get_by_label("Maintenance window (hours)")).to_have_value("2")  # the default, pre-filled
    expect(card.get_by_label("Change ticket")).to_have_value("")
    expect(card.get_by_label("Contact email")).to_have_attribute("type", "email")
    expect(page.locator("#live")).to_have_text("A server asks for your input.")
    screenshot(page, "deploy-card.png")

    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-1042")
    card.get_by_label("Contact email").fill("ops@example.test")
    card.get_by_label("Maintenance window (hours)").fill("3")
    card.get_by_label("Region").select_option(label="US East (N. Virginia)")
    card.get_by_label("email", exact=True).check()
    card.get_by_label("slack", exact=True).check()

    retry = app.valve.hold("deploy", retry=True)
    app.submit(page, "Accept")
    review = app.expect_review(page)  # nothing is sent before the person reads what will be
    expect(review.get_by_role("heading", name="Review your answer before sending")).to_be_visible()
    expect(review.locator(".server-name")).to_have_text("Demo server")
    expect(review.locator(".review-answers dt")).to_have_text(["Confirm deployment", "Change ticket", "Contact email",
                                               "Maintenance window (hours)", "Region", "Notify"])
    expect(review.locator(".review-answers dd .review-value")).to_have_text(["Yes", "CHG-1042", "ops@example.test", "3",
                                                             "US East (N. Virginia)", "emailslack"])
    expect(review.locator(".review-answers dd[data-name='notify'] li")).to_have_text(["email", "slack"])
    expect(review.locator(".effect")).to_have_text(
        "Send gives this answer to Demo server as the retry of tools/call deploy. It is sent once and cannot be "
        "taken back.")
    screenshot(page, "review.png")
    page.wait_for_timeout(300)
    assert app.mcp.calls[("deploy", True)] == 0 and not retry.arrived.is_set()
    app.submit(page, "Send")
    expect(page).to_have_url(re.compile(f"/mcp/operations/{op_id}/$"))
    expect(page.locator(".panel")).to_have_attribute("data-status", "running")
    app.wait_live(page)
    app.mark_document(page)
    retry.wait_arrived()
    retry.release()

    result = page.locator(".result pre.block")
    expect(result).to_have_text(DEPLOY_RESULT)  # pushed, no reload
    app.assert_same_document(page)
    expect(card).to_have_count(0)
    expect(page.locator(".status")).to_contain_text("Completed")
    screenshot(page, "deploy-result.png")
    assert app.mcp.calls[("deploy", False)] == 1
    assert app.mcp.calls[("deploy", True)] == 1
    assert op_status(op_id) == "completed"


def test_invalid_answer_shows_field_error_and_sends_nothing(app):
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "deploy", fill={"replicas": "1"}, select={"env": "staging"})
    card = app.card(page)
    expect(card).to_be_visible()
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("x")  # minLength 3
    card.get_by_label("Contact email").fill("ops@example.test")
    app.submit(page, "Accept")

    expect(page.locator(".panel > .error")).to_have_text("Some answers need attention.")
    ticket = card.get_by_label("Change ticket")
    field = page.locator(".field.invalid")
    expect(field).to_have_count(1)
    expect(field.locator(".field-error")).to_contain_text("at least 3 characters")
    expect(field.locator("input")).to_have_attribute("name", "in-confirm_deploy-ticket")
    expect(ticket).to_have_value("x")  # what she typed is kept
    expect(card.get_by_label("Contact email")).to_have_value("ops@example.test")
    assert app.mcp.calls[("deploy", True)] == 0
    assert op_status(op_id) == "awaiting_input"

    ticket.fill("CHG-7")
    app.accept(page)
    expect(page.locator(".result pre.block")).to_contain_text("Deployed 1 replica(s) to staging (ticket CHG-7;")
    expect(page.locator(".field-error")).to_have_count(0)
    assert app.mcp.calls[("deploy", True)] == 1


def test_book_trip_two_rounds(app):
    page = app.sign_in("alice")
    app.call_tool(page, "book_trip", fill={"destination": "Lisbon"})
    card = app.card(page)
    expect(card).to_contain_text("round 1")
    expect(card.locator(".server-message")).to_have_text("When do you travel to Lisbon?")
    card.get_by_label("Check-in date").fill("2026-12-01")
    card.get_by_label("Nights").fill("3")
    app.accept(page)

    expect(card).to_contain_text("round 2")
    expect(card.locator(".server-message")).to_have_text("3 night(s) from 2026-12-01. Choose your seat and confirm.")
    card.get_by_label("Seat").select_option("aisle")
    card.get_by_label("Confirm booking").check()
    app.accept(page)

    expect(page.locator(".result pre.block")).to_have_text("Booked 3 night(s) in Lisbon from 2026-12-01, aisle seat.")
    expect(page.locator(".status")).to_contain_text("2 rounds")
    assert app.mcp.calls[("book_trip", True)] == 2


def test_url_mode_card_opens_nothing_until_clicked(app):
    page = app.sign_in("alice")
    context = page.context
    hits: list[Any] = []
    context.on("request", lambda r: hits.append(r) if "auth.example.test" in r.url else None)
    # The reserved .test name never resolves: answer a click locally so the new tab can be inspected.
    context.route("https://auth.example.test/**",
                  lambda route: route.fulfill(status=200, content_type="text/html", body="<p>signed in</p>"))
    app.call_tool(page, "connect_account", fill={"provider": "github"})
    card = app.card(page)
    expect(card).to_be_visible()

    url = "https://auth.example.test/connect?provider=github"
    expect(card.locator(".server-message")).to_have_text("Sign in to github to connect your account.")
    expect(card.locator(".url-full")).to_have_text(url)
    expect(card.locator("mark.host")).to_have_text("auth.example.test")
    expect(card.locator(".warning")).to_have_count(0)
    link = card.get_by_role("link", name="Open auth.example.test in a new tab")
    expect(link).to_have_attribute("href", url)
    expect(link).to_have_attribute("target", "_blank")
    rel = (link.get_attribute("rel") or "").split()
    assert "noopener" in rel and "noreferrer" in rel
    expect(card.locator("input:not([type=hidden])")).to_have_count(0)  # nothing to fill in
    screenshot(page, "url-card.png")
    assert hits == []  # rendering the card fetched nothing from the site

    # Positive control: the click opens it, without an opener or a referrer.
    with page.expect_popup() as popup_info:
        link.click()
    popup = popup_info.value
    popup.wait_for_load_state()
    assert [r.url for r in hits] == [url]
    assert "referer" not in hits[0].headers
    assert popup.evaluate("() => window.opener") is None
    popup.close()

    app.submit(page, "Accept")
    review = app.expect_review(page)
    expect(review.locator(".review-url")).to_have_text(
        "You confirm that you are done at auth.example.test. The server receives “accept”, with no content.")
    assert app.mcp.calls[("connect_account", True)] == 0
    app.submit(page, "Send")
    expect(page.locator(".result pre.block")).to_have_text("Account at github connected.")
    assert app.mcp.calls[("connect_account", True)] == 1
    assert len(hits) == 1


def test_state_only_round_is_retried_without_asking(app):
    page = app.sign_in("alice")
    frames = app.record_frames(page)
    app.call_tool(page, "busy_report", fill={"topic": "sales"})
    card = app.card(page)
    expect(card).to_contain_text("round 2")  # round 1 (state only) was never shown
    expect(card.locator(".server-message")).to_have_text("Report on sales: choose a format.")
    assert app.mcp.calls[("busy_report", True)] == 1  # the state-only retry, sent without asking
    for f in frames:
        if f.get("status") == "awaiting_input":
            assert 'name="round" value="2"' in f["html"]
    card.get_by_label("Format").select_option(label="CSV data")
    app.accept(page)
    expect(page.locator(".result pre.block")).to_have_text("Report on sales ready as csv.")
    assert app.mcp.calls[("busy_report", True)] == 2
    assert app.mcp.calls[("busy_report", False)] == 1


def test_reload_shows_the_pending_round_again(app):
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    card = app.card(page)
    expect(card.locator(".server-message")).to_have_text("Deploy 2 replica(s) to staging?")
    card.get_by_label("Change ticket").fill("typed, then reloaded")
    page.reload()
    expect(page).to_have_url(re.compile(f"/mcp/operations/{op_id}/$"))
    expect(card.locator(".server-message")).to_have_text("Deploy 2 replica(s) to staging?")
    expect(card.locator("input[name=round]")).to_have_value("1")
    expect(card.get_by_label("Maintenance window (hours)")).to_have_value("2")
    expect(page.locator(".panel")).to_have_attribute("data-status", "awaiting_input")
    assert app.mcp.calls[("deploy", False)] == 1 and app.mcp.calls[("deploy", True)] == 0  # nothing re-sent
    # and the reloaded card still answers the round
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-9")
    app.accept(page)
    expect(page.locator(".result pre.block")).to_contain_text("Deployed 2 replica(s) to staging (ticket CHG-9;")
    assert app.mcp.calls[("deploy", True)] == 1


def _open_raw_socket(page) -> None:
    """A second WebSocket of this user's page that records every message it gets."""
    page.evaluate("""() => new Promise((resolve, reject) => {
        window.__raw = [];
        const ws = new WebSocket("ws://" + location.host + "/ws/mrtrweb/");
        ws.onmessage = (ev) => window.__raw.push(ev.data);
        ws.onopen = () => resolve();
        ws.onerror = () => reject(new Error("websocket failed"));
        window.__rawWs = ws;
    })""")


def _raw_barrier(page) -> list[str]:
    """Ping the raw socket and wait for the pong: what was queued for it before is in ``__raw``."""
    page.evaluate("() => { window.__raw = window.__raw.filter((m) => !m.includes('pong'));"
                  " window.__rawWs.send(JSON.stringify({type: 'ping'})); }")
    page.wait_for_function("() => window.__raw.some((m) => m.includes('pong'))")
    return page.evaluate("() => window.__raw")


def test_other_users_get_404_and_no_push(app):
    alice = app.sign_in("alice")
    hold = app.valve.hold("deploy")
    op_id = app.call_tool(alice, "deploy", fill={"replicas": "1"}, select={"env": "staging"})
    app.wait_live(alice)
    op_path = f"/mcp/operations/{op_id}/"

    watchers = {}
    for name in ("carol", "bob"):  # same tenant, other tenant
        page = app.sign_in(name)
        resp = page.goto(op_path)
        assert resp is not None and resp.status == 404
        expect(page.get_by_role("heading", name="This page does not exist")).to_be_visible()
        expect(page.locator("form.card")).to_have_count(0)
        assert page.request.get(op_path + "panel/").status == 404
        # An answer posted with their own valid session and CSRF token is refused too.
        page.goto("/mcp/")
        csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
        resp = page.request.post(op_path + "answer/", headers={"X-CSRFToken": csrf, "Referer": app.live.url + "/mcp/"},
                                 form={"action": "accept", "round": "1", "in-confirm_deploy-confirm": "on",
                                       "in-confirm_deploy-ticket": "CHG-666"})
        assert resp.status == 404
        # Back on their own index page, listening on their own WebSocket while alice's round arrives.
        page.goto("/mcp/")
        expect(page.get_by_role("heading", name="Your MCP servers")).to_be_visible()
        _open_raw_socket(page)
        watchers[name] = page

    hold.wait_arrived()
    hold.release()
    expect(app.card(alice)).to_be_visible()  # alice got her card pushed

    for name, page in watchers.items():
        received = _raw_barrier(page)
        assert not [m for m in received if op_id in m or "Deploy 1 replica" in m], (name, received)
        assert op_id not in page.content()
        expect(page.locator("form.card")).to_have_count(0)
    assert app.mcp.calls[("deploy", True)] == 0
    assert op_status(op_id) == "awaiting_input"


def _tab_to(page, selector: str, limit: int = 40) -> None:
    """Press Tab until the focused element matches ``selector``."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} is not reachable with Tab")


def _focused(page, selector: str) -> bool:
    return page.evaluate("(s) => !!document.activeElement && document.activeElement.matches(s)", selector)


def test_keyboard_only(app):
    page = app.sign_in("alice")
    hold = app.valve.hold("deploy")
    retry = app.valve.hold("deploy", retry=True)
    _tab_to(page, "a[href*='/mcp/servers/']")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Demo server")).to_be_visible()
    _tab_to(page, "a[data-tool='deploy']")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Call deploy")).to_be_visible()
    _tab_to(page, "[name='arg-env']")
    page.keyboard.type("p")  # type-ahead on the select: production
    expect(page.locator("[name='arg-env']")).to_have_value("production")
    _tab_to(page, "[name='arg-replicas']")
    page.keyboard.type("4")
    page.keyboard.press("Enter")
    expect(page).to_have_url(OP_URL)
    app.wait_live(page)

    hold.wait_arrived()
    hold.release()
    card = app.card(page)
    expect(card).to_be_visible()
    page.wait_for_function("() => document.activeElement === document.querySelector('#operation form.card')")

    _tab_to(page, "[name='in-confirm_deploy-confirm']")
    page.keyboard.press("Space")
    expect(card.get_by_label("Confirm deployment")).to_be_checked()
    _tab_to(page, "[name='in-confirm_deploy-ticket']")
    page.keyboard.type("CHG-2001")
    _tab_to(page, "[name='in-confirm_deploy-email']")
    page.keyboard.type("kb@example.test")
    _tab_to(page, "[name='in-confirm_deploy-region']")
    page.keyboard.type("A")  # Asia Pacific (Mumbai)
    expect(card.get_by_label("Region")).to_have_value("ap-south-1")
    _tab_to(page, "[name='in-confirm_deploy-notify'][value='pager']")
    page.keyboard.press("Space")
    _tab_to(page, "button[value='accept']")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    app.expect_review(page)  # the focus is on the review's heading
    _tab_to(page, "button[value='send']")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    app.wait_live(page)
    retry.wait_arrived()
    retry.release()
    expect(page.locator(".result pre.block")).to_have_text(
        "Deployed 4 replica(s) to production (ticket CHG-2001; region ap-south-1; window 2h; "
        "contact kb@example.test; notify pager).")
    assert app.mcp.calls[("deploy", True)] == 1


def test_stale_refresh_does_not_hide_a_pushed_card(app):
    """The catch-up refresh (panel fetch on WebSocket open) may answer after a push: the older
    "running" panel must not replace the card the push brought."""
    page = app.sign_in("alice")
    hold = app.valve.hold("deploy")
    held_routes: list[Any] = []
    page.route("**/panel/", lambda route: held_routes.append(route))
    op_id = app.call_tool(page, "deploy", fill={"replicas": "1"}, select={"env": "staging"})
    expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open")
    for _ in range(500):  # route handlers run while Playwright dispatches events
        if held_routes:
            break
        page.wait_for_timeout(10)
    assert held_routes, "the page did not fetch its panel on WebSocket open"
    stale = held_routes[0].fetch()  # the panel as it is now: running, no card
    assert 'data-status="running"' in stale.text()

    hold.wait_arrived()
    hold.release()
    card = app.card(page)
    expect(card).to_be_visible()  # pushed
    held_routes[0].fulfill(response=stale)
    page.wait_for_function("() => window.__textDone.some((u) => u.endsWith('/panel/'))")
    expect(card).to_be_visible()
    expect(page.locator(".panel")).to_have_attribute("data-status", "awaiting_input")
    assert op_status(op_id) == "awaiting_input"
