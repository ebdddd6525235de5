"""Tools that run only as tasks (``execution.taskSupport: "required"``) are never called plainly.

Against the real reference server (npm ``@modelcontextprotocol/server-everything``, Streamable
HTTP on loopback, 2025-11-25), whose ``simulate-research-query`` is registered with
``taskSupport: "required"`` (a plain call is answered "requires task augmentation"): the server
page marks it, its tool page says it needs tasks and why it is not offered and refuses a posted
call (409, nothing started), and the headless client reports ``task_required`` without starting an
operation (``mrtr_client`` exit 10). A tool without ``execution`` (``echo``) is called plainly.
Plus the rule itself (:func:`mrtrweb.operations.tasks.task_support`) on listed shapes.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import time

import pytest
from django.core.management import call_command
from django.test import AsyncClient

from mrtrweb import headless
from mrtrweb.models import McpServer, Membership, Operation, Tenant
from mrtrweb.operations.tasks import TASK_REQUIRED_MESSAGE, requires_task, task_support
from tests.nodejs import VAR, NodeUnavailable, node22, npm_install

EVERYTHING = "@modelcontextprotocol/server-everything"
EVERYTHING_VERSION = "2026.8.31"
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    try:
        modules = npm_install(VAR / "everything", f"{EVERYTHING}@{EVERYTHING_VERSION}")
        node = node22()
    except NodeUnavailable as exc:
        pytest.fail(f"the everything server could not be installed: {exc}")
    port = _free_port()
    log = tmp_path_factory.mktemp("everything") / "server.log"
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env["PORT"] = str(port)
    with open(log, "w") as out:
        proc = subprocess.Popen([node, str(modules / EVERYTHING / "dist" / "index.js"), "streamableHttp"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def acme_everything(seeded, everything):
    acme = seeded["servers"]["acme"]
    server = McpServer.objects.create(tenant_id=acme.tenant_id, name="Everything", url=everything)
    return {"alice": seeded["users"]["alice"], "server": server, "tenant": acme.tenant, "url": everything}


@pytest.mark.django_db(transaction=True)
async def test_the_server_lists_it_as_task_only(acme_everything):
    """The premise, from the real server: the tool is listed with taskSupport "required"."""
    from mrtrweb import connections

    conn = await connections.connection_for(acme_everything["alice"], acme_everything["server"])
    tools = {t["name"]: t for t in await conn.list_tools()}
    assert tools[TASK_TOOL]["execution"] == {"taskSupport": "required"}
    assert requires_task(tools[TASK_TOOL]) and not requires_task(tools["echo"])
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_the_pages_say_why_and_nothing_is_called(acme_everything):
    alice, server = acme_everything["alice"], acme_everything["server"]
    client = AsyncClient()
    await client.aforce_login(alice)
    listing = (await client.get(f"/mcp/servers/{server.pk}/")).content.decode()
    item = listing[listing.index(f'data-tool="{TASK_TOOL}"'):]
    item = item[:item.index("</li>")]
    assert "runs only as a task: not offered" in item
    echo = listing[listing.index('data-tool="echo"'):]
    assert "runs only as a task" not in echo[:echo.index("</li>")]

    page = await client.get(f"/mcp/servers/{server.pk}/tools/", {"name": TASK_TOOL})
    body = page.content.decode()
    assert page.status_code == 200
    assert "Runs only as a task" in body and 'execution.taskSupport &quot;required&quot;' in body
    assert "Call tool" not in body and 'class="call-form"' not in body

    posted = await client.post(f"/mcp/servers/{server.pk}/tools/?name={TASK_TOOL}", {"arg-query": "q"})
    assert posted.status_code == 409
    assert "Runs only as a task" in posted.content.decode()
    assert not await Operation.objects.filter(server=server).aexists()  # nothing started, nothing sent

    # a plain tool of the same server is still offered and called
    page = (await client.get(f"/mcp/servers/{server.pk}/tools/", {"name": "echo"})).content.decode()
    assert "Call tool" in page and "Runs only as a task" not in page
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
async def test_headless_reports_task_required_without_an_operation(acme_everything):
    from mrtrweb.management.commands.mrtr_client import exit_code

    outcome = await headless.arun(url=acme_everything["url"], user=acme_everything["alice"],
                                  tenant=acme_everything["tenant"], method="tools/call",
                                  params={"name": TASK_TOOL, "arguments": {"topic": "x", "ambiguous": False}},
                                  consent=headless.ConsentPolicy.parse("decline"))
    assert (outcome.status, outcome.error_code, outcome.operation_id, outcome.rounds) == \
        ("task_required", "task_required", "", 0)
    assert exit_code(outcome) == 10
    assert not await Operation.objects.aexists()
    echo = await headless.arun(url=acme_everything["url"], user=acme_everything["alice"],
                               tenant=acme_everything["tenant"], method="tools/call",
                               params={"name": "echo", "arguments": {"message": "plain"}},
                               consent=headless.ConsentPolicy.parse("decline"))
    assert echo.status == "completed" and exit_code(echo) == 0
    await headless.close_connections()


@pytest.mark.django_db(transaction=True)
def test_mrtr_client_exits_10_with_the_reason(everything):
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("mrtr_client", everything, "--tool", TASK_TOOL, "--args", '{"topic": "x"}', stdout=out)
    assert exited.value.code == 10
    text = out.getvalue()
    assert f"tools/call {TASK_TOOL}: task_required (not run)" in text and TASK_REQUIRED_MESSAGE in text
    tenant = Tenant.objects.get(slug="headless")
    assert Membership.objects.filter(tenant=tenant).exists()
    assert not Operation.objects.exists()
