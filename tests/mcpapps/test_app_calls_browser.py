"""An MCP App's own requests in Chromium (issue 31 items 4 and 5), with an app server of our own
(tests/apps_server.py) beside another server of the same tenant (tests/honest.py):

* its rendering is an ``app_rendered`` event (tool, HTML digest, CSP digest, resource);
* a read-only app tool is called through the product at once: an operation with initiator
  ``app``, the page's person as its user, the app receives the result;
* a tool that is not read-only waits for the person's Confirm on a host-rendered card outside the
  frame; its ``input_required`` round appears on the host's consent card, the person answers it
  there, the answer goes back once (counted at the server), the app receives only the final result;
* refusals: a model-only tool, another server's tool, a tool beyond the 50 an app may call, over the
  rate, ``resources/read`` of another server's resource, an unsafe link, a download by link,
  ``ui/message`` / ``ui/update-model-context`` / sampling; nothing reaches any server for them;
* a link goes through the URL-mode interstitial (never opened by itself); a download is asked
  first and served as an attachment;
* no message the host posts to the frame holds the session cookie, the CSRF token, a
  ``requestState`` or the answer value (recorded in every frame).

And two registry apps: ``server-budget-allocator`` renders and works; ``server-system-monitor``'s
Start button calls its app-only ``poll-system-stats`` through the product, confirmed by the person.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tests import apps_server, honest
from tests.browser import OP_URL, expect, screenshot
from tests.mcpapps.registry_apps import RECORDER, node_app_server

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

#: the answer the person gives to the app call's round: it must never reach the frame
SECRET_ANSWER = "owl-7319-quartz"


@pytest.fixture
def servers():
    own, other = apps_server.serve(), honest.serve()
    try:
        yield own, other
    finally:
        own.stop()
        other.stop()


def _reply(app, key: str) -> dict:
    out = app.locator(f"#o-{key}")
    expect(out).not_to_have_text("", timeout=20_000)
    return json.loads(out.text_content())


def _record_pushes_and_reads(page) -> tuple[list[str], list[str]]:
    """The operation ids of every ``operation`` push the page's sockets receive, and the URL of
    every request the page makes for an app call's state (``…/app/calls/<id>/``)."""
    pushed: list[str] = []
    asked: list[str] = []

    def on_ws(ws) -> None:
        def on_frame(payload) -> None:
            try:
                msg = json.loads(payload)
            except (TypeError, ValueError):
                return
            if isinstance(msg, dict) and msg.get("type") == "operation":
                pushed.append(str(msg.get("id")))
        ws.on("framereceived", on_frame)

    page.on("websocket", on_ws)
    page.on("request", lambda r: asked.append(r.url) if "/app/calls/" in r.url else None)
    return pushed, asked


