"""How an operation's end reads in a real browser, and the way on (issue 17, "A person"):
Playwright + Debian Chromium against the live ASGI app (fixtures from ``tests/browser.py``).

* a round nobody answers expires (a short ``TTL_S``, as tests/operations/test_expiry.py): the page says it
  expired and that nothing was sent, never "Waiting for your answer", and "Run again" starts a new
  operation whose request carries the same arguments (the demo server's log);
* the person's Stop reads "Stopped by you" on the page and in the index (the row stays ``denied``);
* an answer sent again from a second tab (one without live updates) is a 409 that says the round
  is closed once, with the operation's real status and its result;
* the site's 404 page (the app's navigation, a link home) at 1100 and 390 px, and no failed
  favicon request on any of these pages.

Screenshots (var/screenshots/): expired-run-again, stopped-by-you, conflict-409, not-found, each
also at 390 px (``-390``).
"""

from __future__ import annotations

import re

import pytest

from tests.browser import OP_URL, PASSWORDS, TIMEOUT_MS, screenshot, op_status, expect

pytestmark = [pytest.mark.browser]

WAITING = "Waiting for your answer"


@pytest.fixture
def short_ttl(settings):
    from mrtrweb import operations

    settings.MRTRWEB = {"TTL_S": 2}
    operations.reset_gate()
    yield
    operations.reset_gate()


def _watch_favicons(page) -> list[str]:
    """Every favicon request of ``page`` that answered an error or failed (register before
    loading). A request the browser itself aborted because the page navigated on meanwhile
    (``net::ERR_ABORTED``: a form posted while the icon loaded) is no missing icon: not counted."""
    failed: list[str] = []

    def on_failed(r) -> None:
        if "favicon" in r.url and "ERR_ABORTED" not in (r.failure or ""):
            failed.append(f"{r.url} failed: {r.failure}")

    page.on("requestfailed", on_failed)
    page.on("response", lambda r: failed.append(f"{r.url} {r.status}") if "favicon" in r.url and r.status >= 400
            else None)
    return failed


def _assert_favicon(page, failed: list[str]) -> None:
    """The page links the SVG icon, it loads, ``/favicon.ico`` (the browser's default) leads to it,
    and no favicon request of the page failed."""
    icon = page.locator("link[rel=icon]")
    expect(icon).to_have_attribute("href", "/static/mrtrweb/favicon.svg")
    got = page.evaluate("""async () => {
        const svg = await fetch(document.querySelector('link[rel=icon]').href);
        const ico = await fetch('/favicon.ico');
        return [svg.status, svg.headers.get('content-type'), ico.status, ico.redirected, new URL(ico.url).pathname];
    }""")
    assert got[0] == 200 and got[1].startswith("image/svg+xml"), got
    assert got[2:] == [200, True, "/static/mrtrweb/favicon.svg"], got
    assert failed == []


def _fits(page) -> None:
    """Nothing overflows the viewport sideways."""
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    wide = page.evaluate("""() => [...document.querySelectorAll('main *')]
        .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1).map((e) => e.outerHTML.slice(0, 80))""")
    assert wide == []


def _both_widths(page, name: str) -> None:
    _fits(page)
    screenshot(page, f"{name}.png")
    page.set_viewport_size({"width": 390, "height": 844})
    _fits(page)
    screenshot(page, f"{name}-390.png")
    page.set_viewport_size({"width": 1100, "height": 1400})


def _first_calls(app, tool: str) -> list[dict]:
    return [dict(r.params.get("arguments") or {}) for r in app.mcp.log.tool_calls(tool) if not r.is_retry]


