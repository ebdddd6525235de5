"""Attacks on "Test before saving" (issue 29): the endpoint must never become a way around the
deployer's URL policy, nor a way to exhaust the worker.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from mrtrweb.models import McpServer

from .hostile_http import serve_hostile

URL = "/mcp/tenants/acme/servers/test/"


@pytest.fixture(scope="module")
def hostile():
    handle, counted = serve_hostile()
    yield f"http://127.0.0.1:{handle.port}", counted
    handle.stop()


@pytest.mark.urls("tests.serverconfig.urls")
async def test_a_superusers_server_id_does_not_lift_the_policy_from_another_url(seeded, settings, hostile) -> None:
    """The superuser's server (``url_policy`` off) is tested unrestricted only at the URL the
    superuser saved: a tenant admin naming that server and typing another URL (loopback, the cloud
    metadata address, an internal service) is tested under the deployer's policy -- refused,
    nothing sent."""
    settings.MRTRWEB = {"SERVER_TESTS_PER_MINUTE": 100}
    base, counted = hostile
    server = seeded["servers"]["acme"]
    assert not server.url_policy  # the superuser's, on loopback
    client = AsyncClient()
    await client.aforce_login(seeded["users"]["alice"])  # acme's tenant admin
    before = counted.requests
    answer = await client.post(URL, {"url": f"{base}/html", "server": str(server.pk)},
                               headers={"Accept": "application/json"})
    report = answer.json()
    assert report["reason"] == "policy" and report["policy_code"] == "http", report
    assert counted.requests == before  # nothing reached the internal service
    # the saved URL itself is tested as the server is connected: unrestricted (the superuser chose it)
    seeded["mcp"].log.clear()
    saved = await client.post(URL, {"url": server.url, "server": str(server.pk)}, headers={"Accept": "application/json"})
    assert saved.json()["outcome"] == "connected"
    assert (await McpServer.objects.aget(pk=server.pk)).last_test["outcome"] == "connected"
