"""MCP Apps in Chromium (issue 31, items 1-3): the real npm app server
``@modelcontextprotocol/server-basic-vanillajs``; its ``get-time`` called by a person renders its app
in the sandbox origin's frame, showing the call's result; the proxy refuses top-level load and
another embedder; the app's document carries the CSP its resource declared; no cookie of the site
reaches the sandbox origin and nothing the host posts to the frame holds a token or session; the app's
own ``get-time`` call goes through the product, confirmed by the person on the host's card. And
the demo server's own app (``service_status``, what ``./dev demo`` shows): rendered, its button's
app-only, read-only call made through the product without asking."""

from __future__ import annotations

import json

import pytest

from mrtrweb.mcpapps import csp as app_csp
from tests.browser import OP_URL, expect, screenshot
from tests.mcpapps.registry_apps import RECORDER, node_app_server

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BASIC = "@modelcontextprotocol/server-basic-vanillajs@2.0.3"


@pytest.fixture(scope="module")
def basic_app_server():
    """The npm example server on 127.0.0.1 (it listens on every interface; PORT from its main.ts)."""
    yield from node_app_server("apps-basic", BASIC)


def test_get_time_app_renders_in_the_sandbox_and_nothing_leaks(signed_in, basic_app_server, sandboxed, live):
    from mrtrweb.models import McpServer, Operation

    page = signed_in("Basic app", basic_app_server, apps_enabled=True)
    context = page.context
    recorded = []  # (frame url, message) of every message any frame received, also after a frame is gone
    context.expose_binding("__record", lambda source, text: recorded.append((source["frame"].url, text)))
    context.add_init_script(RECORDER)
    sandbox_requests, documents = [], []
    context.on("request", lambda r: sandbox_requests.append(r) if r.url.startswith(sandboxed) else None)
    context.on("response", lambda r: documents.append(r) if "/apps/sandbox/doc/" in r.url else None)
    server = McpServer.objects.get(name="Basic app")
    console = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))

    # the server page: get-time has an app
    page.goto(f"/mcp/servers/{server.pk}/")
    expect(page.locator("li.listed", has_text="get-time").locator(".hint-app")).to_have_text("has an app")

    # a person's call; the operation page hosts the app
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=get-time")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)
    box = page.locator("#mcp-app")
    try:
        expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    except AssertionError:
        raise AssertionError(f"the app did not show; console: {console[-20:]}, frames: {[f.url for f in page.frames]}")
    expect(box.locator(".app-domains")).to_have_text("This app reaches no outside domain.")
    op = Operation.objects.get(pk=op_id)
    shown_time = op.result["structuredContent"]["time"]
    outer = box.locator("iframe.app-frame")
    assert outer.get_attribute("src").startswith(sandboxed + "/mcp/apps/sandbox/?site=")
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#server-time")).to_have_text(shown_time)
    screenshot(page, "mcp-app.png")  # the README's picture of an app on the page (issue 31), under var/
    # the HTML was read by the product from the same server, as an operation of this person
    read = Operation.objects.get(method="resources/read", user=op.user)
    assert read.name == "ui://get-time/mcp-app.html" and read.server_id == server.pk and read.status == "completed"

    # the inner document carries, as an HTTP header, the CSP its resource declared (nothing: the default)
    assert len(documents) == 1
    assert documents[0].all_headers()["content-security-policy"] == \
        app_csp.build(None).header + f"; frame-ancestors {sandboxed} {live.url}"
    # handed over once: a second load of the same one-time URL is refused
    again = page.request.get(documents[0].url)
    assert again.status == 404

    # no cookie of the site reached the sandbox origin
    assert sandbox_requests, "the sandbox origin was never asked"
    assert all("cookie" not in r.all_headers() for r in sandbox_requests)
    # what the host posted to the frame: the tool's input and result, no token, session or round state
    proxy = next(f for f in page.frames if f.url.startswith(sandboxed + "/mcp/apps/sandbox/?"))
    seen = proxy.evaluate("window.__seen")
    methods = [json.loads(m).get("method") for m in seen if m.startswith("{")]
    assert "ui/notifications/sandbox-resource-ready" in methods and "ui/notifications/tool-result" in methods
    secrets_ = [c["value"] for c in context.cookies() if c["name"] in ("sessionid", "csrftoken")]
    assert len(secrets_) == 2
    for message in seen:
        assert not any(s in message for s in secrets_), message
        assert "requestState" not in message and "csrfmiddlewaretoken" not in message

    # the app's own call (its "Get Server Time" button: tools/call to the host) goes through the
    # product (issue 31 item 4): get-time does not say it only reads, so the host's card outside the
    # frame asks the person first; confirmed, it is an operation with initiator app
    calls_before = Operation.objects.filter(method="tools/call").count()
    app.locator("#get-time-btn").click()
    confirm = box.locator(".app-requests .app-request[data-kind=confirm]")
    expect(confirm).to_contain_text("get-time")
    assert Operation.objects.filter(method="tools/call").count() == calls_before  # nothing sent yet
    confirm.get_by_role("button", name="Confirm the call").click()
    expect(confirm).to_have_count(0)
    for _ in range(100):
        by_app = Operation.objects.filter(method="tools/call", initiator="app").first()
        if by_app is not None and by_app.status == "completed":
            break
        page.wait_for_timeout(100)
    assert by_app is not None and by_app.status == "completed" and by_app.user_id == op.user_id
    assert by_app.initiator_detail["app_of"] == op_id and by_app.initiator_detail["confirmation"] == "person"
    expect(app.locator("#server-time")).to_have_text(by_app.result["structuredContent"]["time"])

    # Close: resource-teardown first, then the frame is gone
    page.get_by_role("button", name="Close the app").click()
    expect(box.locator(".app-status")).to_have_text("The app was closed.")
    expect(outer).to_have_count(0)
    to_proxy = [text for url, text in recorded if url.startswith(sandboxed + "/mcp/apps/sandbox/?")]
    assert any('"method":"ui/resource-teardown"' in text for text in to_proxy)
    for text in to_proxy:  # everything the proxy received, over the whole visit
        assert not any(s in text for s in secrets_) and "requestState" not in text, text


