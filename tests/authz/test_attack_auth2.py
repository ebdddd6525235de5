"""Attacks on the authorization to MCP servers (issue 13), second attacker: each test a regression
test of a fault found on the ``attack2`` branch (settings from the environment, the outbound
guard's bounds, the re-run after connecting...). Real parts: Django settings and system checks, the
product's own service code.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from mrtrweb import conf


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400"])
def test_environment_numbers_must_be_finite(raw):
    """``MRTRWEB_OUTBOUND_TIMEOUT_S=inf`` turned the outbound guard's time bound off, and
    ``MRTRWEB_OUTBOUND_MAX_BYTES=nan`` passed the positive-number check (``nan <= 0`` is False) and
    made every Connect a 500 (``int(nan)`` in the guard's policy): a value that does not parse as a
    finite number is refused, named, never echoed."""
    with pytest.raises(ImproperlyConfigured) as caught:
        conf.from_environ({"MRTRWEB_OUTBOUND_TIMEOUT_S": raw})
    assert "MRTRWEB_OUTBOUND_TIMEOUT_S" in str(caught.value) and raw not in str(caught.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_settings_numbers_must_be_finite(settings, value):
    """The same through ``settings.MRTRWEB``: ``conf.get`` refuses a non-finite number (so system
    check ``mrtrweb.E001`` reports it at start), instead of the guard's policy raising ``ValueError`` /
    ``OverflowError`` on the first Connect or dropping its bounds."""
    from mrtrweb.authz import service

    settings.MRTRWEB = {"OUTBOUND_MAX_BYTES": value, "OUTBOUND_TIMEOUT_S": value}
    with pytest.raises(ImproperlyConfigured):
        conf.get("OUTBOUND_MAX_BYTES")
    with pytest.raises(ImproperlyConfigured):
        service.outbound_policy()


@pytest.mark.django_db(transaction=True)
async def test_run_again_twice_sends_the_call_once(seeded):
    """"Run again with the same arguments" is one click for one call: a double submission (two
    POSTs of the panel's form, a reload of the POST, a second tab) of a failed ``tools/call`` sent
    it to the MCP server twice -- a tool with side effects ran twice. The first run again of an
    operation spends it: the second is refused (409) and nothing more is sent."""
    from mrtrweb import operations
    from tests.authz.connecting import authz_client, stored_connection, csrf_field, failed_echo, oauth_server

    server = await oauth_server(seeded)
    alice = seeded["users"]["alice"]
    op = await failed_echo(alice, server, "insufficient_scope")
    await stored_connection(alice, server)
    client = await authz_client(alice, strict=True)
    first = await client.post(f"/mcp/operations/{op.id}/rerun/", csrf_field(client))
    assert first.status_code == 302
    second = await client.post(f"/mcp/operations/{op.id}/rerun/", csrf_field(client))
    await operations.wait_idle()
    assert len(seeded["mcp"].log.tool_calls("echo")) == 1
    assert second.status_code == 409
