"""The operation page says when live updates cannot work, instead of waiting at "Running" in
silence (issue 26, item 5), in Chromium under the site's strict CSP (fixtures from
tests/browser.py):

* its script not served (a 404 HTML page, as a portal that never ran collectstatic answered):
  a server-rendered notice, kept out of sight by app.css for its first seconds and removed by
  operations.js when it runs, shows, naming the script's URL; without app.css either, at once;
* a WebSocket that never opens (as on a WSGI server: ``runserver`` without daphne answers 404 to
  the upgrade): the live notice says live updates are unavailable and what to run.
"""

from __future__ import annotations

import time

import pytest

from mrtrweb.bench.common import free_port
from tests.browser import expect

pytestmark = [pytest.mark.browser]

NOT_FOUND = "<!doctype html><title>Not Found</title><h1>Not Found</h1>"


def _csp_violations(page) -> list[str]:
    found: list[str] = []
    page.on("console", lambda m: found.append(m.text) if "Content Security Policy" in m.text else None)
    return found


def test_a_script_that_was_not_served_is_said(app):  # noqa: F811
    page = app.sign_in("alice")
    violations = _csp_violations(page)
    page.route("**/static/mrtrweb/operations.js", lambda route: route.fulfill(
        status=404, body=NOT_FOUND, content_type="text/html"))
    app.call_tool(page, "deploy", fill={"replicas": "3"}, select={"env": "production"})
    missing = page.locator("#live-script-missing")
    expect(missing).to_be_hidden()  # app.css keeps it out of sight while the script may still come
    expect(missing).to_be_visible(timeout=8_000)
    expect(missing).to_contain_text("this page’s script did not load")
    expect(missing).to_contain_text("/static/mrtrweb/operations.js was not served")
    assert page.locator("#operation").get_attribute("data-ws-state") is None  # no script: no socket
    assert violations == []

    # app.css not served either (nothing static is): the notice shows at once
    page.route("**/static/mrtrweb/app.css", lambda route: route.fulfill(
        status=404, body=NOT_FOUND, content_type="text/html"))
    started = time.monotonic()
    page.reload()
    expect(missing).to_be_visible(timeout=3_000)
    assert time.monotonic() - started < 3.5

    # served again: the script removes the notice before anyone sees it, the socket opens
    page.unroute("**/static/mrtrweb/operations.js")
    page.unroute("**/static/mrtrweb/app.css")
    page.reload()
    expect(page.locator("#operation")).to_have_attribute("data-ws-state", "open")
    assert missing.count() == 0 and violations == []


def _redirect_sockets(page, replacement: str) -> None:
    """The page's WebSockets go to ``replacement`` (a JS replace() argument pair) instead."""
    page.add_init_script(
        "(() => { const Real = window.WebSocket;"
        f" window.WebSocket = function (url, protocols) {{ return new Real(String(url).replace({replacement}), protocols); }};"
        " window.WebSocket.prototype = Real.prototype; })();")


def test_a_websocket_that_never_opens_says_what_to_run(app):  # noqa: F811
    """A socket the server refuses at every handshake (here a path that no route serves: the
    handshake fails, as /ws/mrtrweb/ does on a WSGI server) and one the page's CSP refuses (another
    port: Chromium blocks it silently, the page's open timeout counts it) both say live updates are unavailable and what to run."""
    page = app.sign_in("alice")
    _redirect_sockets(page, "'/ws/mrtrweb/', '/ws/not-served-here/'")
    app.call_tool(page, "deploy", fill={"replicas": "3"}, select={"env": "production"})
    root, notice = page.locator("#operation"), page.locator("#live-notice")
    text = notice.locator(".live-notice-text")
    expect(root).to_have_attribute("data-ws-state", "unavailable", timeout=10_000)
    expect(notice).to_be_visible()
    expect(text).to_contain_text("Live updates are unavailable: the connection to the server could not be opened")
    expect(text).to_contain_text("needs an ASGI server (uvicorn, or daphne’s runserver), not Django’s runserver")
    expect(page.locator("#live-script-missing")).to_have_count(0)  # the script itself did run

    page = app.sign_in("carol")
    violations = _csp_violations(page)
    _redirect_sockets(page, f"/^ws:\\/\\/[^/]+/, 'ws://127.0.0.1:{free_port()}'")
    app.call_tool(page, "deploy", fill={"replicas": "3"}, select={"env": "production"})
    root, text = page.locator("#operation"), page.locator("#live-notice .live-notice-text")
    # Chromium fires no event for a socket its CSP blocks: two 5 s open timeouts
    expect(root).to_have_attribute("data-ws-state", "unavailable", timeout=20_000)
    expect(text).to_contain_text("needs an ASGI server")
    assert any("connect-src" in v for v in violations), violations  # refused by the CSP, not by a server
