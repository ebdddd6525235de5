"""The authorization tests' shared fixtures: the protected demo MCP server and the seeded world
whose acme server it is."""

from __future__ import annotations

import pytest

from mrtrweb.models import McpServer
from tests.protected_mcp import serve_protected


@pytest.fixture(scope="module")
def protected():
    """The protected demo MCP server (bearer tokens checked) on 127.0.0.1, per module: ``(handle, check)``."""
    handle, check = serve_protected()
    yield handle, check
    handle.stop()


@pytest.fixture
def world(transactional_db, protected, settings, _fast_password_hasher, _fresh_gate_and_cache):
    """The demo tenants seeded with the protected server as acme's: handle, check, users, server."""
    from django.contrib.auth import get_user_model

    from mrtrweb.management.commands.mrtrweb_demo import seed_demo

    handle, check = protected
    settings.MRTRWEB = dict(getattr(settings, "MRTRWEB", {}) or {}, OUTBOUND_ALLOW_HTTP_LOOPBACK=True)
    seed_demo(handle.url)
    check.accepted.clear()
    check.clear()
    handle.log.clear()
    users = {u.username: u for u in get_user_model().objects.all()}
    server = McpServer.objects.select_related("tenant").get(tenant__slug="acme")
    return {"handle": handle, "check": check, "users": users, "server": server}