def test_an_expired_round_says_so_and_runs_again_with_the_same_arguments(app, short_ttl):
    page = app.sign_in("alice")
    failed = _watch_favicons(page)
    op_id = app.call_tool(page, "deploy", fill={"replicas": "3"}, select={"env": "production"})
    expect(app.card(page)).to_be_visible()
    # nobody answers: the round's lifetime (2 s) and the sweep's grace pass; the page settles it
    page.wait_for_timeout(4500)
    page.reload()
    panel = page.locator(".panel")
    expect(panel).to_have_attribute("data-status", "expired")
    expect(panel.locator(".status-label")).to_have_text("Expired")
    outcome = panel.locator(".outcome")
    expect(outcome.get_by_role("heading", name="This round expired")).to_be_visible()
    expect(outcome.locator(".expired-reason")).to_contain_text("Nothing was sent to the server.")
    expect(outcome.locator(".expired-reason")).to_contain_text(
        re.compile(r"closed at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    expect(page.get_by_text(WAITING)).to_have_count(0)
    expect(page.get_by_text("no longer open")).to_have_count(0)
    expect(app.card(page)).to_have_count(0)
    assert app.mcp.calls[("deploy", True)] == 0  # nothing was sent for the round
    _assert_favicon(page, failed)
    _both_widths(page, "expired-run-again")

    with page.expect_navigation():
        outcome.get_by_role("button", name="Run again").click()
    expect(page).to_have_url(OP_URL)
    new_id = OP_URL.search(page.url).group(1)
    assert new_id != op_id
    expect(app.card(page).locator(".server-message")).to_have_text("Deploy 3 replica(s) to production?")
    calls = _first_calls(app, "deploy")
    assert len(calls) == 2 and calls[1] == calls[0] and calls[0]["replicas"] == 3, calls  # the same arguments
    # the old page now leads to the new operation (run again once)
    page.goto(f"/mcp/operations/{op_id}/")
    expect(page.locator(".way-on .rerun-of")).to_have_attribute("href", f"/mcp/operations/{new_id}/")
    expect(page.get_by_role("button", name="Run again")).to_have_count(0)


def test_the_persons_stop_reads_stopped_by_you(app):
    page = app.sign_in("alice")
    failed = _watch_favicons(page)
    op_id = app.call_tool(page, "deploy", fill={"replicas": "1"}, select={"env": "staging"})
    expect(app.card(page)).to_be_visible()
    with page.expect_navigation():
        page.get_by_role("button", name="Stop this operation without answering").click()
    panel = page.locator(".panel")
    expect(panel).to_have_attribute("data-status", "denied")
    expect(panel.locator(".status-label")).to_have_text("Stopped by you")
    expect(panel.get_by_role("heading", name="The operation was stopped")).to_be_visible()
    expect(panel.locator(".denied-reason")).to_have_text(
        "You stopped this operation; nothing was sent for its open round.")
    expect(panel.get_by_text("Denied", exact=True)).to_have_count(0)
    expect(panel.get_by_role("button", name="Run again")).to_be_visible()
    assert op_status(op_id) == "denied"  # the stored status is unchanged
    _assert_favicon(page, failed)
    _both_widths(page, "stopped-by-you")

    page.goto("/mcp/")
    row = page.locator("table.ops tr", has=page.locator(f"a[href='/mcp/operations/{op_id}/']"))
    expect(row.locator("td.status")).to_have_text("Stopped by you")
    assert failed == []


def test_an_answer_sent_again_from_a_second_tab_is_a_409_said_once(app):
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    expect(app.card(page)).to_be_visible()

    # a second tab without live updates (JavaScript off): its card stays as it was served
    stale_context = app.browser.new_context(base_url=app.live.url, viewport={"width": 1100, "height": 1400},
                                            java_script_enabled=False)
    app.contexts.append(stale_context)
    stale_context.set_default_timeout(TIMEOUT_MS)
    stale = stale_context.new_page()
    failed = _watch_favicons(stale)
    stale.goto("/accounts/login/")
    stale.get_by_label("Username").fill("alice")
    stale.get_by_label("Password").fill(PASSWORDS["alice"])
    stale.get_by_role("button", name="Sign in").click()
    stale.goto(f"/mcp/operations/{op_id}/")
    expect(stale.locator("form.card")).to_be_visible()

    app.submit(page, "Decline")  # the first tab answers: sent at once, the server ends the operation
    expect(page.locator(".panel")).to_have_attribute("data-status", "completed")

    responses = []
    stale.on("response", lambda r: responses.append(r.status) if r.url.endswith("/answer/") else None)
    with stale.expect_navigation():
        stale.locator("form.card").get_by_role("button", name="Decline", exact=True).click()
    assert responses == [409]
    body = stale.locator("main")
    expect(body.get_by_text(re.compile("no longer open"))).to_have_count(1)
    expect(body.get_by_text(WAITING)).to_have_count(0)
    expect(stale.locator(".panel .status-label")).to_have_text("Completed")
    expect(stale.locator(".result pre.block")).to_be_visible()  # the way on: the result
    expect(stale.locator(".result pre.block")).to_have_text("Deployment declined by the user; nothing was done.")
    assert app.mcp.calls[("deploy", True)] == 1  # sent once
    assert failed == []
    _assert_favicon(page, [])  # (fetched from the tab with JavaScript)
    _both_widths(stale, "conflict-409")


def test_the_404_page(app, settings):
    settings.DEBUG = False
    page = app.sign_in("alice")
    failed = _watch_favicons(page)
    resp = page.goto("/mcp/operations/00000000-0000-0000-0000-000000000000/")
    assert resp.status == 404
    expect(page.get_by_role("heading", name="This page does not exist")).to_be_visible()
    expect(page.locator("header .who")).to_have_text("Signed in as alice")  # the app's navigation
    home = page.get_by_role("link", name="Back to your MCP servers")
    _assert_favicon(page, failed)
    _both_widths(page, "not-found")
    home.click()
    expect(page.get_by_role("heading", name="Your MCP servers")).to_be_visible()
    assert failed == []


def test_no_favicon_request_fails_from_sign_in_on(app):
    """From the sign-in page (templates/registration) through the index: every page links the icon,
    and no favicon request fails or answers an error."""
    page = app.new_context().new_page()
    failed = _watch_favicons(page)
    page.goto("/accounts/login/?next=/mcp/")
    _assert_favicon(page, failed)
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORDS["alice"])
    with page.expect_navigation():
        page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your MCP servers")).to_be_visible()
    _assert_favicon(page, failed)


def test_outcome_and_error_pages_pass_axe(app, axe_js):
    """axe-core finds no serious or critical violation on a stopped operation's page (its outcome
    and Run again) nor on the 404 page."""
    from tests.views.axe import serious_violations, sign_in_page

    page = sign_in_page(app, "alice", bypass_csp=True)  # axe is injected as a script tag
    app.open_tool(page, "deploy")
    page.locator("[name='arg-replicas']").fill("1")
    page.locator("[name='arg-env']").select_option("staging")
    page.get_by_role("button", name="Call tool").click()
    expect(app.card(page)).to_be_visible()
    with page.expect_navigation():
        page.get_by_role("button", name="Stop this operation without answering").click()
    expect(page.locator(".panel .status-label")).to_have_text("Stopped by you")
    assert serious_violations(page, axe_js) == []
    page.goto("/mcp/nothing-here/")
    expect(page.get_by_role("heading", name="This page does not exist")).to_be_visible()
    assert serious_violations(page, axe_js) == []