def test_app_calls_go_through_the_product(signed_in, servers, sandboxed, live, settings):  # noqa: F811
    from mrtrweb.audit.events import keyed_digest
    from mrtrweb.mcpapps import csp as app_csp
    from mrtrweb.models import AuditEvent, McpServer, Operation

    settings.MRTRWEB = {**settings.MRTRWEB, "APPS_CALLS_PER_SECOND": 2}
    own, other = servers
    page = signed_in("Panel app", own.url, apps_enabled=True)
    server = McpServer.objects.get(name="Panel app")
    McpServer.objects.create(tenant=server.tenant, name="Other server", url=other.url)
    context = page.context
    recorded = []  # (frame url, message) of every message any frame received
    context.expose_binding("__record", lambda source, text: recorded.append((source["frame"].url, text)))
    context.add_init_script(RECORDER)
    pushed, asked = _record_pushes_and_reads(page)

    page.goto(f"/mcp/servers/{server.pk}/tools/?name=open_panel")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    host_id = OP_URL.search(page.url).group(1)
    box = page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#ready")).to_have_text("ready")
    alice = Operation.objects.get(pk=host_id).user

    # item 5: the rendering is an event of the tenant's chain, on the host operation
    rendered = AuditEvent.objects.get(operation_id=host_id, event="app_rendered")
    html = apps_server.APP_HTML
    assert rendered.display_digest == "sha256:" + hashlib.sha256(html.encode()).hexdigest()
    assert rendered.config_digest == "sha256:" + hashlib.sha256(app_csp.build(None).header.encode()).hexdigest()
    assert rendered.actions["resource"] == apps_server.APP_URI and rendered.name == "open_panel"
    assert rendered.server_id == str(server.pk)

    # a read-only app tool: through the product at once, initiator app, the person as its user
    app.locator("#b-lookup").click()
    assert _reply(app, "lookup")["result"]["content"][0]["text"] == "looked up x"
    lookup = Operation.objects.get(method="tools/call", name="lookup")
    assert lookup.initiator == "app" and lookup.user_id == alice.pk and lookup.server_id == server.pk
    assert lookup.initiator_detail == {"app_of": host_id, "tool": "open_panel", "app_uri": apps_server.APP_URI,
                                       "app_digest": rendered.display_digest, "confirmation": "read_only"}
    events = AuditEvent.objects.filter(operation_id=lookup.pk)
    assert events.filter(event="completed").exists()
    assert {e.initiator for e in events} == {"app"} and all(e.initiator_detail == lookup.initiator_detail for e in events)

    # a tool that is not read-only: the host's card asks first (outside the frame); nothing sent yet
    app.locator("#b-transfer").click()
    confirm = box.locator(".app-requests .app-request[data-kind=confirm]")
    expect(confirm).to_contain_text("transfer")
    expect(confirm.locator(".app-arguments")).to_contain_text('"amount": 5')
    assert own.log.counts()[("transfer", False)] == 0
    screenshot(page, "mcp-app-confirm.png")  # the host's card outside the frame (under var/)
    confirm.get_by_role("button", name="Confirm the call").click()
    # its round appears on the host's consent card; the person answers it there
    card = box.locator(".app-requests form.card")
    expect(card).to_be_visible(timeout=20_000)
    expect(card).to_contain_text("The transfer needs your code word")
    expect(box.locator(".app-round-panel p.initiator")).to_have_text(
        "Made by the app of open_panel on your page. You confirmed the call.")
    expect(box.locator(".app-round-heading")).to_have_text(
        "The app's call asks for your input. Answer it here; the app sees only the call's final result.")
    # while the person reads the card nothing changes, and the page asks nothing (it waits for a push)
    reads_before = len(asked)
    page.wait_for_timeout(2000)
    assert len(asked) == reads_before, asked[reads_before:]
    card.get_by_label("Code word").fill(SECRET_ANSWER)
    screenshot(page, "mcp-app-round.png")  # the app call's round on the host's consent card
    card.get_by_role("button", name="Accept", exact=True).click()
    review = box.locator(".app-requests form.review")
    expect(review).to_be_visible()
    review.get_by_role("button", name="Send", exact=True).click()
    assert _reply(app, "transfer")["result"]["content"][0]["text"] == "Transfer done."
    expect(box.locator(".app-requests .app-request-holder")).to_have_count(0)
    counts = own.log.counts()
    assert counts[("transfer", False)] == 1 and counts[("transfer", True)] == 1  # the answer went back once
    transfer = Operation.objects.get(method="tools/call", name="transfer")
    assert transfer.initiator == "app" and transfer.status == "completed" and transfer.rounds == 1
    assert transfer.initiator_detail["confirmation"] == "person"
    # the page asked for each call's state once at first, then only after a push about it (no polling)
    assert page.locator("#operation").get_attribute("data-ws-state") == "open"
    for call in (lookup, transfer):
        reads = [u for u in asked if f"/app/calls/{call.pk}/" in u]
        assert 1 <= len(reads) <= pushed.count(str(call.pk)) + 1, (call.name, len(reads), pushed.count(str(call.pk)))
    assert pushed.count(str(transfer.pk)) >= 2  # its round and its end, at least
    assert transfer.initiator_detail["confirmed_by"] == keyed_digest(f"user:{alice.pk}")
    assert AuditEvent.objects.filter(operation_id=transfer.pk, event="submitted", initiator="app").count() == 1

    # refusals: nothing reaches any server for them
    before = (len(own.log.tool_calls()), len(other.log.records()))
    for key, reason in (("admin", "not_for_apps"), ("other", "not_listed"), ("filler_last", "too_many_tools"),
                        ("link_download", "bad_download"), ("bad_link", "unsafe_url")):
        app.locator(f"#b-{key}").click()
        error = _reply(app, key)["error"]
        assert error["code"] == -32001 and error["data"]["reason"] == reason, (key, error)
        page.wait_for_timeout(600)  # under the rate of 2 per second
    for key, method in (("message", "ui/message"), ("context", "ui/update-model-context"),
                        ("sampling", "sampling/createMessage")):
        app.locator(f"#b-{key}").click()
        error = _reply(app, key)["error"]
        assert error["code"] == -32601 and error["message"].startswith(method + ": not offered"), error
    assert (len(own.log.tool_calls()), len(other.log.records())) == before
    # the first filler is within the 50 an app may call
    app.locator("#b-filler_first").click()
    assert _reply(app, "filler_first")["result"]["content"][0]["text"] == "filler_00 ran"
    # resources/read: from the same server only; another server's resource is asked of this one
    page.wait_for_timeout(600)
    app.locator("#b-note").click()
    assert _reply(app, "note")["result"]["contents"][0]["text"] == "a note of the same server"
    page.wait_for_timeout(600)
    app.locator("#b-other_note").click()
    assert "error" in _reply(app, "other_note")
    assert [r.method for r in other.log.records()] == []  # the other server was never asked
    read = Operation.objects.get(method="resources/read", name="note://other")
    assert read.server_id == server.pk and read.initiator == "app"
    # over the rate: twelve at once, at most 2 a second
    page.wait_for_timeout(1100)
    app.locator("#b-burst").click()
    expect(app.locator("#o-burst")).not_to_have_text("", timeout=30_000)
    burst = json.loads(app.locator("#o-burst").text_content())
    limited = [r for r in burst if "error" in r and r["error"]["data"]["reason"] == "rate_limited"]
    assert len(burst) == 12 and len(limited) >= 6, burst

    # a link: the URL-mode interstitial, opened only on the person's click
    pages_before = len(context.pages)
    page.wait_for_timeout(1100)
    app.locator("#b-link").click()
    assert _reply(app, "link") == {"result": {}}
    link = box.locator(".app-request[data-kind=link]")
    expect(link.locator("a.open-url")).to_have_attribute("href", "https://example.com/docs?x=1")
    expect(link.locator("a.open-url")).to_have_attribute("rel", "noopener noreferrer")
    expect(link.locator("mark.host")).to_have_text("example.com")
    assert len(context.pages) == pages_before  # nothing opened by itself
    # a download: asked first, an attachment on the person's click
    app.locator("#b-download").click()
    assert _reply(app, "download") == {"result": {}}
    offered = box.locator(".app-request[data-kind=download] a.app-download")
    expect(offered).to_have_text("report.txt")
    with page.expect_download() as downloaded:
        offered.click()
    assert downloaded.value.suggested_filename == "report.txt"
    assert open(downloaded.value.path(), "rb").read() == b"report body"
    assert page.request.get(offered.get_attribute("href")).status == 404  # once

    # nothing the host posted to the frame holds the cookie, the CSRF token, a requestState or the answer
    secrets_ = [c["value"] for c in context.cookies() if c["name"] in ("sessionid", "csrftoken")]
    assert len(secrets_) == 2
    csrf_in_page = box.get_attribute("data-csrf")
    to_frames = [text for url, text in recorded if url.startswith(sandboxed)]
    assert any("Transfer done." in text for text in to_frames)
    for text in to_frames:
        assert not any(s in text for s in secrets_ + [csrf_in_page]), text
        assert "requestState" not in text and SECRET_ANSWER not in text and "t-1" not in text, text


