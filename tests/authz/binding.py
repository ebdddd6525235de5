"""An operation bound to a person's authorization, for the tests of what a changed authorization
does to a waiting round: the authorization server's names, a seeded connection, a deploy round
started, shown and accepted through Django's test client. The fixtures ``protected`` and ``world``
are in ``tests/authz/conftest.py``.
"""

from __future__ import annotations

import datetime
import secrets

from django.test import AsyncClient
from django.utils import timezone

from mrtrweb import operations
from mrtrweb.authz import crypto
from mrtrweb.authz.models import OAuthConnection
from mrtrweb.models import McpServer, Operation
from tests.answering import DEPLOY_OK, post_answer

ISSUER = "https://as.example.test"
CLIENT_ID = "https://app.example.test/mcp/oauth/client-metadata.json"


def seed_connection(user, server: McpServer, token: str, *, family: str | None = None) -> OAuthConnection:
    """What a completed Connect (or, keeping ``family``, a refresh) writes: seeded."""
    expires = timezone.now() + datetime.timedelta(hours=1)
    tokens = {"access_token": token, "token_type": "Bearer", "expires_in": 3600, "scope": "mcp",
              "refresh_token": f"refresh-{token}"}
    conn, _ = OAuthConnection.objects.update_or_create(
        tenant=server.tenant, user=user, server=server,
        defaults={"issuer": ISSUER, "client_id": CLIENT_ID, "family": family or secrets.token_hex(16),
                  "scope": "mcp", "expires_at": expires, "tokens_sealed": crypto.seal(tokens),
                  "oauth_metadata": {"metadata": {"issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/authorize",
                                                  "token_endpoint": f"{ISSUER}/token",
                                                  "response_types_supported": ["code"]},
                                     "prm": None, "protocol_version": None}})
    return conn


async def start_deploy(client: AsyncClient, server: McpServer, tool: str = "deploy", **args: str) -> Operation:
    """Call ``tool`` (deploy to staging by default) from its form; the operation, not waited for."""
    data = {f"arg-{k}": v for k, v in (args or {"env": "staging", "replicas": "2"}).items()}
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/{tool}/", data)
    assert resp.status_code == 302, resp.content[:500]
    return await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])


async def card_waiting(client: AsyncClient, server: McpServer) -> Operation:
    """Start deploy and look at its card (the consent receipt)."""
    op = await start_deploy(client, server)
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    return op


async def accept_deploy(client: AsyncClient, op: Operation):
    """Accept round 1 of a deploy card with valid answers (review and Send); the response."""
    resp = await post_answer(client, f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    await operations.wait_idle()
    return resp
