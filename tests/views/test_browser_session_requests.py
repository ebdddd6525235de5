"""Session-level server requests in a real browser (issue 15 item 2): the reference everything
server (npm 2026.8.31, :mod:`tests.thirdparty`) asks ``roots/list`` 350 ms after ``initialized``,
while the person's long call runs. With roots allowed, no roots card appears on that call: the
roots go out at session level and the call completes. A roots request on the call's own stream
(our SDK server, :mod:`tests.session_server`) still shows its card.

Debian Chromium driven by Playwright against the whole ASGI app under uvicorn; the fixtures and
page helpers are those of ``tests/browser.py`` and ``tests/thirdparty_pages.py``.
"""

from __future__ import annotations

import pytest

from tests.session_server import serve_session_server
from tests.browser import expect, op_status
from tests.thirdparty_pages import ROOTS, call_tool, card, results
from tests.thirdparty import everything_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser]

EVERYTHING = "Everything"


@pytest.fixture(scope="module")
def session_server():
    server = serve_session_server()
    yield server
    server.handle.stop()


def _rounds(op_id: str) -> int:
    """The operation's rounds, checked against its audit trail (a round is a ``received`` event)."""
    from mrtrweb.models import AuditEvent, Operation

    rounds = Operation.objects.get(pk=op_id).rounds
    assert AuditEvent.objects.filter(operation_id=op_id, event="received").count() == rounds
    return rounds


def test_everything_long_call_with_roots_allowed_shows_no_roots_card(signed_in, everything_server):  # noqa: F811
    page = signed_in(EVERYTHING, everything_server.url, allow_roots=True, roots=ROOTS)
    op_id = call_tool(page, EVERYTHING, "trigger-long-running-operation", {"duration": "2", "steps": "2"})
    expect(page.locator("#operation")).to_contain_text("running")  # the call is in flight, past the 350 ms
    expect(results(page).first).to_contain_text("Long running operation completed", timeout=20_000)
    assert card(page).count() == 0 and page.locator("fieldset[data-kind='roots']").count() == 0
    assert (op_status(op_id), _rounds(op_id)) == ("completed", 0)


def test_roots_on_the_calls_stream_still_show_their_card(signed_in, session_server):
    session_server.clear()
    page = signed_in("Session requests", session_server.url, allow_roots=True, roots=ROOTS)
    op_id = call_tool(page, "Session requests", "roots_on_the_call", {})
    request = card(page).locator("fieldset[data-kind='roots']")
    expect(request.locator(".root-uri")).to_have_text(["file:///srv/project"])
    with page.expect_navigation():
        card(page).get_by_role("button", name="Accept", exact=True).click()
    with page.expect_navigation():
        page.locator("#operation form.review").get_by_role("button", name="Send", exact=True).click()
    expect(results(page)).to_have_text('roots: [{"uri": "file:///srv/project", "name": "project"}]')
    assert (op_status(op_id), _rounds(op_id)) == ("completed", 1)