def test_without_the_socket_the_page_asks_slowly_and_the_app_still_gets_its_result(signed_in, servers, sandboxed):  # noqa: F811
    """No WebSocket on the page (the constructor refused, as a CSP or a WSGI server would): the host
    reads an app call's state on its fallback poll, and the app gets its result."""
    own, _other = servers
    page = signed_in("Panel app", own.url, apps_enabled=True)
    page.context.add_init_script("window.WebSocket = function () { throw new Error('no socket here'); };")
    from mrtrweb.models import McpServer

    server = McpServer.objects.get(name="Panel app")
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=open_panel")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    expect(page.locator("#mcp-app .app-status")).to_have_text("The app shows this result.", timeout=30_000)
    assert page.locator("#operation").get_attribute("data-ws-state") != "open"
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#ready")).to_have_text("ready")
    app.locator("#b-lookup").click()
    assert _reply(app, "lookup")["result"]["content"][0]["text"] == "looked up x"


# -- a richer registry example: @modelcontextprotocol/server-budget-allocator -----------------------
BUDGET_SERVER = "@modelcontextprotocol/server-budget-allocator@2.0.3"


@pytest.fixture(scope="module")
def budget_app_server():
    yield from node_app_server("apps-budget", BUDGET_SERVER)


def test_the_budget_allocator_renders_and_its_controls_work(signed_in, budget_app_server, sandboxed, live):  # noqa: F811
    """The richer registry app: rendered from the product's read (audited), its tool result drives
    its sliders, and its controls (the budget presets) work inside the frame; they call nothing, so
    no operation is made by them (the app's own calls are shown with our app server above)."""
    from mrtrweb.models import AuditEvent, McpServer, Operation

    page = signed_in("Budget app", budget_app_server, apps_enabled=True)
    server = McpServer.objects.get(name="Budget app")
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=get-budget-data")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    host_id = OP_URL.search(page.url).group(1)
    box = page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    rendered = AuditEvent.objects.get(operation_id=host_id, event="app_rendered")
    assert rendered.actions["resource"] == "ui://budget-allocator/mcp-app.html" and rendered.name == "get-budget-data"
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#sliders-container input[type=range]")).to_have_count(5)  # the result's five categories
    status = app.locator("#status-bar")
    expect(status).not_to_have_text("")
    ops_before = Operation.objects.count()
    selector = app.locator("#budget-selector")
    before, shown_before = selector.input_value(), status.text_content()
    options = selector.locator("option").evaluate_all("(os) => os.map((o) => o.value)")
    other = next(v for v in options if v != before)
    selector.select_option(other)
    expect(selector).to_have_value(other)
    expect(status).not_to_have_text(shown_before)  # the app recomputed its allocation for the new budget
    assert Operation.objects.count() == ops_before


