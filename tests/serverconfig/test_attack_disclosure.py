"""Attacks on what a refusal tells: the URL policy must say *why* a URL is refused without making
"Test" (or the add form) an oracle of the deployment's internal DNS. A tenant admin of a hosted
deployment typing ``https://redis.prod.internal/`` learns that the name is not allowed -- never the
private address it resolves to (the deployment's network map); the deployer's log keeps it.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.core.exceptions import ValidationError
from django.test import AsyncClient

from mrtrweb.mcp import McpCallError, McpConnection
from mrtrweb.mcp.url_policy import UrlPolicy
from mrtrweb.serverconfig import policy


INTERNAL = "redis.prod.internal"
ADDRESS = "10.3.4.5"


@pytest.mark.urls("tests.serverconfig.urls")
async def test_a_refused_name_does_not_reveal_its_internal_address(seeded, settings, names, caplog) -> None:
    settings.MRTRWEB = {"SERVER_TESTS_PER_MINUTE": 100}
    names.names[INTERNAL] = [ADDRESS]
    caplog.set_level(logging.INFO, logger="mrtrweb")
    alice = AsyncClient()
    await alice.aforce_login(seeded["users"]["alice"])
    as_json = await alice.post("/mcp/tenants/acme/servers/test/", {"url": f"https://{INTERNAL}/mcp"},
                               headers={"Accept": "application/json"})
    report = as_json.json()
    assert report["reason"] == "policy" and report["policy_code"] == "address"
    assert ADDRESS not in as_json.content.decode()
    page = await alice.post("/mcp/tenants/acme/servers/test/", {"url": f"https://{INTERNAL}/mcp"})
    text = page.content.decode()
    assert f"{INTERNAL} resolves to a private, loopback, link-local or reserved address" in text
    assert ADDRESS not in text
    # the add form's validator and a connection's error say the same, without the address
    with pytest.raises(ValidationError) as caught:
        await asyncio.to_thread(policy.validate_url, f"https://{INTERNAL}/mcp")
    assert INTERNAL in caught.value.messages[0] and ADDRESS not in caught.value.messages[0]
    with pytest.raises(McpCallError) as failed:
        async with McpConnection(f"https://{INTERNAL}/mcp", url_policy=UrlPolicy(timeout_s=3.0), timeout_s=5):
            pass
    assert failed.value.reason == "policy" and ADDRESS not in str(failed.value)
    # the deployer's log names it
    assert any(ADDRESS in r.getMessage() and INTERNAL in r.getMessage() for r in caplog.records)


async def test_an_address_typed_is_named_back(names) -> None:
    """A literal the person typed is theirs: the refusal names it."""
    with pytest.raises(ValidationError) as caught:
        await asyncio.to_thread(policy.validate_url, f"https://{ADDRESS}/mcp")
    assert caught.value.messages[0].startswith(f"{ADDRESS} is a private")
