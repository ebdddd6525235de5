"""Servers people bring, in Chromium (issue 29): a tenant admin and a person each add a server from
the product's pages (Test first: the report appears in the page), reach its settings, edit it,
run a round through it (the demo server's ``deploy`` elicitation, answered on its card), disable,
enable and remove it -- the tenant's server and a personal one, which its owner alone sees and
which the tenant's admin sees listed (name, origin, owner)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser import OP_URL, expect, op_status, screenshot

pytestmark = [pytest.mark.browser]

FIXTURE = Path(__file__).with_name("server.json")
LOOPBACK_POLICY = {"allow_hosts": ["127.0.0.1"], "allow_http_hosts": ["127.0.0.1"]}


@pytest.fixture
def policy(settings):
    settings.MRTRWEB = {"SERVER_URL_POLICY": LOOPBACK_POLICY}


def _add(app, page, name: str) -> None:
    """On an Add page: fill name and URL, Test (the report says connected), Add."""
    page.get_by_label("Display name").fill(name)
    page.get_by_label("Streamable HTTP URL").fill(app.mcp.url)
    page.get_by_role("button", name="Test").click()
    report = page.locator("#server-test-report .server-test")
    expect(report).to_have_attribute("data-outcome", "connected")
    expect(report.locator(".test-counts [data-kind=tools]")).to_contain_text(re.compile(r"Tools: \d+"))
    page.get_by_role("button", name="Add, then set authorization").click()
    expect(page.get_by_role("heading", name=f"Settings of {name}")).to_be_visible()


def _round(app, page, name: str) -> str:
    """From the index: the server ``name``, its deploy tool, the card answered; the operation's id."""
    page.goto("/mcp/")
    page.get_by_role("link", name=name, exact=True).click()
    expect(page.get_by_role("heading", name=name)).to_be_visible()
    page.locator("a[data-tool='deploy']").click()
    page.locator("[name='arg-replicas']").fill("2")
    page.locator("[name='arg-env']").select_option("staging")
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)
    card = app.card(page)
    expect(card.locator(".server-name")).to_have_text(name)
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-29")
    app.accept(page)
    expect(page.locator(".panel")).to_have_attribute("data-status", "completed")
    assert op_status(op_id) == "completed"
    return op_id


def _row(page, name: str):
    return page.locator("tr.server-row", has=page.get_by_text(name, exact=True))


