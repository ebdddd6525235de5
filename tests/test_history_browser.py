"""The consent history in a real browser (Playwright + Debian Chromium against the live ASGI app and
the valved demo MCP server, fixtures from ``tests/test_browser.py``): alice runs one deploy she
accepts and one she declines, then, as acme's admin, filters the tenant history through its form,
opens a timeline and downloads the CSV export."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from tests.test_browser import _screenshot, app, browser, expect, live, valved_mcp  # noqa: F401 -- fixtures

pytestmark = [pytest.mark.browser]


def _deploy(app, page, *, replicas: str, env: str, action: str) -> str:
    """Call deploy from the index page and answer its card; returns the operation id."""
    page.goto("/mcp/")
    op_id = app.call_tool(page, "deploy", fill={"replicas": replicas}, select={"env": env})
    card = app.card(page)
    expect(card).to_be_visible()
    if action == "Accept":
        card.get_by_label("Confirm deployment").check()
        card.get_by_label("Change ticket").fill("CHG-1042")
        card.get_by_label("Contact email").fill("ops@example.test")
        app.accept(page)
    else:
        app.submit(page, action)
    expect(page.locator(".status")).to_contain_text("Completed")
    return op_id


def test_admin_filters_opens_a_timeline_and_exports_csv(app):
    page = app.sign_in("alice")
    refused: list[str] = []  # anything the Content-Security-Policy blocked
    page.on("console", lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None)

    accepted = _deploy(app, page, replicas="3", env="production", action="Accept")
    expect(page.locator(".result pre.block")).to_contain_text("Deployed 3 replica(s) to production")
    declined = _deploy(app, page, replicas="1", env="staging", action="Decline")
    expect(page.locator(".result pre.block")).to_contain_text("declined by the user")

    # Her own history, from the index page.
    page.goto("/mcp/")
    page.get_by_role("link", name="Your consent history").click()
    expect(page.get_by_role("heading", name="Your consent history", exact=True)).to_be_visible()
    own = page.locator("section.history-op")
    expect(own).to_have_count(2)
    expect(own.first).to_have_attribute("data-operation", declined)  # newest first
    expect(own.nth(1)).to_have_attribute("data-operation", accepted)

    # The tenant history, filtered through the form.
    page.get_by_role("link", name="Acme Corp history").click()
    expect(page.get_by_role("heading", name="Acme Corp history")).to_be_visible()
    form = page.locator("form.history-filters")
    rows = page.locator("table.history-events tbody tr")
    expect(rows.first).to_be_visible()

    form.get_by_label("Event", exact=True).select_option("completed")
    form.get_by_role("button", name="Apply filters").click()
    expect(page).to_have_url(re.compile(r"[?&]outcome=completed(&|$)"))
    expect(rows).to_have_count(2)
    expect(rows.locator(".event-name")).to_have_text(["completed", "completed"])
    expect(page.locator(".count")).to_have_text("2 events")

    form.get_by_label("User", exact=True).select_option("carol")
    form.get_by_role("button", name="Apply filters").click()
    expect(page).to_have_url(re.compile(r"[?&]user=carol(&|$)"))
    expect(rows).to_have_count(0)
    expect(page.locator(".empty")).to_have_text("No events match these filters.")
    expect(form.get_by_label("Event", exact=True)).to_have_value("completed")  # the form keeps the filters

    # A wrong range is a form error, not a page of events.
    form.get_by_label("User", exact=True).select_option("")
    form.get_by_label("From", exact=True).fill("2026-02-02")
    form.get_by_label("To", exact=True).fill("2026-02-01")
    form.get_by_role("button", name="Apply filters").click()
    expect(page.locator(".field-error")).to_have_text("The end date is before the start date.")
    expect(rows).to_have_count(0)
    expect(page.get_by_role("link", name="CSV")).to_have_count(0)

    page.get_by_role("link", name="Clear").click()
    expect(page).to_have_url(re.compile(r"/mcp/tenants/acme/history/$"))
    form.get_by_label("User", exact=True).select_option("alice")
    form.get_by_label("Event", exact=True).select_option("submitted")
    form.get_by_role("button", name="Apply filters").click()
    expect(rows).to_have_count(2)
    expect(rows.locator(".actions-cell")).to_have_text(["confirm_deploy: decline", "confirm_deploy: accept"])
    _screenshot(page, "history-tenant.png")

    # The declined operation's timeline.
    page.locator(f"a[href='/mcp/history/operations/{declined}/']").click()
    expect(page.get_by_role("heading", name="Timeline of tools/call deploy")).to_be_visible()
    timeline = page.locator("table.history-events tbody tr")
    events = timeline.locator(".event-name").all_inner_texts()
    assert events[0] == "received" and events[-1] == "completed" and "submitted" in events, events
    expect(timeline.filter(has_text="submitted").locator(".actions-cell")).to_have_text("confirm_deploy: decline")
    expect(page.locator(".server-origin")).to_have_text(re.sub(r"/mcp$", "", app.mcp.url))
    _screenshot(page, "history-timeline.png")
    page.go_back()
    expect(rows).to_have_count(2)

    # The CSV export of the same selection.
    with page.expect_download() as info:
        page.get_by_role("link", name="CSV").click()
    download = info.value
    assert re.fullmatch(r"mrtr-audit-acme-\d{8}T\d{6}Z\.csv", download.suggested_filename), download.suggested_filename
    text = Path(download.path()).read_text(encoding="utf-8")
    exported = list(csv.DictReader(io.StringIO(text)))
    assert [r["event"] for r in exported] == ["submitted", "submitted"]
    assert [r["operation_id"] for r in exported] == [accepted, declined]  # chain order
    assert [r["actions"] for r in exported] == ['{"confirm_deploy":"accept"}', '{"confirm_deploy":"decline"}']
    assert all(r["retry_id"].startswith("mrtr-") and r["user_digest"].startswith("hmac-sha256:") for r in exported)
    for secret in ("CHG-1042", "ops@example.test", "requestState", "production"):
        assert secret not in text
    assert refused == []
