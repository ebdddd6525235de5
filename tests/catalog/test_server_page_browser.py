"""A server's page as the server offers it, in Chromium (issue 28, item 1), against the npm
reference server ``@modelcontextprotocol/server-everything`` 2026.8.31 (a server this project
never wrote: titles, annotations on every tool, an output schema, instructions) and our demo
server (a destructive tool whose rounds must warn on every card).

Shown: the server's own name, title and version, its capabilities and instructions (one click);
each tool's title beside its name, its annotation badges, its input and output schema one click
away; the filter box; a destructive tool's warning on its call page and its card; nothing fetched;
an unreachable server's reason in words and Try again (item 6).
"""

from __future__ import annotations

import pytest

from tests.browser import expect, screenshot
from tests.thirdparty import everything_server  # noqa: F401 -- fixture

pytestmark = [pytest.mark.browser]


def test_the_everything_servers_page_as_it_describes_itself(signed_in, everything_server):  # noqa: F811
    page = signed_in("Everything", everything_server.url)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.get_by_role("link", name="Everything").click()
    expect(page.get_by_role("heading", name="Everything")).to_be_visible()
    identity = page.locator(".server-identity")
    expect(identity.locator(".server-info-name")).to_have_text("Everything Reference Server")
    expect(identity).to_contain_text("mcp-servers/everything")
    expect(identity.locator(".server-info-version")).to_have_text("2.0.0")
    expect(identity.locator(".server-capabilities")).to_contain_text("tools (listChanged)")
    expect(identity.locator(".server-capabilities")).to_contain_text("resources (listChanged, subscribe)")
    instructions = identity.locator(".server-instructions")
    expect(instructions.locator("p")).to_be_hidden()
    instructions.locator("summary").click()
    expect(instructions.locator("p")).to_be_visible()

    echo = page.locator("ul.tools > li").filter(has=page.locator("a[data-tool='echo']"))
    expect(echo.locator(".item-title")).to_have_text("Echo Tool")
    expect(echo.locator(".badge.hint")).to_have_text(["read-only"])  # idempotent is implied; closed world
    toggle = page.locator("ul.tools > li").filter(has=page.locator("a[data-tool='toggle-simulated-logging']"))
    expect(toggle.locator(".badge.hint")).to_have_count(0)  # neither read-only nor destructive: no badge

    total = page.locator("ul.tools > li").count()
    assert total >= 15
    page.locator("#listing-filter").fill("structured")
    expect(page.locator("ul.tools > li:visible")).to_have_count(1)
    expect(page.locator(".filter-count")).to_have_text(f"1 / {page.locator('li.listed').count()}")
    page.locator("#listing-filter").fill("")
    expect(page.locator("ul.tools > li:visible")).to_have_count(total)
    screenshot(page, "server-page-everything.png")
    # the schemas: one click away, on the tool's page
    page.locator("a[data-tool='get-structured-content']").click()
    schema = page.locator("details.input-schema")
    expect(schema.locator("pre")).to_be_hidden()
    schema.locator("summary").click()
    expect(schema.locator("pre")).to_contain_text('"location"')
    page.locator("details.output-schema summary").click()
    expect(page.locator("details.output-schema pre")).to_contain_text('"temperature"')
    expect(page.locator(".tool-hints .item-title")).to_have_text("Get Structured Content Tool")
    # the page talked to nothing but the product (the server's URLs in its texts are text)
    assert all(u.startswith(page.url.split("/mcp/")[0]) or u.startswith("data:") for u in requests), requests


def test_a_destructive_tool_warns_on_its_call_page_and_on_every_card(app):
    page = app.sign_in("alice")
    page.get_by_role("link", name="Demo server").click()
    deploy = page.locator("ul.tools > li").filter(has=page.locator("a[data-tool='deploy']"))
    expect(deploy.locator(".badge.hint-destructive")).to_have_text("destructive")
    echo = page.locator("ul.tools > li").filter(has=page.locator("a[data-tool='echo']"))
    expect(echo.locator(".badge.hint-read_only")).to_have_text("read-only")
    expect(echo.locator(".badge.hint-destructive, .badge.hint-maybe_destructive")).to_have_count(0)
    page.locator("a[data-tool='deploy']").click()
    expect(page.locator(".destructive-warning")).to_contain_text("This tool may change or delete things.")
    page.locator("[name='arg-replicas']").fill("1")
    page.locator("[name='arg-env']").select_option("staging")
    page.get_by_role("button", name="Call tool").click()
    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".destructive-warning")).to_be_visible()
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("CHG-1042")
    card.get_by_label("Contact email").fill("ops@example.test")
    app.submit(page, "Accept")
    review = app.expect_review(page)
    expect(review.locator(".destructive-warning")).to_be_visible()
    # a read-only tool's operation has no warning anywhere
    app.open_tool(page, "echo")
    expect(page.locator(".destructive-warning")).to_have_count(0)


def test_an_unreachable_server_says_why_and_try_again_reads_it_once_it_listens(signed_in):
    """Issue 28, item 6, as a person sees it: nothing listens at the server's URL, so its page says
    the connection was refused (not "lists no tools") and offers Try again; once a server listens
    there, Try again shows its tools."""
    from mrtrweb.bench.machine import free_port
    from mrtrweb.demo.serving import serve_in_thread

    port = free_port()
    page = signed_in("Later", f"http://127.0.0.1:{port}/mcp")
    page.get_by_role("link", name="Later").click()
    expect(page.locator("[data-reason]")).to_have_attribute("data-reason", "refused")
    expect(page.locator("[data-reason]")).to_contain_text("Connection refused")
    expect(page.get_by_text("This server lists no tools.")).to_have_count(0)
    server = serve_in_thread(port=port)
    try:
        page.get_by_role("link", name="Try again").click()
        expect(page.locator("[data-reason]")).to_have_count(0)
        expect(page.locator("a[data-tool='deploy']")).to_be_visible()
    finally:
        server.stop()