def test_a_tenant_admin_and_a_person_add_test_edit_use_disable_and_remove_servers(app, policy):
    # -- alice, acme's admin: the tenant's server --------------------------------------------------
    alice = app.sign_in("alice")
    alice.get_by_role("link", name="Manage the servers of Acme Corp").click()
    expect(alice.get_by_role("heading", name="Servers of Acme Corp")).to_be_visible()
    alice.get_by_role("button", name="Allow personal servers").click()
    expect(alice.get_by_text("Members may add servers only they see and use.")).to_be_visible()
    alice.get_by_role("link", name="Add a server").click()
    # a registry server.json fills the form in (nothing fetched), then she points it at the demo server
    alice.get_by_label("Paste a server.json").fill(FIXTURE.read_text())
    alice.get_by_role("button", name="Fill in from server.json").click()
    expect(alice.get_by_label("Streamable HTTP URL")).to_have_value("https://eu.weather.example.org/mcp")
    expect(alice.get_by_label("Display name")).to_have_value("Weather (Example Org)")
    expect(alice.locator(".registry-notes")).to_contain_text("X-Api-Key")
    expect(alice.locator(".registry-notes")).to_contain_text("never starts processes")
    _add(app, alice, "Team demo")
    alice.goto("/mcp/tenants/acme/servers/")
    _row(alice, "Team demo").get_by_role("link", name="Edit").click()
    alice.get_by_label("Display name").fill("Team demo 2")
    alice.get_by_role("button", name="Save").click()
    expect(_row(alice, "Team demo 2")).to_be_visible()
    _round(app, alice, "Team demo 2")

    # -- carol, a member: her own server --------------------------------------------------------------
    carol = app.sign_in("carol")
    carol.get_by_role("link", name="Your own servers in Acme Corp").click()
    carol.get_by_role("link", name="Add a server of your own").click()
    _add(app, carol, "Carol demo")
    # the authorization's fields show for the mode chosen only (settings.js; without it all show)
    carol.locator("select[name$='auth_mode']").select_option("none")
    expect(carol.get_by_label("Your bearer token")).to_be_hidden()
    expect(carol.get_by_label("OAuth client id")).to_be_hidden()
    carol.locator("select[name$='auth_mode']").select_option("tenant")
    expect(carol.get_by_label("Your bearer token")).to_be_visible()  # her own token, if the server wanted one
    expect(carol.get_by_label("OAuth client id")).to_be_hidden()
    carol.locator("select[name$='auth_mode']").select_option("oauth_user")
    expect(carol.get_by_label("OAuth client id")).to_be_visible()
    expect(carol.get_by_label("Your bearer token")).to_be_hidden()
    expect(carol.get_by_label("Roots (a JSON list)")).to_be_visible()
    carol.locator("select[name$='auth_mode']").select_option("none")
    carol.goto("/mcp/tenants/acme/my-servers/")
    _row(carol, "Carol demo").get_by_role("link", name="Edit").click()
    carol.get_by_label("Display name").fill("Carol's demo")
    carol.get_by_role("button", name="Save").click()
    expect(_row(carol, "Carol's demo")).to_be_visible()
    op_id = _round(app, carol, "Carol's demo")
    expect(carol.locator(".badge.personal").first).to_be_visible()  # the operation page says personal
    carol.goto(f"/mcp/history/operations/{op_id}/")
    expect(carol.locator(".timeline-meta .badge.personal")).to_be_visible()
    screenshot(carol, "personal-server-timeline.png")

    # alice sees that it exists (name, origin, owner), cannot open it, and does not list it as hers
    alice.goto("/mcp/tenants/acme/servers/")
    personal = alice.locator("tr.personal-row")
    expect(personal).to_have_count(1)
    expect(personal.locator("td").first).to_have_text("Carol's demo")
    expect(personal.locator(".owner")).to_have_text("carol")
    screenshot(alice, "tenant-servers.png")
    alice.goto("/mcp/")
    expect(alice.get_by_role("link", name="Carol's demo")).to_have_count(0)
    assert alice.goto(f"/mcp/operations/{op_id}/").status == 404

    # carol disables, enables and removes hers
    carol.goto("/mcp/tenants/acme/my-servers/")
    _row(carol, "Carol's demo").get_by_role("button", name="Disable").click()
    expect(_row(carol, "Carol's demo").locator(".server-state")).to_have_text("disabled")
    _row(carol, "Carol's demo").get_by_role("button", name="Enable").click()
    expect(_row(carol, "Carol's demo").locator(".server-state")).to_have_text("enabled")
    _row(carol, "Carol's demo").get_by_role("link", name="Remove").click()
    carol.get_by_role("button", name="Remove the server").click()
    expect(carol.get_by_text("No servers of your own yet.")).to_be_visible()

    # -- alice disables and removes the tenant's server --------------------------------------------------
    alice.goto("/mcp/tenants/acme/servers/")
    _row(alice, "Team demo 2").get_by_role("button", name="Disable").click()
    expect(_row(alice, "Team demo 2").locator(".server-state")).to_have_text("disabled")
    _row(alice, "Team demo 2").get_by_role("link", name="Remove").click()
    expect(alice.get_by_role("heading", name="Remove Team demo 2?")).to_be_visible()
    alice.get_by_role("button", name="Remove the server").click()
    expect(_row(alice, "Team demo 2")).to_have_count(0)

    # the tenant's history reads every change, by whom
    alice.goto("/mcp/tenants/acme/history/?per_page=100")
    events = alice.locator("tr.event")
    for kind in ("server_added", "server_changed", "server_disabled", "server_enabled", "server_removed",
                 "tenant_changed"):
        expect(events.locator(f"xpath=self::*[@data-event='{kind}']").first).to_be_visible()
    expect(alice.locator("tr[data-event=server_added] .user-cell", has_text="carol")).to_have_count(1)
    expect(alice.locator("tr[data-event=server_added] .event-name").first).to_have_text("added a server")