def test_sandbox_proxy_refuses_top_level_and_other_embedders(signed_in, basic_app_server, sandboxed, live):
    from mrtrweb.models import McpServer

    page = signed_in("Basic app", basic_app_server, apps_enabled=True)
    server = McpServer.objects.get(name="Basic app")
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=get-time")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    proxy_url = page.locator("#mcp-app").get_attribute("data-proxy-url")
    # the site's own host never serves the proxy
    site_path = proxy_url.replace(sandboxed, live.url)
    assert page.request.get(site_path).status == 404
    # on the sandbox origin nothing of the site answers (SandboxOriginMiddleware)
    assert page.request.get(sandboxed + "/mcp/").status == 404
    assert page.request.get(sandboxed + "/accounts/login/").status == 404
    # a forged site parameter
    assert page.request.get(proxy_url.split("?")[0] + "?site=http://evil.example").status == 400
    # top-level: it refuses to run
    top = page.context.new_page()
    top.goto(proxy_url)
    expect(top.locator("body")).to_have_text("This page runs only inside the site that embeds it.")
    header = top.request.get(proxy_url).headers["content-security-policy"]
    assert header.endswith(f"frame-ancestors {live.url}")
    # another origin embedding it: the browser refuses the frame (frame-ancestors)
    evil = page.context.new_page()
    evil.route("http://evil.example/", lambda route: route.fulfill(
        content_type="text/html", body=f'<iframe id="f" src="{proxy_url}"></iframe>'))
    evil.goto("http://evil.example/")
    expect(evil.locator("#f")).to_have_count(1)
    frame = evil.frame_locator("#f")
    expect(frame.locator("body")).not_to_have_text("This page runs only inside the site that embeds it.")
    child = next(f for f in evil.frames if f != evil.main_frame)
    for _ in range(50):
        if child.url.startswith("chrome-error://"):
            break
        evil.wait_for_timeout(100)
    assert child.url.startswith("chrome-error://"), child.url


def test_the_demo_servers_own_app_renders_and_its_button_calls_through_the_host(signed_in, seeded, sandboxed):
    """The demo server's ``service_status`` (mrtrweb/demo/status_app.py, what ``./dev demo`` shows,
    apps on as the demo seeds them): its app shows the call's result; **Check again** calls the
    app-only, read-only ``refresh_status`` through the product (initiator app, not asked), and the
    app shows that result; the server page does not list ``refresh_status`` as a person's call."""
    from mrtrweb.demo.status_app import APP_URI
    from mrtrweb.models import McpServer, Operation

    page = signed_in("Demo with its app", seeded["mcp"].url, apps_enabled=True)
    server = McpServer.objects.get(name="Demo with its app")
    page.goto(f"/mcp/servers/{server.pk}/")
    expect(page.locator("li.listed", has_text="service_status").locator(".hint-app")).to_have_text("has an app")
    expect(page.locator('[data-tool="refresh_status"]')).to_have_count(0)
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=service_status")
    page.get_by_label("service").fill("payments")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    op = Operation.objects.get(pk=OP_URL.search(page.url).group(1))
    box = page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#service")).to_have_text("Service: payments")
    expect(app.locator("#result")).to_have_text(op.result["content"][0]["text"])
    assert "by service_status" in op.result["content"][0]["text"]
    assert Operation.objects.get(method="resources/read", user=op.user).name == APP_URI
    app.get_by_role("button", name="Check again").click()
    expect(app.locator("#result")).to_contain_text("payments: 3 of 3 replicas healthy", timeout=20_000)
    expect(app.locator("#result")).to_contain_text("by refresh_status")
    by_app = Operation.objects.get(method="tools/call", initiator="app")
    assert by_app.name == "refresh_status" and by_app.status == "completed" and by_app.user_id == op.user_id
    assert by_app.initiator_detail["app_of"] == str(op.pk) and by_app.initiator_detail["confirmation"] == "read_only"
    expect(app.locator("#result")).to_have_text(by_app.result["content"][0]["text"])
    screenshot(page, "demo-app.png")
