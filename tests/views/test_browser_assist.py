"""Issue 28 item 4 in a real browser (fixtures from ``tests/browser.py``), against the demo server
built with ``assist=True``: typing in a prompt's field brings the server's suggestions into the
field's ``<datalist>``, the one picked is sent (and checked) as any typed value; the level chosen
on the server page brings the server's log messages into the operation page's pane, as text."""

from __future__ import annotations

import re

import pytest

from mrtrweb.demo.serving import serve_in_thread
from mrtrweb.demo.tools import build_demo_server
from tests.browser import OP_URL, expect

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def assist_mcp():
    handle = serve_in_thread(server=build_demo_server(assist=True))
    yield handle
    handle.stop()


def test_a_suggestion_picked_and_the_servers_log_in_the_pane(signed_in, assist_mcp):
    from mrtrweb.models import McpServer

    page = signed_in("Assisting demo", assist_mcp.url)
    server = McpServer.objects.get(name="Assisting demo")
    page.goto(f"/mcp/servers/{server.pk}/prompts/?name=release_notes")
    field = page.locator("input[name=arg-version]")
    sent: list[tuple[str, str]] = []  # the page's asks: POSTs, what was typed never in their URL (access logs)
    page.on("request", lambda r: sent.append((r.method, r.url)) if "/complete/" in r.url else None)
    field.press_sequentially("1.1")
    option = page.locator("datalist option")
    expect(option).to_have_count(1)  # only 1.1.0 starts with "1.1", 300 ms after the last key
    picked = option.get_attribute("value")
    assert picked == "1.1.0"
    # three keys typed at once: one ask (debounced), of the whole value (asked before the pick below,
    # whose own input event may make one more ask of "1.1.0")
    assert [r.params["argument"]["value"] for r in assist_mcp.log.records("completion/complete")] == ["1.1"]
    assert sent and all(method == "POST" and "arg-version=" not in url for method, url in sent), sent
    field.fill(picked)  # what choosing it in the field's list does (Chromium draws that list outside the page)
    page.get_by_role("button", name="Get prompt").click()
    expect(page).to_have_url(OP_URL)
    expect(page.get_by_text("Who will read the notes for 1.1.0?")).to_be_visible()

    page.goto(f"/mcp/servers/{server.pk}/")
    page.get_by_label("Log messages shown during my calls:").select_option("warning")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_label("Log messages shown during my calls:")).to_have_value("warning")
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=chatty")
    page.locator("input[name=arg-lines]").fill("5")
    page.locator("input[name=arg-wait]").fill("1")  # the page's socket is open before the server talks
    page.get_by_role("button", name=re.compile("^Call")).click()
    expect(page).to_have_url(OP_URL)
    lines = page.locator("#server-log li.log-line")
    expect(lines).to_have_count(2)
    expect(lines.nth(0)).to_have_text('warning chatty {"step": 4, "of": 5}')
    expect(lines.nth(1)).to_have_attribute("data-level", "error")
    expect(page.locator("#server-log")).to_be_visible()
    page.reload()  # kept with the operation when the request ended
    expect(lines).to_have_count(2)
    expect(lines.nth(1)).to_have_text('error chatty {"step": 5, "of": 5}')
