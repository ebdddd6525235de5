"""Support of the server-configuration tests (public names): the deployer's loopback policy, a round
waiting for a person, what a person whose access ended can no longer do, personal servers allowed."""

from __future__ import annotations

from django.test import AsyncClient, Client

from mrtrweb import operations
from mrtrweb.models import McpServer, Operation, Tenant
from tests.answering import DEPLOY_OK

#: loopback is what the tests' servers listen on: allowed by the deployer here (http too)
LOOPBACK_POLICY = {"allow_hosts": ["127.0.0.1"], "allow_http_hosts": ["127.0.0.1"]}


async def start_round(client: AsyncClient, server: McpServer) -> Operation:
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "staging", "arg-replicas": "2"})
    assert resp.status_code == 302, resp.status_code
    await operations.wait_idle()
    op = await Operation.objects.select_related("server", "tenant").aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    return op


async def refused_and_nothing_sent(client: AsyncClient, op: Operation, mcp) -> None:
    url = f"/mcp/operations/{op.id}"
    assert (await client.get(f"{url}/")).status_code == 404
    assert (await client.post(f"{url}/answer/", dict(DEPLOY_OK, action="accept", round="1"))).status_code == 404
    await operations.wait_idle()
    assert mcp.calls[("deploy", True)] == 0  # no retry reached the server


def allow_personal(seeded) -> None:
    alice = Client()
    alice.force_login(seeded["users"]["alice"])
    assert alice.post("/mcp/tenants/acme/servers/personal/", {"allow": "1"}).status_code == 302
    assert Tenant.objects.get(slug="acme").allow_personal_servers
