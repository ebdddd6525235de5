"""A legacy (2025-11-25) server's held call, driven through Django's test client: start it, wait for
it, see what reached the server. The fixtures ``legacy_mcp`` and ``legacy`` (the seeded tenants with
the legacy demo server too) are in ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import time

from django.test import AsyncClient

from mrtrweb.models import McpServer, Operation
from tests.answering import until


#: valid answers to the legacy demo server's deploy card
DEPLOY_OK = {"in-elicitation-confirm": "on", "in-elicitation-ticket": "CHG-1042", "in-elicitation-replicas": "2"}


async def legacy_until(op: Operation, what, timeout: float = 15.0) -> Operation:
    """:func:`tests.answering.until` with a legacy call's longer wait."""
    return await until(op, what, timeout)


async def responses_until(mcp, count: int, timeout: float = 10.0) -> list:
    """The responses the server got to its own requests, once there are ``count``."""
    deadline = time.monotonic() + timeout
    while len(mcp.log.responses()) < count:
        assert time.monotonic() < deadline, f"the server got {len(mcp.log.responses())} responses, not {count}"
        await asyncio.sleep(0.05)
    return mcp.log.responses()


async def held_start(client: AsyncClient, server: McpServer, tool: str, args: dict[str, str]) -> Operation:
    """Run a tool and wait until the server's request is on the card (the call stays open)."""
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", {f"arg-{k}": v for k, v in args.items()})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    return await legacy_until(op, lambda o: o.status != Operation.Status.RUNNING)
