"""Support of the MCP Apps tests driving the host's endpoints with Django's client (public names):
a signed-in client, our app server's panel call rendered by the product, an app's request posted."""

from __future__ import annotations

import json

from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import McpServer, Operation


async def client_for(user, csrf: bool = False) -> AsyncClient:
    client = AsyncClient(enforce_csrf_checks=csrf)
    await client.aforce_login(user)
    return client


async def rendered(seeded, own, *, render: bool = True) -> tuple[Operation, AsyncClient]:
    """alice's open_panel call on our app server, its app rendered by the product (unless not)."""
    alice, acme = seeded["users"]["alice"], seeded["servers"]["acme"]
    server = await McpServer.objects.acreate(tenant=acme.tenant, name="Panel app", url=own.url, apps_enabled=True)
    host = await operations.start_operation(user=alice, server=server, method="tools/call", name="open_panel",
                                            params={"name": "open_panel", "arguments": {}})
    await operations.wait_idle()
    client = await client_for(alice)
    if render:
        started = await client.post(f"/mcp/operations/{host.id}/app/")
        assert started.status_code == 200, started.content
        read = started.json()["read"]
        await operations.wait_idle()
        doc = await client.get(f"/mcp/operations/{read}/app/document/")
        assert doc.json()["status"] == "ready", doc.content
    return host, client


async def ask(client, host, body) -> tuple[int, dict]:
    answer = await client.post(f"/mcp/operations/{host.id}/app/requests/", json.dumps(body),
                               content_type="application/json")
    return answer.status_code, answer.json()
