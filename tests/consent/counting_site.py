"""A tiny HTTPS site on loopback that counts every connection and request it gets (a self-signed
certificate made for the test), and alice signed in in a browser context that trusts it: for the
URL-mode browser tests. The fixture ``counting_site`` is in ``tests/consent/conftest.py``.
"""

from __future__ import annotations

import http.server
import ssl
import threading

from tests.browser import PASSWORDS, TIMEOUT_MS, expect


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
