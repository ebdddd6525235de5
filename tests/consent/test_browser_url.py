"""URL mode in a real browser: nothing is fetched from the URL before the person clicks it.

A tiny HTTPS server on loopback (stdlib ``http.server`` in a thread, a self-signed certificate made
for the test) counts every TCP connection and every request it gets. A real MCP server (the SDK's
``MCPServer`` over Streamable HTTP on loopback) answers ``tools/call open_local_page`` with a
URL-mode elicitation of that server's URL. The card is shown and left alone for two seconds: no
connection, no request (no prefetch, preconnect or metadata fetch). Then the person clicks the
link: exactly one request, for exactly that URL, without a ``Referer`` header, in a new page that
has no ``window.opener``; then Accept, the review, Send.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestURLParams, InputRequiredResult

from tests.certs import self_signed
from tests.browser import OP_URL, PASSWORDS, TIMEOUT_MS, op_status, expect

pytestmark = [pytest.mark.browser]


class CountingHttpsServer(http.server.ThreadingHTTPServer):
    """Counts TCP connections (before any TLS) and records every request (path and headers)."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.lock = threading.Lock()
        self.connections = 0
        self.requests: list[dict] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        with self.lock:
            self.connections += 1
        sock.settimeout(10)
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def hits(self) -> list[dict]:
        with self.lock:
            return list(self.requests)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        with self.server.lock:
            self.server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}})
        body = b'<!doctype html><html lang="en"><head><link rel="icon" href="data:,"><title>Signed in</title>' \
               b'</head><body><p id="done">signed in</p></body></html>'
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, format, *args) -> None:  # noqa: A002
        pass


@pytest.fixture
def counting_site(tmp_path):
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = CountingHttpsServer(context)
    thread = threading.Thread(target=server.serve_forever, name="counting-site", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _url_mcp(url: str):
    """A real ``MCPServer`` with one tool asking, in URL mode, to open ``url``."""
    from mrtrweb.demo.server import serve_in_thread

    mcp = MCPServer(name="url-counter", version="0.1.0", log_level="WARNING")

    @mcp.tool(structured_output=False)
    async def open_local_page(ctx: Context) -> str | InputRequiredResult:
        """Ask the person to open a page on this machine."""
        response = (ctx.input_responses or {}).get("open")
        if response is None:
            request = ElicitRequest(params=ElicitRequestURLParams(message="Open the local page to sign in.", url=url,
                                                                  elicitation_id="local-1"))
            return InputRequiredResult(input_requests={"open": request}, request_state=json.dumps({"t": "open"}))
        return f"Opened: {getattr(response, 'action', '?')}."

    return serve_in_thread(server=mcp)


def alice_trusting_the_counting_site(app):
    """A page of alice, signed in, in a context that accepts the counting site's own certificate."""
    context = app.browser.new_context(base_url=app.live.url, viewport={"width": 1100, "height": 1400},
                                      ignore_https_errors=True)
    context.set_default_timeout(TIMEOUT_MS)
    app.contexts.append(context)
    page = context.new_page()
    page.goto("/accounts/login/?next=/mcp/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORDS["alice"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("header .who")).to_have_text("Signed in as alice")
    return page


def test_no_request_to_the_url_before_the_click(app, counting_site):
    from mrtrweb.models import McpServer

    url = f"https://localhost:{counting_site.server_address[1]}/connect?provider=local&x=1"
    handle = _url_mcp(url)
    try:
        server = McpServer.objects.create(tenant=app.seeded["servers"]["acme"].tenant, name="URL server",
                                          url=handle.url)
        page = alice_trusting_the_counting_site(app)
        page.goto(f"/mcp/servers/{server.pk}/tools/open_local_page/")
        page.get_by_role("button", name="Call tool").click()
        expect(page).to_have_url(OP_URL)
        op_id = OP_URL.search(page.url).group(1)

        card = page.locator("#operation form.card")
        expect(card).to_be_visible()
        expect(card.locator(".url-full")).to_have_text(url)
        expect(card.locator("mark.host")).to_have_text("localhost")
        link = card.get_by_role("link", name="Open localhost in a new tab")
        expect(link).to_have_attribute("href", url)
        expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open")
        page.wait_for_timeout(2000)  # rendered, live, and left alone
        assert counting_site.connections == 0 and counting_site.hits() == []  # not even a preconnect

        with page.expect_popup() as popup_info:
            link.click()
        popup = popup_info.value
        expect(popup.locator("#done")).to_have_text("signed in")
        assert popup.url == url
        assert popup.evaluate("() => window.opener") is None  # noopener
        hits = counting_site.hits()
        assert [h["path"] for h in hits] == ["/connect?provider=local&x=1"]
        assert "referer" not in hits[0]["headers"]  # noreferrer
        popup.close()
        assert handle.calls[("open_local_page", True)] == 0

        with page.expect_navigation():
            card.get_by_role("button", name="Accept", exact=True).click()
        review = page.locator("#operation form.review")
        expect(review.locator(".review-url")).to_have_text(
            "You confirm that you are done at localhost. The server receives “accept”, with no content.")
        with page.expect_navigation():
            review.get_by_role("button", name="Send", exact=True).click()
        expect(page.locator(".result pre.block")).to_have_text("Opened: accept.")
        assert handle.calls[("open_local_page", True)] == 1
        assert op_status(op_id) == "completed"
        assert len(counting_site.hits()) == 1  # nothing fetched it again
    finally:
        handle.stop()
