"""The consent history in a real browser (Playwright + Debian Chromium against the live ASGI app and
the valved demo MCP server, fixtures from ``tests/browser.py``): alice runs one deploy she
accepts and one she declines, then, as acme's admin, filters the tenant history through its form,
opens a timeline and downloads the CSV export; the pages fit 1100 px and 390 px wide, show times in
the viewer's zone (a browser in Europe/Berlin), copy full ids, keep their filters and paginate."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.browser import PASSWORDS, SCREENSHOTS, TEXT_DONE_SCRIPT, TIMEOUT_MS, screenshot, expect

pytestmark = [pytest.mark.browser]


#: a short id's cell is at most this many lines tall (an id wrapping one character per line is not)
MAX_ID_LINES = 3


def _assert_fits(page) -> None:
    """The page does not overflow the viewport: at 1100 px the events table's right edge is within
    it and no id cell is taller than three lines; at any width the document is no wider than the
    window."""
    width = page.evaluate("window.innerWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # nothing hidden in the table's own scroll box either (every column and copy button in sight)
    clipped = page.evaluate("""() => [...document.querySelectorAll('.history-scroll')]
        .filter(box => box.scrollWidth > box.clientWidth + 1).length""")
    assert clipped == 0, f"{clipped} history tables wider than their box at {width} px"
    table = page.locator("table.history-events")
    if table.count():
        box = table.bounding_box()
        if width >= 1000:
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, (box, width)
            tall = page.evaluate("""() => [...document.querySelectorAll('table.history-events td.ids, '
                + 'table.history-events td.user-cell, table.history-events td.time-cell')].map(td => {
                  const line = parseFloat(getComputedStyle(td).lineHeight) || 20;
                  const ids = td.querySelectorAll('.short-id');
                  const top = [...ids].map(s => s.getBoundingClientRect().height);
                  return {lines: Math.max(0, ...top) / line, cell: td.className};
                })""")
            assert all(t["lines"] <= 1.5 for t in tall), tall  # every short id on one line
            heights = page.evaluate("""() => [...document.querySelectorAll('table.history-events td.ids')]
                .map(td => { const d = td.querySelector('details'); const open = d && d.open; if (d) d.open = false;
                  const h = td.getBoundingClientRect().height / (parseFloat(getComputedStyle(td).lineHeight) || 20);
                  if (d) d.open = open; return h; })""")
            assert heights and max(heights) <= MAX_ID_LINES + 0.5, heights
        else:  # narrow: the events stack as cards within the page
            assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (box, width)


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
    page = _sign_in_berlin(app, "alice")  # the screenshots show times in the viewer's zone
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
    _assert_fits(page)
    screenshot(page, "history-tenant.png")
    page.set_viewport_size({"width": 390, "height": 844})
    _assert_fits(page)
    screenshot(page, "history-tenant-390.png")
    page.set_viewport_size({"width": 1100, "height": 1400})

    # The declined operation's timeline, one click away from the row's time.
    page.locator("tr", has_text="decline").get_by_role("link", name="Timeline").click()
    expect(page).to_have_url(re.compile(rf"/mcp/history/operations/{declined}/$"))
    expect(page.get_by_role("heading", name="Timeline of tools/call deploy")).to_be_visible()
    timeline = page.locator("table.history-events tbody tr")
    events = timeline.locator(".event-name").all_inner_texts()
    assert events[0] == "received" and events[-1] == "completed" and "submitted" in events, events
    expect(timeline.filter(has_text="submitted").locator(".actions-cell")).to_have_text("confirm_deploy: decline")
    expect(page.locator(".server-origin")).to_have_text(re.sub(r"/mcp$", "", app.mcp.url))
    _assert_fits(page)
    screenshot(page, "history-timeline.png")
    page.set_viewport_size({"width": 390, "height": 844})
    _assert_fits(page)
    screenshot(page, "history-timeline-390.png")
    page.set_viewport_size({"width": 1100, "height": 1400})
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


def _sign_in_berlin(app, username: str):
    """``username`` signed in from a browser in Europe/Berlin that may use the clipboard."""
    context = app.browser.new_context(base_url=app.live.url, viewport={"width": 1100, "height": 1400},
                                      timezone_id="Europe/Berlin", permissions=["clipboard-read", "clipboard-write"])
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(TEXT_DONE_SCRIPT)
    app.contexts.append(context)
    page = context.new_page()
    page.goto("/accounts/login/?next=/mcp/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORDS[username])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your MCP servers")).to_be_visible()
    return page


def _add_rejections(n: int) -> None:
    """``n`` refused answer attempts on the newest acme operation (long codes and reasons)."""
    from mrtrweb.audit import events as audit
    from mrtrweb.models import Operation

    op = Operation.objects.select_related("server").filter(tenant__slug="acme").order_by("-created_at").first()
    for i in range(n):
        audit.record(op, "rejected", code="mrtr_identity_or_argument_mismatch",
                     reason="answer attempt by another user on a round that was no longer open", round_number=i,
                     request_id=op.latest_request_id)


def _berlin(time_el) -> tuple[str, str, str]:
    """(shown text, the text the viewer's zone should show, title) of a ``<time class="when">``."""
    iso = time_el.get_attribute("datetime")
    instant = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    assert instant.utcoffset() == dt.timedelta(0)
    local = instant.astimezone(ZoneInfo("Europe/Berlin"))
    return time_el.inner_text(), local.strftime("%Y-%m-%d %H:%M:%S"), time_el.get_attribute("title")


def test_tenant_history_in_the_viewers_zone_copy_filters_kept_and_pages(app):
    page = _sign_in_berlin(app, "alice")
    refused: list[str] = []
    page.on("console", lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None)
    op_id = _deploy(app, page, replicas="2", env="staging", action="Decline")
    _add_rejections(60)

    # The index's "Started" column: the viewer's zone, named; UTC on hover.
    page.goto("/mcp/")
    started = page.locator(f"tr:has(a[href='/mcp/operations/{op_id}/']) time.when")
    expect(started).to_have_attribute("data-local", "1")
    shown, berlin, title = _berlin(started)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", title), title
    assert re.fullmatch(re.escape(berlin) + r" (CET|CEST|GMT\+[12]|MEZ|MESZ)", shown), (shown, berlin)
    utc_clock = dt.datetime.strptime(title, "%Y-%m-%d %H:%M:%S UTC")
    assert dt.datetime.strptime(berlin, "%Y-%m-%d %H:%M:%S") - utc_clock in (dt.timedelta(hours=1),
                                                                            dt.timedelta(hours=2))

    # The tenant history from her own history's list of the tenants she administers.
    page.get_by_role("navigation", name="Account").get_by_role("link", name="Your consent history").click()
    expect(page.locator("section.history-op time.when").first).to_have_attribute("data-local", "1")
    _assert_fits(page)
    page.get_by_role("link", name="Acme Corp history").click()
    rows = page.locator("table.history-events tbody tr")
    expect(rows).to_have_count(50)  # 50 a page
    expect(page.locator(".count")).to_contain_text(" events")
    total = int(page.locator(".count").inner_text().split()[0])
    expect(page.locator(".page-range")).to_have_text(f"1–50 of {total}")
    first_time = rows.first.locator("time.when")
    expect(first_time).to_have_attribute("data-local", "1")
    shown, berlin, title = _berlin(first_time)
    assert shown.startswith(berlin + " ") and shown != title and title.endswith(" UTC"), (shown, berlin, title)
    _assert_fits(page)  # 50 rows of long codes and reasons, digests folded: within 1100 px

    # A short id's copy button copies the full value.
    ids = rows.first.locator("td.ids .short-id").first
    full = ids.locator("code").get_attribute("title")
    assert full.startswith("mrtr-") and len(full) == len("mrtr-") + 36
    expect(ids.locator("code")).to_have_text(full[:13] + "…")
    ids.get_by_role("button", name="Copy full value").click()
    expect(ids.get_by_role("button", name="Copy full value")).to_have_attribute("data-state", "copied")
    assert page.evaluate("navigator.clipboard.readText()") == full
    expect(page.locator("#live")).to_have_text("Copied")
    # the digests of a row, folded until asked for
    details = rows.first.locator("details.digests")
    expect(details.locator("dl")).to_be_hidden()
    details.locator("summary").click()
    expect(details.locator("dl")).to_be_visible()
    expect(details.locator("dt")).to_contain_text(["hash"])

    # Filters and the page size, kept across pages ...
    form = page.locator("form.history-filters")
    form.get_by_label("Event", exact=True).select_option("rejected")
    form.get_by_label("Per page", exact=True).select_option("25")
    form.get_by_role("button", name="Apply filters").click()
    expect(page).to_have_url(re.compile(r"/mcp/tenants/acme/history/\?outcome=rejected&per_page=25$"))
    expect(rows).to_have_count(25)
    expect(rows.locator(".event-name")).to_have_text(["rejected"] * 25)
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Page 2", exact=True).click()
    expect(page).to_have_url(re.compile(r"[?&]outcome=rejected&per_page=25&page=2$"))
    expect(page.locator(".page-range")).to_contain_text("26–50 of ")
    expect(page.get_by_role("link", name="CSV")).to_have_attribute(
        "href", re.compile(r"outcome=rejected&per_page=25&format=csv"))
    # ... and when she leaves for a timeline and comes back through the navigation she has
    rows.first.get_by_role("link", name="Timeline").click()
    expect(page.get_by_role("heading", name=re.compile("^Timeline of"))).to_be_visible()
    page.get_by_role("navigation", name="Account").get_by_role("link", name="Your consent history").click()
    page.get_by_role("link", name="Acme Corp history").click()
    expect(page).to_have_url(re.compile(r"/mcp/tenants/acme/history/\?outcome=rejected&per_page=25$"))
    expect(form.get_by_label("Event", exact=True)).to_have_value("rejected")
    expect(form.get_by_label("Per page", exact=True)).to_have_value("25")
    expect(rows).to_have_count(25)
    # "Clear" forgets them
    page.get_by_role("link", name="Clear").click()
    expect(page).to_have_url(re.compile(r"/mcp/tenants/acme/history/$"))
    expect(form.get_by_label("Event", exact=True)).to_have_value("")
    page.get_by_role("navigation", name="Account").get_by_role("link", name="Your consent history").click()
    page.get_by_role("link", name="Acme Corp history").click()
    expect(page).to_have_url(re.compile(r"/mcp/tenants/acme/history/$"))
    expect(rows).to_have_count(50)

    # 390 px: the events stack as cards, nothing wider than the window.
    page.set_viewport_size({"width": 390, "height": 844})
    _assert_fits(page)
    timeline = rows.first.get_by_role("link", name="Timeline")
    timeline.scroll_into_view_if_needed()
    expect(timeline).to_be_in_viewport(ratio=1)  # whole, within the 390 px
    page.goto("/mcp/history/")
    _assert_fits(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "history-own-390.png"))  # the first screen: 60 rows below
    assert refused == []
