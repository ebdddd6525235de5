"""In Chromium: a page served from another port of the same host cannot read the person's pushes
(issue 12, item 4). Cookies do not depend on the port, so that page's ``new WebSocket(...)`` to the
app carries the person's session; only the full-origin check (scheme, host, port) refuses it.
And when a person's access ends while their card is open, the page leaves it (item 3)."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from tests.browser import OP_URL, expect

pytestmark = [pytest.mark.browser]

#: the attacker's page: opens the app's WebSocket with the person's cookies and records what it gets
EVIL_PAGE = """<!doctype html><title>elsewhere</title><script>
window.__evil = {open: false, closed: false, messages: []};
var ws = new WebSocket("ws://127.0.0.1:%(port)d/ws/mrtrweb/");
ws.onopen = function () { window.__evil.open = true; };
ws.onmessage = function (ev) { window.__evil.messages.push(String(ev.data)); };
ws.onclose = function () { window.__evil.closed = true; };
</script>"""

#: the same, run in the app's own page: the control that shows the harness can open the socket
PROBE = """(port) => new Promise((resolve) => {
  var ws = new WebSocket("ws://127.0.0.1:" + port + "/ws/mrtrweb/");
  ws.onopen = function () { ws.close(); resolve("open"); };
  ws.onclose = function () { resolve("closed"); };
})"""


class _ElsewhereServer:
    """A tiny HTTP server on another 127.0.0.1 port serving :data:`EVIL_PAGE` for ``app_port``."""

    def __init__(self, app_port: int) -> None:
        body = (EVIL_PAGE % {"port": app_port}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 -- http.server's API
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def elsewhere(live):  # noqa: F811
    server = _ElsewhereServer(live.port)
    yield server
    server.stop()


def test_a_page_on_another_port_reads_no_push(app, elsewhere):  # noqa: F811
    page = app.sign_in("alice")
    assert page.evaluate(PROBE, app.live.port) == "open"  # the app's own origin may open it
    evil = page.context.new_page()  # same browser context: alice's cookies for 127.0.0.1
    evil.goto(elsewhere.url)
    evil.wait_for_function("() => window.__evil.open || window.__evil.closed")
    # pushes to alice: a card arrives on her own page by WebSocket
    op_id = app.call_tool(page, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    expect(app.card(page)).to_be_visible()
    page.wait_for_timeout(500)
    state = evil.evaluate("() => window.__evil")
    assert state == {"open": False, "closed": True, "messages": []}, state
    assert op_id and not any(op_id in m for m in state["messages"])


def test_a_page_left_open_after_access_ended_leaves_the_card(app):  # noqa: F811
    """An admin disables the server in the Django admin while carol's card is open: her socket is
    closed, her page reloads to 404, and no answer ever reaches the server."""
    from mrtrweb.models import AuditEvent, Operation

    carol = app.sign_in("carol")
    op_id = app.call_tool(carol, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    expect(app.card(carol)).to_be_visible()
    app.wait_live(carol)
    server_id = Operation.objects.get(pk=op_id).server_id
    admin = app.new_context().new_page()
    admin.goto("/admin/login/?next=/admin/")
    admin.get_by_label("Username").fill("admin")
    admin.get_by_label("Password").fill("admin-demo-pw")
    admin.get_by_role("button", name="Log in").click()
    admin.goto(f"/admin/mrtrweb/mcpserver/{server_id}/change/")
    admin.get_by_label("Enabled").uncheck()
    admin.get_by_role("button", name="Save", exact=True).click()
    expect(admin.locator(".messagelist")).to_be_visible()
    # carol's page reloads by itself and shows that the operation is gone for her
    expect(carol.locator("#operation")).to_have_count(0)
    assert "Not Found" in carol.content() or "404" in carol.content()
    deadline = time.monotonic() + 5
    while not AuditEvent.objects.filter(operation_id=op_id, event="denied").exists():
        assert time.monotonic() < deadline, "no denied event"
        time.sleep(0.05)
    row = AuditEvent.objects.get(operation_id=op_id, event="denied")
    assert row.reason == "access_revoked: server_disabled"
    assert Operation.objects.get(pk=op_id).status == Operation.Status.DENIED
    assert app.mcp.calls[("deploy", True)] == 0


def test_a_tab_left_open_after_signing_out_elsewhere_leaves_the_card(app):  # noqa: F811
    """carol signs out in another tab of the same browser: the first tab's socket is closed (4401),
    the page reloads to the sign-in page and shows no card."""
    carol = app.sign_in("carol")
    app.call_tool(carol, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    expect(app.card(carol)).to_be_visible()
    app.wait_live(carol)
    other = carol.context.new_page()
    other.goto("/mcp/")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url("**/accounts/login/**")
    # the first tab reloads by itself (no click) and lands on the sign-in page
    carol.wait_for_url("**/accounts/login/**")
    expect(carol.locator("#operation")).to_have_count(0)
    expect(carol.get_by_label("Username")).to_be_visible()
