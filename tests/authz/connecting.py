"""Connecting a person to an OAuth-protected MCP server through the views, for the authorization
views' tests and the attacks on them: signed-in clients, the CSRF field, a stored connection, a call
that failed for want of authorization.
"""

from __future__ import annotations

import datetime
import secrets

from django.test import AsyncClient
from django.utils import timezone

from mrtrweb import operations
from mrtrweb.authz import crypto
from mrtrweb.models import McpServer, OAuthConnection, Operation

#: the tokens :func:`seal_tokens` seals
ACCESS = "AT-" + "a1" * 20
REFRESH = "RT-" + "b2" * 20


async def authz_client(user, *, strict: bool = False) -> AsyncClient:
    """A test client signed in as ``user`` with the CSRF cookie; ``strict``: CSRF checks enforced."""
    client = AsyncClient(enforce_csrf_checks=strict)
    await client.aforce_login(user)
    await client.get("/mcp/")  # the CSRF cookie
    return client


def csrf_field(client: AsyncClient) -> dict[str, str]:
    """The form field carrying the client's CSRF token."""
    return {"csrfmiddlewaretoken": client.cookies["csrftoken"].value}


async def oauth_server(seeded, slug: str = "acme") -> McpServer:
    """The seeded tenant's server, switched to per-person OAuth."""
    server = seeded["servers"][slug]
    server.auth_mode = McpServer.AuthMode.OAUTH_USER
    await server.asave()
    return server


def seal_tokens() -> str:
    return crypto.seal({"access_token": ACCESS, "refresh_token": REFRESH, "token_type": "Bearer", "expires_in": 3600})


async def stored_connection(user, server, **extra) -> OAuthConnection:
    """What the real token exchange stores for ``user`` and ``server`` (``extra`` overrides fields)."""
    fields = dict(tenant_id=server.tenant_id, user=user, server=server, issuer="https://as.example.test",
                  client_id="https://app.example.test/mcp/oauth/client-metadata.json", family=secrets.token_hex(8),
                  scope="mcp:tools offline_access", expires_at=timezone.now() + datetime.timedelta(hours=1),
                  tokens_sealed=seal_tokens())
    fields.update(extra)
    return await OAuthConnection.objects.acreate(**fields)


async def failed_echo(user, server, code: str = "authorization_required") -> Operation:
    """An echo call of ``user`` that failed with ``code`` (to be run again after Connect)."""
    params = {"name": "echo", "arguments": {"text": "same arguments ⟨x⟩"}}
    return await Operation.objects.acreate(tenant_id=server.tenant_id, user=user, server=server, method="tools/call",
                                           name="echo", params=params, request_id="r", latest_request_id="r",
                                           status="failed", error_code=code, error_message=operations.message_for(code))
