"""Tools with ``execution.taskSupport: "required"``: run as tasks where the server declares tasks,
never called where it does not.

Against the real reference server (npm ``@modelcontextprotocol/server-everything``, Streamable
HTTP on loopback, 2025-11-25 with the experimental tasks of ``basic/utilities/tasks``), whose
``simulate-research-query`` is registered with ``taskSupport: "required"``: the server page and the
tool page offer it as a task, and the headless client and ``mrtr_client`` run it to completion (the
``task`` param, ``tasks/get`` while it works, ``tasks/result``); with ``ambiguous: true`` the
server's ``elicitation/create`` for the ``input_required`` task arrives on the ``tasks/result``
stream and is a round of the operation, answered by the consent policy. Against a server that
lists such tools but declares no tasks (:mod:`tests.tasks_mcp` with ``declare=False``): the pages
say why it is not offered and a posted call is refused (409, nothing started), headless reports
``task_required`` (``mrtr_client`` exit 10). Plus the rule on listed shapes.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import AsyncClient

from mrtrweb.headless import client as headless
from mrtrweb.mcp import tasks as wire
from mrtrweb.models import AuditEvent, McpServer, Membership, Operation, Tenant
from mrtrweb.operations.tasks import TASK_REQUIRED_MESSAGE, refused, requires_task, task_support
from tests import tasks_mcp
from tests.thirdparty import everything_server  # noqa: F401 -- the fixture

TASK_TOOL = "simulate-research-query"


@pytest.mark.parametrize("tool, support", [
    ({"name": "t"}, "forbidden"), ({"name": "t", "execution": {}}, "forbidden"),
    ({"name": "t", "execution": {"taskSupport": "forbidden"}}, "forbidden"),
    ({"name": "t", "execution": {"taskSupport": "optional"}}, "optional"),
    ({"name": "t", "execution": {"taskSupport": "required"}}, "required"),
    ({"name": "t", "execution": {"taskSupport": "REQUIRED"}}, "forbidden"),
    ({"name": "t", "execution": "required"}, "forbidden"), (None, "forbidden"), ("required", "forbidden"),
])
def test_task_support_of_listed_tools(tool, support):
    assert task_support(tool) == support
    assert requires_task(tool) is (support == "required")
    assert refused(tool, {}) is (support == "required")
    assert refused(tool, {"extensions": {wire.TASKS_EXTENSION: {}}}) is False


@pytest.fixture
def acme_everything(seeded, everything_server):  # noqa: F811
    acme = seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant_id=acme.tenant_id, name="Everything", url=everything_server.url)
    return {"alice": seeded["users"]["alice"], "server": server, "tenant": acme.tenant, "url": everything_server.url}


@pytest.mark.django_db(transaction=True)
async def test_the_server_lists_it_as_task_only_and_declares_tasks(acme_everything):
    """The premise, from the real server: the tool is listed with taskSupport "required", and the
    server declares task-augmented tools/call (2025-11-25)."""
    from mrtrweb.servers import connections

    conn = await connections.connection_for(acme_everything["alice"], acme_everything["server"])
    tools = {t["name"]: t for t in await conn.list_tools()}
    assert tools[TASK_TOOL]["execution"] == {"taskSupport": "required"}
    assert requires_task(tools[TASK_TOOL]) and not requires_task(tools["echo"])
    assert wire.flavor(conn.server_capabilities) == "v1" and conn.protocol_version == "2025-11-25"
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_the_pages_offer_it_as_a_task(acme_everything):
    alice, server = acme_everything["alice"], acme_everything["server"]
    client = AsyncClient()
    await client.aforce_login(alice)
    listing = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    item = listing[listing.index(f'data-tool="{TASK_TOOL}"'):]
    item = item[:item.index("</li>")]
    assert "runs as a task" in item and "not offered" not in item
    page = (await client.get(f"/mcp/servers/{server.pk}/tools/", {"name": TASK_TOOL})).content.decode()
    assert "Runs as a task" in page and 'class="call-form"' in page and "Runs only as a task" not in page
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_headless_runs_the_task_to_completion(acme_everything):
    from mrtrweb.management.commands.mrtr_client import exit_code

    outcome = await headless.arun(url=acme_everything["url"], user=acme_everything["alice"],
                                  tenant=acme_everything["tenant"], method="tools/call",
                                  params={"name": TASK_TOOL, "arguments": {"topic": "tides", "ambiguous": False}},
                                  consent=headless.ConsentPolicy.parse("decline"), timeout_s=60)
    assert (outcome.status, exit_code(outcome), outcome.rounds) == ("completed", 0, 0)
    text = outcome.result["content"][0]["text"]
    assert "# Research Report: tides" in text
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert op.task_id and op.task_status == "completed"
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_input_required_inside_the_task_is_a_round(acme_everything, tmp_path):
    """``ambiguous: true``: the task turns input_required and its elicitation arrives on the
    tasks/result stream: a round of the operation, answered by the consent policy, once."""
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"elicitation": {"interpretation": "historical"}}))
    outcome = await headless.arun(url=acme_everything["url"], user=acme_everything["alice"],
                                  tenant=acme_everything["tenant"], method="tools/call",
                                  params={"name": TASK_TOOL, "arguments": {"topic": "tides", "ambiguous": True}},
                                  consent=headless.ConsentPolicy.parse(f"answers:{answers}"), timeout_s=60)
    assert outcome.rounds == 1, outcome
    received = await AuditEvent.objects.filter(operation_id=outcome.operation_id, event="received").acount()
    assert received == 1
    assert outcome.status == "completed"
    assert "# Research Report: tides (historical)" in outcome.result["content"][0]["text"]
    submitted = await AuditEvent.objects.aget(operation_id=outcome.operation_id, event="submitted")
    assert submitted.actions == {"elicitation": "accept"}  # answered once, by the policy
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
def test_mrtr_client_runs_it_and_exits_0(everything_server):  # noqa: F811
    out = io.StringIO()
    try:
        call_command("mrtr_client", everything_server.url, "--tool", TASK_TOOL, "--args", '{"topic": "x"}',
                     stdout=out)
    except SystemExit as exited:
        assert exited.code == 0, out.getvalue()
    assert "Research Report" in out.getvalue()
    assert Operation.objects.get().task_status == "completed"


@pytest.fixture(scope="module")
def undeclared_server():
    handle = tasks_mcp.serve(declare=False)
    yield handle
    handle.stop()


@pytest.mark.django_db(transaction=True)
async def test_without_declared_tasks_the_pages_say_why_and_nothing_is_called(seeded, undeclared_server):
    acme = seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant_id=acme.tenant_id, name="No tasks", url=undeclared_server.url)
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])
    listing = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    item = listing[listing.index('data-tool="slow_compute"'):]
    assert "runs only as a task: not offered" in item[:item.index("</li>")]
    page = await client.get(f"/mcp/servers/{server.pk}/tools/", {"name": "slow_compute"})
    body = page.content.decode()
    assert page.status_code == 200 and "Runs only as a task" in body and 'class="call-form"' not in body
    posted = await client.post(f"/mcp/servers/{server.pk}/tools/?name=slow_compute", {"arg-seconds": "1"})
    assert posted.status_code == 409 and "does not declare task support" in posted.content.decode()
    assert not await Operation.objects.filter(server=server).aexists()
    undeclared_server.log.clear()
    outcome = await headless.arun(url=undeclared_server.url, user=seeded["users"]["alice"], tenant=acme.tenant,
                                  method="tools/call", params={"name": "slow_compute", "arguments": {"seconds": 1}},
                                  consent=headless.ConsentPolicy.parse("decline"))
    from mrtrweb.management.commands.mrtr_client import exit_code

    assert (outcome.status, outcome.operation_id, exit_code(outcome)) == ("task_required", "", 10)
    assert not undeclared_server.log.records("tools/call")  # nothing sent
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
def test_mrtr_client_exits_10_with_the_reason(undeclared_server):
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("mrtr_client", undeclared_server.url, "--tool", "slow_compute", "--args", '{"seconds": 1}',
                     stdout=out)
    assert exited.value.code == 10
    text = out.getvalue()
    assert "tools/call slow_compute: task_required (not run)" in text and TASK_REQUIRED_MESSAGE in text
    tenant = Tenant.objects.get(slug="headless")
    assert Membership.objects.filter(tenant=tenant).exists()
    assert not Operation.objects.exists()


@pytest.mark.django_db(transaction=True)
async def test_headless_timeout_stops_the_task(acme_everything, caplog):
    """``--timeout`` while the task works (four 1 s stages): Stop, ``tasks/cancel`` acknowledged."""
    import logging

    caplog.set_level(logging.INFO, logger="mrtrweb.operations")
    outcome = await headless.arun(url=acme_everything["url"], user=acme_everything["alice"],
                                  tenant=acme_everything["tenant"], method="tools/call",
                                  params={"name": TASK_TOOL, "arguments": {"topic": "tides"}},
                                  consent=headless.ConsentPolicy.parse("decline"), timeout_s=1.5)
    assert outcome.status == "timeout"
    from mrtrweb import operations

    await operations.wait_idle()
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert op.status == "denied" and op.task_status == "working"
    assert "its task was cancelled (tasks/cancel acknowledged)" in caplog.text
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_stop_at_the_tasks_held_round_cancels_the_task(acme_everything, caplog):
    """The person stops at the round the input_required task's elicitation made: the server is
    told ``cancel`` on the held request and the task is cancelled (``tasks/cancel``)."""
    import asyncio
    import logging

    from mrtrweb import operations

    caplog.set_level(logging.INFO, logger="mrtrweb.operations")
    client = AsyncClient()
    await client.aforce_login(acme_everything["alice"])
    server = acme_everything["server"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/?name={TASK_TOOL}",
                             {"arg-topic": "tides", "arg-ambiguous": "on"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    for _ in range(150):
        op = await Operation.objects.aget(pk=op_id)
        if op.status != "running":
            break
        await asyncio.sleep(0.1)
    assert op.status == "awaiting_input" and op.task_status == "input_required"
    assert (await client.post(f"/mcp/operations/{op_id}/stop/")).status_code == 302
    for _ in range(100):
        if "its task was cancelled (tasks/cancel acknowledged)" in caplog.text:
            break
        await asyncio.sleep(0.1)
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op_id)
    assert op.status == "denied" and "its task was cancelled (tasks/cancel acknowledged)" in caplog.text
    await headless.close_connections()