# -- a registry example whose control calls a tool: @modelcontextprotocol/server-system-monitor ------
SYSMON_SERVER = "@modelcontextprotocol/server-system-monitor@2.0.3"


@pytest.fixture(scope="module")
def sysmon_app_server():
    yield from node_app_server("apps-sysmon", SYSMON_SERVER)


def test_the_system_monitors_start_button_calls_its_tool_through_the_product(signed_in, sysmon_app_server,
                                                                             sandboxed, live):  # noqa: F811
    """The system monitor's Start button polls its app-only ``poll-system-stats`` (not read-only):
    each poll waits for the person's Confirm on the host's card, runs as an operation with
    initiator app, and its stats show in the app."""
    from mrtrweb.models import McpServer, Operation

    page = signed_in("System monitor", sysmon_app_server, apps_enabled=True)
    server = McpServer.objects.get(name="System monitor")
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=get-system-info")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    host_id = OP_URL.search(page.url).group(1)
    box = page.locator("#mcp-app")
    expect(box.locator(".app-status")).to_have_text("The app shows this result.", timeout=30_000)
    app = page.frame_locator("#mcp-app iframe.app-frame").frame_locator("iframe")
    expect(app.locator("#info-hostname")).not_to_have_text("")  # from the person's call's result
    assert not Operation.objects.filter(name="poll-system-stats").exists()
    app.locator("#poll-toggle-btn").click()  # Start
    confirm = box.locator(".app-requests .app-request[data-kind=confirm]").first
    expect(confirm).to_contain_text("poll-system-stats")
    assert not Operation.objects.filter(name="poll-system-stats").exists()  # nothing sent before Confirm
    confirm.get_by_role("button", name="Confirm the call").click()
    expect(app.locator("#memory-percent")).to_have_text(re.compile(r"^\d+(\.\d+)?%$"), timeout=20_000)
    polled = Operation.objects.filter(name="poll-system-stats", status="completed").first()
    assert polled is not None and polled.initiator == "app" and polled.server_id == server.pk
    assert polled.initiator_detail["app_of"] == host_id and polled.initiator_detail["confirmation"] == "person"
    app.locator("#poll-toggle-btn").click()  # Stop polling


# -- a registry app too large to show: @modelcontextprotocol/server-pdf -----------------------------
PDF_SERVER = "@modelcontextprotocol/server-pdf@2.0.3"


@pytest.fixture(scope="module")
def pdf_app_server():
    yield from node_app_server("apps-pdf", PDF_SERVER)


def test_the_pdf_viewer_is_refused_as_too_large_with_a_clear_message(signed_in, pdf_app_server, sandboxed, live):  # noqa: F811
    """server-pdf's viewer is 4,305,806 bytes of HTML (one 4.3 MB SSE event): read whole (the
    response bound is 8 MiB), stored truncated at MAX_STORED_RESULT_BYTES, so refused as
    ``too_large``: the person reads why (its size and the limit), nothing is handed to the sandbox.
    (Offline its display_pdf answers "fetch failed"; the app is still asked for, as for any result.)"""
    from mrtrweb.models import McpServer, Operation

    page = signed_in("PDF", pdf_app_server, apps_enabled=True)
    server = McpServer.objects.get(name="PDF")
    documents = []
    page.context.on("request", lambda r: documents.append(r.url) if "/apps/sandbox/doc/" in r.url else None)
    page.goto(f"/mcp/servers/{server.pk}/tools/?name=display_pdf")
    page.get_by_role("button", name="Call tool").click()
    page.wait_for_url(OP_URL)
    expect(page.locator("#mcp-app .app-status")).to_have_text(
        "This app is too large to show here (4.3 MB of HTML; this site shows apps of at most 1 MB). "
        "The result above is what the server answered.", timeout=30_000)
    read = Operation.objects.get(method="resources/read", name="ui://pdf-viewer/mcp-app.html")
    assert read.status == "completed" and read.result["mrtrweb_truncated"]["original_bytes"] > 4_300_000
    assert documents == [] and page.locator("#mcp-app iframe").count() == 0
