"""Per-user and per-tenant limits on pending rounds and starts per minute: a clear message, and
nothing is sent."""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from mrtrweb import operations
from mrtrweb.models import Operation

pytestmark = [pytest.mark.django_db(transaction=True)]


async def _client(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def _start(client, server, provider: str):
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/connect_account/", {"arg-provider": provider})
    await operations.wait_idle()
    return resp


async def test_user_pending_rounds_cap(seeded, settings):
    settings.MRTRWEB = {"MAX_PENDING_ROUNDS": 2}
    alice, server, mcp = seeded["users"]["alice"], seeded["servers"]["acme"], seeded["mcp"]
    client = await _client(alice)
    assert (await _start(client, server, "a")).status_code == 302
    assert (await _start(client, server, "b")).status_code == 302
    third = await _start(client, server, "c")
    assert third.status_code == 200 and "too many rounds waiting for an answer" in third.content.decode()
    assert mcp.calls[("connect_account", False)] == 2
    # another user of the same tenant is not held back by alice's cap
    carol = await _client(seeded["users"]["carol"])
    assert (await _start(carol, server, "d")).status_code == 302


async def test_user_starts_per_minute_cap(seeded, settings):
    settings.MRTRWEB = {"MAX_STARTS_PER_MINUTE": 3}
    client = await _client(seeded["users"]["alice"])
    server = seeded["servers"]["acme"]
    for i in range(3):
        resp = await client.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": f"hi {i}"})
        assert resp.status_code == 302
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": "one more"})
    assert resp.status_code == 200 and "started too many operations in the last minute" in resp.content.decode()
    await operations.wait_idle()
    assert await Operation.objects.acount() == 3


async def test_tenant_caps(seeded, settings):
    settings.MRTRWEB = {"MAX_TENANT_PENDING_ROUNDS": 2, "MAX_TENANT_STARTS_PER_MINUTE": 3}
    server = seeded["servers"]["acme"]
    alice, carol = await _client(seeded["users"]["alice"]), await _client(seeded["users"]["carol"])
    assert (await _start(alice, server, "a")).status_code == 302
    assert (await _start(carol, server, "b")).status_code == 302
    resp = await _start(carol, server, "c")
    assert "organisation has too many rounds waiting" in resp.content.decode()
    # the other tenant is not affected
    bob = await _client(seeded["users"]["bob"])
    assert (await _start(bob, seeded["servers"]["globex"], "x")).status_code == 302
    settings.MRTRWEB = {"MAX_TENANT_STARTS_PER_MINUTE": 2}
    resp = await alice.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": "x"})
    assert "organisation started too many operations" in resp.content.decode()


def test_the_starts_access_and_counts_are_one_statement_agreeing_with_the_orms(seeded):
    """Issue 30: the start reads the owner's access and the four counts together
    (:func:`mrtrweb.operations.starting.access_and_limits_sync`, one statement); its counts are
    :func:`limits_queryset`'s, and a refused user is refused for the cause :func:`denial` gives."""
    from django.db import connection
    from django.db.models import Count, Q
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from mrtrweb.operations import starting
    from mrtrweb.tenancy import access

    alice, bob, server = seeded["users"]["alice"], seeded["users"]["bob"], seeded["servers"]["acme"]
    for status, user in (("awaiting_input", alice), ("awaiting_input", seeded["users"]["carol"]),
                         ("completed", alice), ("awaiting_input", bob)):
        Operation.objects.create(tenant_id=server.tenant_id if user != bob else seeded["servers"]["globex"].tenant_id,
                                 user=user, server=server if user != bob else seeded["servers"]["globex"],
                                 method="tools/call", name="x", params={}, request_id="r", status=status)
    seen = {}
    real = starting._refuse_over_limits
    starting._refuse_over_limits = lambda user, tenant_id, counts: seen.update(counts)
    try:
        with CaptureQueriesContext(connection) as ctx:
            assert starting.access_and_limits_sync(alice, server) == ""
    finally:
        starting._refuse_over_limits = real
    assert len(ctx.captured_queries) == 1
    since = timezone.now() - timezone.timedelta(minutes=1)
    mine, ours = Q(user=alice), Q(tenant_id=server.tenant_id)
    waiting, recent = Q(status="awaiting_input"), Q(created_at__gte=since)
    expected = starting.limits_queryset(alice.pk, server.tenant_id, since).aggregate(
        user_pending=Count("pk", filter=mine & waiting), user_starts=Count("pk", filter=mine & recent),
        tenant_pending=Count("pk", filter=ours & waiting), tenant_starts=Count("pk", filter=ours & recent))
    assert {k: v or 0 for k, v in seen.items()} == expected and expected["tenant_pending"] == 2
    assert starting.access_and_limits_sync(bob, server) == access.denial(bob.pk, server.tenant_id, server.pk) \
        == access.MEMBERSHIP_REMOVED


async def test_with_the_redis_store_the_starts_limits_and_access_hold_in_its_insert(seeded, settings):
    """With ``BINDING_STORE = "cache"`` the start's row is inserted under the access check and the
    limits in its own ``WHERE`` (PostgreSQL: one statement, no check before it): a limit reached
    still refuses with its message, a server disabled still denies, and nothing is written or sent
    for either."""
    from asgiref.sync import sync_to_async

    from mrtrweb.models import McpServer
    from mrtrweb.runtime import gates

    settings.MRTRWEB = {"MAX_STARTS_PER_MINUTE": 2, "BINDING_STORE": "cache"}
    await sync_to_async(gates.reset_gate)()
    try:
        client = await _client(seeded["users"]["alice"])
        server = seeded["servers"]["acme"]
        for i in range(2):
            assert (await client.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": f"hi {i}"})).status_code == 302
        resp = await client.post(f"/mcp/servers/{server.pk}/tools/echo/", {"arg-text": "one more"})
        assert resp.status_code == 200 and "started too many operations in the last minute" in resp.content.decode()
        await operations.wait_idle()
        assert await Operation.objects.acount() == 2
        settings.MRTRWEB = {"BINDING_STORE": "cache"}
        await McpServer.objects.filter(pk=server.pk).aupdate(enabled=False)  # a bulk disable (no signal)
        with pytest.raises(operations.OperationRefused) as refused:
            await operations.start_operation(user=seeded["users"]["alice"], server=server, method="tools/call",
                                             name="echo", params={"name": "echo", "arguments": {"text": "x"}})
        assert refused.value.code == "denied"
        assert await Operation.objects.acount() == 2
        assert seeded["mcp"].calls[("echo", False)] == 2
    finally:
        await sync_to_async(gates.reset_gate)()
