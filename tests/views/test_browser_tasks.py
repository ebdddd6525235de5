"""Task-augmented calls in a real browser (Playwright + Debian Chromium against the live ASGI app,
fixtures from ``tests/browser.py``), against the 2026-07-28 tasks-extension server of
:mod:`tests.tasks_mcp` on loopback:

* a tool that runs only as a task: the operation page shows the task's status and the server's
  status message as it changes (pushed), and Stop cancels the task at the server (``tasks/cancel``)
  and ends the operation, nothing more sent;
* a task that turns ``input_required``: its request is a card like any round; the answer goes back
  once (``tasks/update``) and the task's result is shown.
"""

from __future__ import annotations

import re

import pytest

from tests import tasks_mcp
from tests.browser import op_status, expect

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def tasks_server():
    handle = tasks_mcp.serve()
    yield handle
    handle.stop()


@pytest.fixture
def on_tasks(app, tasks_server):
    from mrtrweb.models import McpServer

    McpServer.objects.filter(pk=app.seeded["servers"]["acme"].pk).update(url=tasks_server.url)
    tasks_server.log.clear()
    return app, tasks_server


def test_task_status_is_shown_and_stop_cancels_the_task(on_tasks):
    app, server = on_tasks
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "slow_compute", fill={"seconds": "30"})
    app.wait_live(page)
    status = page.locator(".task-status")
    expect(status).to_be_visible()
    expect(status).to_have_attribute("data-task-status", "working")
    expect(status.locator(".task-state")).to_have_text("working")
    # the server's status message as it changes (pushed: one tasks/get every TASK_POLL_MIN_S..MAX_S)
    expect(page.locator(".progress-message")).to_have_text(re.compile(r"^step ([3-9]|\d\d) of 30$"), timeout=15000)
    task = tasks_mcp.task_of("slow_compute")
    assert task["id"] not in page.content()  # the server's task id is never shown
    assert op_status(op_id) == "running"

    with page.expect_navigation():
        page.locator(".running").get_by_role("button", name="Stop").click()
    expect(page.locator(".panel")).to_have_attribute("data-status", "denied")
    expect(page.locator(".denied-reason")).to_have_text(
        "You stopped this operation; the call was cancelled at the server.")
    assert op_status(op_id) == "denied"
    for _ in range(50):
        if tasks_mcp.task_of("slow_compute")["cancelled"]:
            break
        page.wait_for_timeout(100)
    assert tasks_mcp.task_of("slow_compute")["cancelled"] is True
    cancels = server.log.records("tasks/cancel")
    assert len(cancels) == 1 and tasks_mcp.MCP_NAMES[cancels[0].request_id] == task["id"]
    gets = len(server.log.records("tasks/get"))
    page.wait_for_timeout(1500)
    assert len(server.log.records("tasks/get")) == gets  # nothing more was sent
    assert len(server.log.records("tools/call")) == 1


def test_input_required_task_round_through_the_card(on_tasks):
    app, server = on_tasks
    page = app.sign_in("alice")
    op_id = app.call_tool(page, "confirm_delete", fill={"filename": "notes.txt"})
    card = app.card(page)
    expect(card).to_be_visible(timeout=15000)
    expect(card.locator(".server-message")).to_have_text("Delete notes.txt?")
    card.get_by_label("Delete it?").check()
    app.submit(page, "Accept")
    review = app.expect_review(page)
    assert server.log.records("tasks/update") == []  # nothing sent before Send
    with page.expect_navigation():
        review.get_by_role("button", name="Send").click()
    expect(page.locator(".result pre.block")).to_have_text("Deleted notes.txt.", timeout=15000)
    assert op_status(op_id) == "completed"
    updates = server.log.records("tasks/update")
    assert len(updates) == 1 and updates[0].params["inputResponses"]["confirm"]["content"] == {"confirm": True}
    assert len(server.log.records("tools/call")) == 1
