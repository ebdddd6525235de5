"""Task-augmented calls (issue 15 item 4) against a real 2026-07-28 server with the tasks extension
(:mod:`tests.tasks_mcp`, the wire of the suite's ``tasks-*`` scenarios, Streamable HTTP on
loopback): a tool that requires a task is called with the extension declared for that request,
followed with ``tasks/get`` (``Mcp-Name`` = the task id), its ``input_required`` answered once with
``tasks/update``, MRTR before the task (``tasks-mrtr-composition``), a failed task's message
cleaned, a malformed task refused, Stop sending ``tasks/cancel``; an ``optional`` tool is called
plainly. Plus the wire rules of :mod:`mrtrweb.mcp.tasks` on shapes."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from mrtrweb.headless import client as headless
from mrtrweb import operations
from mrtrweb.mcp import tasks as wire
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests import tasks_mcp


@pytest.mark.parametrize("raw, flavor, expected", [
    ({"resultType": "task", "taskId": "t1", "status": "working", "pollIntervalMs": 200, "statusMessage": "go"},
     "v2", ("t1", "working", "go", 200)),
    ({"task": {"taskId": "t2", "status": "working", "pollInterval": 1000, "ttl": 5, "createdAt": "x",
               "lastUpdatedAt": "x"}}, "v1", ("t2", "working", "", 1000)),
    ({"resultType": "complete", "content": []}, "v2", None),
    ({"content": [], "task": {"taskId": "t", "status": "working"}}, "v1", None),
    ({"resultType": "input_required", "inputRequests": {"a": {}}}, "v2", None),
])
def test_created_tasks_are_read_from_both_shapes(raw, flavor, expected):
    view = wire.created(raw, flavor)
    assert (view and (view.task_id, view.status, view.message, view.poll_ms)) == (expected or None)


@pytest.mark.parametrize("raw, reason", [
    ({"resultType": "task", "taskId": "a\u0007b", "status": "working"}, "control"),
    ({"resultType": "task", "taskId": "t" * 257, "status": "working"}, "at most 256"),
    ({"resultType": "task", "taskId": 7, "status": "working"}, "non-empty string"),
    ({"resultType": "task", "taskId": "t", "status": "done"}, "status is not one of"),
    ({"resultType": "task", "taskId": "t", "status": "completed"}, "no result object"),
    ({"resultType": "task", "taskId": "t", "status": "input_required", "inputRequests": {}}, "no inputRequests"),
])
def test_malformed_tasks_are_refused_with_the_field(raw, reason):
    with pytest.raises(wire.TaskWireError) as refused:
        wire.created(raw, "v2")
    assert reason in refused.value.reason and refused.value.code == "invalid_task"


def test_flavor_and_poll_bounds():
    assert wire.flavor({"extensions": {wire.TASKS_EXTENSION: {}}}) == "v2"
    assert wire.flavor({"tasks": {"requests": {"tools": {"call": {}}}}}) == "v1"
    assert wire.flavor({"tasks": {"list": {}}}) is None and wire.flavor(None) is None
    assert wire.task_params({"name": "x"}, "v1") == {"name": "x", "task": {"ttl": wire.REQUESTED_TTL_MS}}
    assert wire.task_params({"name": "x"}, "v2") == {"name": "x"}
    from mrtrweb.operations.tasks import _poll_s

    assert _poll_s(wire.TaskView("t", "working", poll_ms=10)) == 0.5  # raised to TASK_POLL_MIN_S
    assert _poll_s(wire.TaskView("t", "working", poll_ms=60_000)) == 5.0  # lowered to TASK_POLL_MAX_S
    assert _poll_s(wire.TaskView("t", "working")) == 5.0


@pytest.fixture(scope="module")
def tasks_server():
    handle = tasks_mcp.serve()
    yield handle
    handle.stop()


@pytest.fixture
def acme_tasks(seeded, tasks_server):
    acme = seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant_id=acme.tenant_id, name="Tasks server", url=tasks_server.url)
    tasks_server.log.clear()
    return {"alice": seeded["users"]["alice"], "server": server, "tenant": acme.tenant, "url": tasks_server.url,
            "log": tasks_server.log}


async def _run(ctx, tool, arguments, consent="decline", timeout_s=30.0):
    return await headless.arun(url=ctx["url"], user=ctx["alice"], tenant=ctx["tenant"], method="tools/call",
                               params={"name": tool, "arguments": arguments},
                               consent=headless.ConsentPolicy.from_answers(consent) if isinstance(consent, dict)
                               else headless.ConsentPolicy.parse(consent), timeout_s=timeout_s)


def _methods(log):
    return [r.method for r in log.records()]


@pytest.mark.django_db(transaction=True)
async def test_a_task_runs_to_completion_headless(acme_tasks):
    from mrtrweb.management.commands.mrtr_client import exit_code

    outcome = await _run(acme_tasks, "slow_compute", {"seconds": 1})
    assert (outcome.status, exit_code(outcome)) == ("completed", 0)
    assert outcome.result["content"][0]["text"] == "Computed for 1 s."
    op = await Operation.objects.aget(pk=outcome.operation_id)
    task = tasks_mcp.task_of("slow_compute")
    assert op.task_id == task["id"] and op.task_status == "completed" and op.worker == ""
    methods = _methods(acme_tasks["log"])
    assert methods.count("tools/call") == 1 and "tasks/get" in methods and "tasks/cancel" not in methods
    # each tasks/get names the task in Mcp-Name (SEP-2663); the call declared the extension for itself
    gets = acme_tasks["log"].records("tasks/get")
    assert {tasks_mcp.MCP_NAMES[r.request_id] for r in gets} == {task["id"]}
    events = [e async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")
              .values_list("event", flat=True)]
    assert events[-1] == "completed" and "denied" not in events
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_input_required_inside_a_task_is_a_round_answered_once_with_tasks_update(acme_tasks):
    outcome = await _run(acme_tasks, "confirm_delete", {"filename": "a.txt"}, consent={"confirm": {"confirm": True}})
    assert outcome.status == "completed" and outcome.rounds == 1
    assert outcome.result["content"][0]["text"] == "Deleted a.txt."
    updates = acme_tasks["log"].records("tasks/update")
    assert len(updates) == 1 and len(acme_tasks["log"].records("tools/call")) == 1
    received = await AuditEvent.objects.filter(operation_id=outcome.operation_id, event="received").acount()
    submitted = await AuditEvent.objects.filter(operation_id=outcome.operation_id, event="submitted").acount()
    assert (received, submitted) == (1, 1)

    declined = await _run(acme_tasks, "confirm_delete", {"filename": "b.txt"}, consent="decline")
    assert declined.status == "completed" and declined.result["content"][0]["text"] == "Kept b.txt (decline)."
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_mrtr_before_the_task_then_the_task(acme_tasks):
    """tasks-mrtr-composition: round 1 is an MRTR round (requestState), the retry creates the task."""
    outcome = await _run(acme_tasks, "test_tool_with_task", {}, consent={"user_name": {"name": "Alice"}})
    assert outcome.status == "completed" and outcome.rounds == 1
    assert outcome.result["content"][0]["text"] == "Hello, Alice!"
    calls = acme_tasks["log"].records("tools/call")
    assert len(calls) == 2 and calls[1].is_retry
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_a_failed_task_fails_the_operation_with_its_cleaned_message(acme_tasks):
    outcome = await _run(acme_tasks, "failing_job", {})
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert (op.status, op.error_code) == ("failed", "task_failed")
    assert "JSON-RPC -32603" in op.error_message and "disk <b>full</b>" in op.error_message
    assert "\u202e" not in op.error_message  # the bidi override is cleaned out
    client = AsyncClient()
    await client.aforce_login(acme_tasks["alice"])
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_a_task_the_server_cancels_fails_the_operation(acme_tasks):
    outcome = await _run(acme_tasks, "doomed_job", {})
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert (op.status, op.error_code, op.task_status) == ("failed", "task_cancelled", "cancelled")
    assert op.error_message == ("The server cancelled the task; nothing more was sent. "
                                "Server said: Cancelled: quota exceeded")  # the BEL cleaned out
    assert not acme_tasks["log"].records("tasks/cancel")
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_a_malformed_task_is_refused(acme_tasks):
    outcome = await _run(acme_tasks, "bad_task", {})
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert (op.status, op.error_code) == ("failed", "invalid_task")
    assert "taskId carries control" in op.error_message and op.task_id == ""
    assert not acme_tasks["log"].records("tasks/cancel")  # no usable id to cancel

    garbled = await _run(acme_tasks, "garbled_job", {})
    op = await Operation.objects.aget(pk=garbled.operation_id)
    assert (op.status, op.error_code) == ("failed", "invalid_task")
    assert op.error_message == ("The server's task answer is malformed and was refused (status is not one of "
                                "cancelled, completed, failed, input_required, working); the task was cancelled "
                                "and nothing more was sent.")
    assert len(acme_tasks["log"].records("tasks/cancel")) == 1
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_an_optional_tool_is_called_plainly(acme_tasks):
    outcome = await _run(acme_tasks, "optional_job", {})
    assert outcome.status == "completed" and outcome.result["content"][0]["text"] == "plain"
    assert not acme_tasks["log"].records("tasks/get")
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_the_pages_offer_it_and_stop_cancels_the_task(acme_tasks):
    from mrtrweb.runtime.workers import WORKER_ID

    alice, server = acme_tasks["alice"], acme_tasks["server"]
    client = AsyncClient()
    await client.aforce_login(alice)
    listing = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    item = listing[listing.index('data-tool="slow_compute"'):]
    assert "runs as a task" in item[:item.index("</li>")] and "not offered" not in item[:item.index("</li>")]
    page = (await client.get(f"/mcp/servers/{server.pk}/tools/", {"name": "slow_compute"})).content.decode()
    assert "Runs as a task" in page and 'class="call-form"' in page
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/?name=slow_compute", {"arg-seconds": "30"})
    assert resp.status_code == 302
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    for _ in range(100):
        op = await Operation.objects.aget(pk=op_id)
        if op.task_status == "working" and op.task_message.startswith("step "):
            break
        await asyncio.sleep(0.1)
    assert op.status == "running" and op.worker == WORKER_ID  # the reaper ends it if this worker dies
    shown = (await client.get(f"/mcp/operations/{op_id}/")).content.decode()
    assert 'data-task-status="working"' in shown and "step " in shown and op.task_id not in shown
    assert (await client.post(f"/mcp/operations/{op_id}/stop/")).status_code == 302
    for _ in range(60):
        op = await Operation.objects.aget(pk=op_id)
        if op.status != "running":
            break
        await asyncio.sleep(0.1)
    assert op.status == "denied" and "cancelled" in op.error_message
    await operations.wait_idle()
    assert tasks_mcp.task_of("slow_compute")["cancelled"] is True
    assert len(acme_tasks["log"].records("tasks/cancel")) == 1
    last = await AuditEvent.objects.filter(operation_id=op_id).order_by("-sequence").afirst()
    assert (last.event, last.reason) == ("denied", "cancelled")
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_headless_timeout_stops_the_task(acme_tasks):
    from mrtrweb.management.commands.mrtr_client import exit_code

    outcome = await _run(acme_tasks, "slow_compute", {"seconds": 30}, timeout_s=2.0)
    assert outcome.status == "timeout" and exit_code(outcome) == 7
    await operations.wait_idle()
    assert tasks_mcp.task_of("slow_compute")["cancelled"] is True
    await headless.close_connections()


async def _started(client, server, tool, fields, until):
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/?name={tool}", fields)
    assert resp.status_code == 302
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    for _ in range(100):
        op = await Operation.objects.aget(pk=op_id)
        if until(op):
            return op
        await asyncio.sleep(0.1)
    raise AssertionError(f"operation {op_id} never got there: {op.status} {op.task_status}")


@pytest.mark.django_db(transaction=True)
async def test_stop_at_a_tasks_round_cancels_the_task(acme_tasks):
    """No worker follows a task while its round waits for the person: a Stop then ends the
    operation as at any round, and the task is cancelled at the server."""
    client = AsyncClient()
    await client.aforce_login(acme_tasks["alice"])
    op = await _started(client, acme_tasks["server"], "confirm_delete", {"arg-filename": "c.txt"},
                        lambda op: op.status == "awaiting_input")
    assert op.task_status == "input_required" and op.worker == ""
    assert (await client.post(f"/mcp/operations/{op.id}/stop/")).status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == "denied" and tasks_mcp.task_of("confirm_delete")["cancelled"] is True
    assert not acme_tasks["log"].records("tasks/update")  # the answer never went out
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_the_reaper_ends_a_task_whose_worker_died_and_cancels_it(acme_tasks, trusted_worker):
    client = AsyncClient()
    await client.aforce_login(acme_tasks["alice"])
    op = await _started(client, acme_tasks["server"], "slow_compute", {"arg-seconds": "30"},
                        lambda op: op.task_status == "working")
    from mrtrweb.operations.runtime import running_tasks

    for running in list(running_tasks):  # this worker "dies": nothing follows the task any more
        running.cancel()
    await asyncio.gather(*running_tasks, return_exceptions=True)
    # a cancelled task's database work already in the one sync thread still runs to its end: a no-op
    # queued on that thread waits for it, so the dead worker writes nothing after the row names it (ci21)
    await sync_to_async(lambda: None)()
    await Operation.objects.filter(pk=op.pk).aupdate(worker="gone-host:1:deadbeef")
    row = await Operation.objects.filter(pk=op.pk).values("status", "worker", "task_status").afirst()
    assert row["status"] == "running" and row["worker"] == "gone-host:1:deadbeef", row
    assert await operations.reap_interrupted(op.pk) == 1, row
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert (op.status, op.error_code) == ("interrupted", "worker_lost")
    assert tasks_mcp.task_of("slow_compute")["cancelled"] is True
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_a_drain_stops_following_the_task_and_cancels_it(acme_tasks):
    """A graceful stop (a deploy) that cannot wait for the task: the operation is marked
    ``worker_stopped`` and the worker following it winds down, cancelling the task at the server."""
    from mrtrweb.runtime import drain, workers

    drain.reset()
    workers.reset()
    try:
        client = AsyncClient()
        await client.aforce_login(acme_tasks["alice"])
        op = await _started(client, acme_tasks["server"], "slow_compute", {"arg-seconds": "30"},
                            lambda op: op.task_status == "working")
        outcome = await drain.drain(grace=0.5)
        op = await Operation.objects.aget(pk=op.pk)
        assert (op.status, op.error_code) == ("interrupted", drain.WORKER_STOPPED)
        assert outcome["stopped"] == 1 and outcome["cancelled"] == 0  # wound down by itself
        assert tasks_mcp.task_of("slow_compute")["cancelled"] is True
    finally:
        drain.reset()
        workers.reset()
