"""More of a person's paths in a real browser (Playwright + Debian Chromium against the live ASGI
app, fixtures from ``tests/browser.py``), each against a real MCP server on loopback:

* a long call shows the server's progress as a progress bar, and Stop cancels it: the MCP server
  sees the call's request abandoned by the client and the operation ends, nothing more sent;
* a prompt (``prompts/get release_notes``) and a resource template (``resources/read
  demo://reports/{team}``) started from the server page, their ``input_required`` round answered
  through the same card, review and Send, through to the result shown;
* review and change: Accept shows the review, Change brings the card back pre-filled, the changed
  answer is reviewed and sent once, server text and answers are shown as text.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest

from tests.browser import OP_URL, screenshot, op_status, expect

pytestmark = [pytest.mark.browser]


class MethodLog:
    """ASGI middleware recording every JSON-RPC message POSTed to the app, notifications included
    (the demo's own :class:`CallLog` records requests only), and the ids of requests whose client
    went away before their response was complete (``abandoned``)."""

    def __init__(self, app) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.messages: list[dict[str, Any]] = []
        self.abandoned: list[Any] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        with self.lock:
            for item in payload if isinstance(payload, list) else [payload]:
                if isinstance(item, dict) and isinstance(item.get("method"), str):
                    self.messages.append(item)
        ids = [item.get("id") for item in (payload if isinstance(payload, list) else [payload])
               if isinstance(item, dict) and "id" in item and "method" in item]
        sent = False
        complete = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            message = await receive()
            if message.get("type") == "http.disconnect" and not complete:
                with self.lock:
                    self.abandoned.extend(ids)
            return message

        async def tracking_send(message):
            nonlocal complete
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        await self.app(scope, replay, tracking_send)


@pytest.fixture(scope="module")
def logged_mcp():
    """The real demo MCP server behind a :class:`MethodLog`."""
    from mrtrweb.demo.server import build_demo_app, serve_asgi_in_thread

    methods = MethodLog(build_demo_app())
    handle = serve_asgi_in_thread(methods)
    yield handle, methods
    handle.stop()


def test_progress_bar_and_stop_on_a_long_call(app, logged_mcp):
    from mrtrweb.models import McpServer

    handle, methods = logged_mcp
    McpServer.objects.filter(pk=app.seeded["servers"]["acme"].pk).update(url=handle.url)
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "long_task", fill={"seconds": "30"})
    app.wait_live(page)
    bar = page.locator("progress.call-progress")
    expect(bar).to_be_visible()  # hidden until the first progress notification
    expect(bar).to_have_attribute("max", "30")
    page.wait_for_function("() => document.querySelector('progress.call-progress').value >= 2")
    expect(page.locator(".progress-message")).to_have_text(re.compile(r"^\d+ of 30 s$"))
    expect(page.locator(".progress-numbers")).to_have_text(re.compile(r"^\d+ / 30$"))  # issue 28: the numbers too
    expect(page.get_by_text("Waiting for the server…")).to_be_visible()
    screenshot(page, "progress.png")
    assert op_status(op_id) == "running"
    calls = [m for m in methods.messages if m["method"] == "tools/call" and m["params"]["name"] == "long_task"]
    assert len(calls) == 1 and methods.abandoned == []

    with page.expect_navigation():
        page.locator(".running").get_by_role("button", name="Stop").click()
    expect(page.locator(".panel")).to_have_attribute("data-status", "denied")  # pushed when the worker stops
    expect(page.locator(".denied-reason")).to_have_text(
        "You stopped this operation; the call was cancelled at the server.")
    expect(page.locator("progress.call-progress")).to_have_count(0)
    assert op_status(op_id) == "denied"
    # the server sees that request abandoned: on 2026-07-28 Streamable HTTP the client closes the
    # call's POST (a stream transport would carry notifications/cancelled instead)
    for _ in range(50):
        if calls[0]["id"] in methods.abandoned:
            break
        page.wait_for_timeout(100)
    assert methods.abandoned == [calls[0]["id"]]
    page.wait_for_timeout(1500)
    assert [m["method"] for m in methods.messages].count("tools/call") == 1  # nothing more was sent
    expect(page.locator(".result")).to_have_count(0)


def _open_server(page) -> None:
    page.goto("/mcp/")
    page.get_by_role("link", name="Demo server").click()
    expect(page.get_by_role("heading", name="Demo server")).to_be_visible()


def test_prompt_with_a_round_through_the_card(app):
    page = app.sign_in("alice")
    _open_server(page)
    page.locator("a[data-prompt='release_notes']").click()
    expect(page.get_by_role("heading", name="Get prompt release_notes")).to_be_visible()
    page.get_by_label("version").fill("2.0")
    page.get_by_role("button", name="Get prompt").click()
    expect(page).to_have_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)

    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".op-method")).to_have_text("prompts/get")
    expect(card.locator(".op-name")).to_have_text("release_notes")
    expect(card.locator(".server-message")).to_have_text("Who will read the notes for 2.0?")
    expect(card.get_by_label("Audience")).to_have_value("developers")  # the default, pre-filled
    card.get_by_label("Audience").select_option("customers")
    app.submit(page, "Accept")
    review = app.expect_review(page)
    expect(review.locator(".review-answers dd .review-value")).to_have_text(["customers"])
    expect(review.locator(".effect")).to_contain_text("as the retry of prompts/get release_notes")
    assert [r for r in app.mcp.log.records("prompts/get") if r.is_retry] == []
    app.submit(page, "Send")

    expect(page.locator(".result pre.block")).to_have_text("Write release notes for version 2.0 for customers.")
    expect(page.locator(".status")).to_contain_text("Completed")
    retries = [r for r in app.mcp.log.records("prompts/get") if r.is_retry]
    assert len(retries) == 1 and retries[0].params["inputResponses"]["audience"]["content"] == {"audience": "customers"}
    assert op_status(op_id) == "completed"


def test_resource_template_with_a_round_through_the_card(app):
    page = app.sign_in("alice")
    _open_server(page)
    page.locator("a[data-template='demo://reports/{team}']").click()
    expect(page.get_by_role("heading", name="Read resource demo://reports/{team}")).to_be_visible()
    page.get_by_label("team").fill("core ops")
    page.get_by_role("button", name="Read resource").click()
    expect(page).to_have_url(OP_URL)
    op_id = OP_URL.search(page.url).group(1)

    card = app.card(page)
    expect(card).to_be_visible()
    expect(card.locator(".op-method")).to_have_text("resources/read")
    expect(card.locator(".op-name")).to_have_text("demo://reports/core%20ops")
    expect(card.locator(".server-message")).to_have_text("Report for team core ops: since when?")
    since = card.get_by_label("Since")
    expect(since).to_have_attribute("type", "date")
    since.fill("2026-01-05")
    app.accept(page)

    expect(page.locator(".result pre.block")).to_have_text("Report for team core ops since 2026-01-05: 12 changes, "
                                                           "3 releases.")
    expect(page.locator(".status")).to_contain_text("Completed")
    retries = [r for r in app.mcp.log.records("resources/read") if r.is_retry]
    assert len(retries) == 1 and retries[0].params["inputResponses"]["period"]["content"] == {"since": "2026-01-05"}
    assert op_status(op_id) == "completed"


def test_review_and_change(app):
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "deploy", fill={"replicas": "2"}, select={"env": "staging"})
    card = app.card(page)
    expect(card).to_be_visible()
    card.get_by_label("Confirm deployment").check()
    card.get_by_label("Change ticket").fill("<b>CHG</b>-1")
    card.get_by_label("Region").select_option(label="Europe (Ireland)")
    card.get_by_label("pager", exact=True).check()
    app.submit(page, "Accept")

    review = app.expect_review(page)
    app.wait_live(page)  # the page's catch-up refresh after its WebSocket opened does not hide the review
    expect(review).to_be_visible()
    ticket = review.locator("dd[data-name='ticket'] .review-value")
    expect(ticket).to_have_text("<b>CHG</b>-1")  # as text
    assert review.locator("b").count() == 0
    expect(review.locator("dd[data-name='email']")).to_have_text("(left empty: not sent)")
    expect(review.locator("dd[data-name='window']")).to_have_text("2")  # the pre-filled default, as answered
    expect(review.locator("dd[data-name='region']")).to_have_text("Europe (Ireland)")  # the option's title
    page.wait_for_timeout(300)
    assert app.mcp.calls[("deploy", True)] == 0 and op_status(op_id) == "awaiting_input"

    with page.expect_navigation():
        review.get_by_role("button", name="Change", exact=True).click()
    card = app.card(page)
    expect(page.locator("#operation form.review")).to_have_count(0)
    expect(card.get_by_role("button", name="Accept", exact=True)).to_be_visible()
    page.wait_for_function("() => document.activeElement === document.querySelector('#operation form.card')")
    expect(card.get_by_label("Change ticket")).to_have_value("<b>CHG</b>-1")  # pre-filled with her answers
    expect(card.get_by_label("Confirm deployment")).to_be_checked()
    expect(card.get_by_label("Region")).to_have_value("eu-west-1")
    expect(card.get_by_label("pager", exact=True)).to_be_checked()
    expect(card.get_by_label("email", exact=True)).not_to_be_checked()
    expect(card.locator(".field-error")).to_have_count(0)
    assert app.mcp.calls[("deploy", True)] == 0

    card.get_by_label("Change ticket").fill("CHG-2")
    card.get_by_label("Contact email").fill("ops@example.test")
    app.submit(page, "Accept")
    review = app.expect_review(page)
    expect(ticket).to_have_text("CHG-2")
    expect(review.locator("dd[data-name='email'] .review-value")).to_have_text("ops@example.test")
    app.submit(page, "Send")

    expect(page.locator(".result pre.block")).to_have_text(
        "Deployed 2 replica(s) to staging (ticket CHG-2; region eu-west-1; window 2h; contact ops@example.test; "
        "notify pager).")
    assert app.mcp.calls[("deploy", True)] == 1
    assert op_status(op_id) == "completed"


def test_a_card_of_two_requests(app):
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "onboard_team", fill={"team": "core"})
    card = app.card(page)
    expect(card).to_be_visible()
    requests = card.locator("fieldset.input-request")
    expect(requests).to_have_count(2)
    expect(requests.nth(0)).to_have_attribute("data-kind", "form")
    expect(requests.nth(1)).to_have_attribute("data-kind", "url")
    expect(card.locator(".server-message")).to_have_text(["Describe team core.", "Enrol team core in single sign-on."])
    budget = card.get_by_label("Monthly budget (EUR)")
    expect(budget).to_have_attribute("type", "number")
    expect(budget).to_have_value("250.5")  # the default, pre-filled
    expect(card.get_by_label("Team page")).to_have_attribute("type", "url")
    expect(card.get_by_label("Team size")).to_contain_text("6 to 20 people")  # enumNames as option labels
    expect(card.locator("mark.host")).to_have_text("sso.example.test")
    screenshot(page, "multi-card.png")

    # Both answers are checked by the gate's rules before anything is reviewed.
    card.get_by_label("Display name").fill("Core/ops")  # outside the pattern
    for label in ("Team chat", "Mailing list", "Wiki"):  # more than maxItems
        card.get_by_label(label, exact=True).check()
    app.submit(page, "Accept")
    expect(page.locator(".panel > .error")).to_have_text("Some answers need attention.")
    expect(page.locator(".field.invalid")).to_have_count(2)
    expect(page.locator("#operation form.review")).to_have_count(0)
    assert app.mcp.calls[("onboard_team", True)] == 0

    card.get_by_label("Display name").fill("Core ops")
    card.get_by_label("Mailing list", exact=True).uncheck()
    budget.fill("99.5")
    card.get_by_label("Team size").select_option(label="6 to 20 people")
    app.submit(page, "Accept")
    review = app.expect_review(page)
    expect(review.locator("section.review-request")).to_have_count(2)
    expect(review.locator("dd[data-name='budget'] .review-value")).to_have_text("99.5")
    expect(review.locator("dd[data-name='channels'] li")).to_have_text(["Team chat", "Wiki"])
    expect(review.locator(".review-url")).to_contain_text("You confirm that you are done at sso.example.test.")
    app.submit(page, "Send")

    expect(page.locator(".result pre.block")).to_have_text(
        "Team core onboarded (name Core ops; budget 99.5 EUR; channels chat, wiki; size medium); "
        "single sign-on confirmed.")
    assert app.mcp.calls[("onboard_team", True)] == 1
    assert op_status(op_id) == "completed"
