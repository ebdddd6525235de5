"""Results as people read them, in Chromium (issue 28, item 3), against the npm reference server
``@modelcontextprotocol/server-everything`` 2026.8.31: an image shown (its bytes are a PNG), a
structured result checked against the tool's output schema and shown once as a table, resource
links with **Read** (a new ``resources/read`` operation), text meant for the assistant folded,
a finished operation's arguments, Run again and Change the arguments; nothing fetched but the
product's own pages."""

from __future__ import annotations

import pytest

from tests.browser import OP_URL, expect, screenshot
from tests.thirdparty import everything_server  # noqa: F401 -- fixture

pytestmark = [pytest.mark.browser]


def _call(page, tool: str, fill: dict[str, str] | None = None, select: dict[str, str] | None = None) -> None:
    page.get_by_role("link", name="Everything").first.click()
    page.locator(f"a[data-tool='{tool}']").click()
    for name, value in (fill or {}).items():
        page.locator(f"[name='arg-{name}']").fill(value)
    for name, value in (select or {}).items():
        page.locator(f"[name='arg-{name}']").select_option(value)
    page.get_by_role("button", name="Call tool").click()
    expect(page).to_have_url(OP_URL)
    expect(page.locator(".status-label")).not_to_have_text("Running", timeout=20_000)


def test_the_everything_servers_results(signed_in, everything_server):  # noqa: F811
    page = signed_in("Everything", everything_server.url)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    base = page.url.split("/mcp/")[0]

    _call(page, "get-tiny-image")
    result = page.locator(".result")
    image = result.locator(".block-image img")
    expect(image).to_be_visible()
    assert image.evaluate("i => i.complete && i.naturalWidth") == 20  # the PNG decoded in the page
    assert (image.get_attribute("src") or "").startswith("data:image/png;base64,iVBOR")
    expect(result).not_to_contain_text("iVBORw0KGgo")  # never a base64 dump
    expect(page.locator(".sent-arguments")).to_have_count(0)  # no arguments
    expect(page.get_by_role("button", name="Run again")).to_be_visible()

    _call(page, "get-structured-content", select={"location": "Chicago"})
    structured = page.locator(".structured")
    expect(structured.locator(".structured-verdict")).to_have_text("It matches the tool's output schema.")
    expect(structured.locator("table.structured-table th[scope=row]")).to_have_text(
        ["temperature", "conditions", "humidity"])
    expect(page.locator(".duplicate-dropped")).to_be_visible()  # its JSON text block is not shown twice
    expect(page.locator("pre.block-text")).to_have_count(0)
    page.locator(".sent-arguments summary").click()
    expect(page.locator(".sent-arguments pre")).to_contain_text('"location": "Chicago"')
    change = page.locator("a.change-arguments")
    expect(change).to_be_visible()
    change.click()
    expect(page.locator("[name='arg-location']")).to_have_value("Chicago")

    # the debug message says audience ["assistant"]: folded, not hidden
    _call(page, "get-annotated-message", select={"messageType": "debug"})
    folded = page.locator("details.for-assistant")
    expect(folded).to_have_count(1)
    expect(folded.locator("pre")).to_be_hidden()
    folded.locator("summary").click()
    expect(folded.locator("pre")).to_have_text("Debug: Cache hit ratio 0.95, latency 150ms")
    screenshot(page, "result-annotated.png")

    _call(page, "get-resource-links", fill={"count": "2"})
    links = page.locator(".block-resource-link")
    expect(links).to_have_count(2)
    first_uri = links.first.locator(".resource-uri").inner_text()
    links.first.get_by_role("button", name="Read").click()
    expect(page).to_have_url(OP_URL)
    expect(page.locator("h1")).to_contain_text("resources/read")
    expect(page.locator("h1")).to_contain_text(first_uri)
    expect(page.locator(".status-label")).to_have_text("Completed", timeout=20_000)
    expect(page.locator(".result .block").first).to_be_visible()  # its contents, text or a download
    assert all(u.startswith(base) or u.startswith("data:") for u in requests), requests
