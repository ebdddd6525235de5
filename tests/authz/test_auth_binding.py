"""The MRTR binding carries the authorization identity (issue 13, item 6).

A round's retry goes out only with the credentials its original request went out with. Against a
real protected MCP server on loopback (the demo ``MCPServer`` behind a bearer-checking ASGI
middleware, :mod:`tests.protected_mcp`, which counts every request and records the digest of the
bearer each carried), through the real views, gate, binding cache and audit trail:

* alice connected, a round waits, alice disconnects (``service.disconnect``) -> her answer is
  denied ``authorization_changed``, audited, and no retry reaches the server;
* alice disconnects while the call is in flight -> the round that comes back is denied at once;
* alice "reconnects as another account" (a new token family) -> denied;
* alice's token is refreshed between the round and the answer (same family) -> the answer goes
  out, with the **new** token;
* a tenant credential replaced between the round and the answer -> denied
  ``authorization_changed`` (not only ``server_config_changed``); the next operation goes out
  with the new credential;
* alice's and carol's operations each go out with their own token only; carol, not connected,
  sends none of alice's.

**Seeded** (no authorization server here; the flow itself is tested in test_auth_flow.py and the
browser tests): the ``OAuthConnection`` rows -- what a Connect or a refresh writes (issuer, client
id, family, sealed tokens) -- are written directly, and the server is told which tokens are valid.
Everything else (bearer auth reading the stored tokens, the pool, the deny) is the product's code.
"""

from __future__ import annotations

import asyncio
import datetime
import secrets

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from mrtrweb.audit import events as audit
from mrtrweb import operations
from mrtrweb.authz import crypto, identity, service
from mrtrweb.authz.models import OAuthConnection
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.answering import DEPLOY_OK, post_answer
from tests.authz.binding import CLIENT_ID, ISSUER, accept_deploy, card_waiting, seed_connection, start_deploy
from tests.sockets import csrf_client
from tests.protected_mcp import token_digest

pytestmark = [pytest.mark.django_db(transaction=True)]

async def _oauth(server: McpServer) -> McpServer:
    server.auth_mode = McpServer.AuthMode.OAUTH_USER
    await server.asave()
    return server


async def _denied_authorization_changed(client: AsyncClient, op: Operation, resp, handle) -> None:
    """The answer was refused (409, the message shown), the operation ended denied with reason
    ``authorization_changed`` in the audit, nothing was submitted and no retry reached the server."""
    assert resp.status_code == 409, resp.status_code
    assert "The authorization this operation started with changed" in resp.content.decode()
    row = await Operation.objects.aget(pk=op.pk)
    assert row.status == Operation.Status.DENIED and row.error_code == "denied"
    denied = [e async for e in AuditEvent.objects.filter(operation_id=op.id, event="denied")]
    assert [e.reason for e in denied] == [operations.AUTHORIZATION_CHANGED]
    assert not await AuditEvent.objects.filter(operation_id=op.id, event="submitted").aexists()
    assert handle.calls[("deploy", True)] == 0  # no retry was POSTed at all (counted before the bearer check)
    # a second try is refused too, and still sends nothing
    again = await post_answer(client, f"/mcp/operations/{op.id}/answer/", dict(DEPLOY_OK, action="accept", round="1"))
    await operations.wait_idle()
    assert again.status_code == 409 and handle.calls[("deploy", True)] == 0
    assert (await sync_to_async(audit.verify_chain)(op.tenant_id)).broken is None


async def test_disconnect_between_round_and_answer_denies_the_round(world):
    server, alice, check, handle = await _oauth(world["server"]), world["users"]["alice"], world["check"], world["handle"]
    await sync_to_async(seed_connection)(alice, server, "alice-token-1")
    check.accepted.add("alice-token-1")
    client = await csrf_client(alice)
    op = await card_waiting(client, server)
    assert check.tool_calls("deploy") == [(token_digest("alice-token-1"), False, True)]
    # what the binding recorded: mode, issuer+client digest, the keyed identity digest
    ident = await identity.identity_for(server=server, user=alice, tenant=server.tenant)
    assert ident.connected and op.auth_mode == "oauth_user"
    assert op.auth_digest == identity._sha(ISSUER, CLIENT_ID) and op.auth_identity.startswith("hmac-sha256:")
    received = await AuditEvent.objects.aget(operation_id=op.id, event="received")
    assert (received.auth_mode, received.auth_digest, received.auth_identity) == \
        (op.auth_mode, op.auth_digest, op.auth_identity)

    assert await service.disconnect(user=alice, tenant=server.tenant, server=server) is not None
    assert not await OAuthConnection.objects.filter(user=alice).aexists()
    resp = await accept_deploy(client, op)
    await _denied_authorization_changed(client, op, resp, handle)


async def test_disconnect_while_the_call_is_in_flight_denies_the_round_it_brings(world):
    server, alice, check, handle = await _oauth(world["server"]), world["users"]["alice"], world["check"], world["handle"]
    await sync_to_async(seed_connection)(alice, server, "alice-token-1")
    check.accepted.add("alice-token-1")
    client = await csrf_client(alice)
    op = await start_deploy(client, server, "wait_then_ask", seconds="1")
    for _ in range(200):  # until the call reached the server (it answers a second later)
        if check.tool_calls("wait_then_ask"):
            break
        await asyncio.sleep(0.02)
    assert check.tool_calls("wait_then_ask") == [(token_digest("alice-token-1"), False, True)]
    await service.disconnect(user=alice, tenant=server.tenant, server=server)
    await operations.wait_idle()
    row = await Operation.objects.aget(pk=op.pk)
    assert (row.status, row.error_code) == (Operation.Status.DENIED, "denied"), row.error_message
    events = [(e.event, e.reason) async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]
    assert events == [("received", ""), ("denied", operations.AUTHORIZATION_CHANGED)]
    received = await AuditEvent.objects.aget(operation_id=op.id, event="received")
    # the round's row says under what it arrived: the mode, no connection any more
    assert (received.auth_mode, received.auth_identity) == ("oauth_user", "")
    assert handle.calls[("wait_then_ask", True)] == 0
    # the page never offers an answer for it
    assert b'name="action" value="accept"' not in (await client.get(f"/mcp/operations/{op.id}/")).content


async def test_reconnect_as_another_token_family_denies_the_round(world):
    server, alice, check, handle = await _oauth(world["server"]), world["users"]["alice"], world["check"], world["handle"]
    await sync_to_async(seed_connection)(alice, server, "alice-token-1", family="family-one")
    check.accepted.update({"alice-token-1", "alice-other-account"})
    client = await csrf_client(alice)
    op = await card_waiting(client, server)
    # a new Connect (maybe another account at the same authorization server): a new family
    await sync_to_async(seed_connection)(alice, server, "alice-other-account", family="family-two")
    resp = await accept_deploy(client, op)
    await _denied_authorization_changed(client, op, resp, handle)
    assert {d for d, _, _ in check.tool_calls("deploy")} == {token_digest("alice-token-1")}


async def test_a_refresh_between_round_and_answer_is_fine_and_the_retry_carries_the_new_token(world):
    server, alice, check, handle = await _oauth(world["server"]), world["users"]["alice"], world["check"], world["handle"]
    conn = await sync_to_async(seed_connection)(alice, server, "alice-token-1")
    check.accepted.add("alice-token-1")
    client = await csrf_client(alice)
    op = await card_waiting(client, server)
    # a refresh: new access token, same family (what the token storage writes); the old one revoked
    await sync_to_async(seed_connection)(alice, server, "alice-token-2", family=conn.family)
    check.accepted.discard("alice-token-1")
    check.accepted.add("alice-token-2")
    resp = await accept_deploy(client, op)
    assert resp.status_code == 302, resp.content[:800]
    row = await Operation.objects.aget(pk=op.pk)
    assert row.status == Operation.Status.COMPLETED, (row.error_code, row.error_message)
    assert check.tool_calls("deploy") == [(token_digest("alice-token-1"), False, True),
                                          (token_digest("alice-token-2"), True, True)]
    assert handle.calls[("deploy", True)] == 1
    outcome = [(e.event, e.auth_identity) async for e in AuditEvent.objects.filter(operation_id=op.id)
               .order_by("sequence")]
    assert [e for e, _ in outcome] == ["received", "shown", "submitted", "completed"]
    assert {i for _, i in outcome} == {op.auth_identity}  # one identity across the refresh


async def test_tenant_credential_replaced_between_round_and_answer_denies_the_round(world):
    server, alice, check, handle = world["server"], world["users"]["alice"], world["check"], world["handle"]
    server.auth_mode = McpServer.AuthMode.TENANT
    crypto.set_server_secret(server, {"bearer": "tenant-secret-1"})
    await server.asave()
    check.accepted.update({"tenant-secret-1", "tenant-secret-2"})  # the server would take either
    client = await csrf_client(alice)
    op = await card_waiting(client, server)
    assert op.auth_mode == "tenant" and op.auth_digest == "" and op.auth_identity
    # an admin replaces the credential
    server = await McpServer.objects.aget(pk=server.pk)
    crypto.set_server_secret(server, {"bearer": "tenant-secret-2"})
    await server.asave()
    resp = await accept_deploy(client, op)
    await _denied_authorization_changed(client, op, resp, handle)
    assert {d for d, _, _ in check.tool_calls("deploy")} == {token_digest("tenant-secret-1")}
    # the next operation goes out with the new credential, not a pooled connection's old one
    op2 = await card_waiting(client, server)
    assert check.tool_calls("deploy")[-1] == (token_digest("tenant-secret-2"), False, True)
    resp = await accept_deploy(client, op2)
    assert resp.status_code == 302
    assert check.tool_calls("deploy")[-1] == (token_digest("tenant-secret-2"), True, True)


async def test_each_person_goes_out_with_their_own_token_only(world):
    server, check = await _oauth(world["server"]), world["check"]
    alice, carol = world["users"]["alice"], world["users"]["carol"]
    await sync_to_async(seed_connection)(alice, server, "alice-token-1")
    check.accepted.add("alice-token-1")
    alice_client, carol_client = await csrf_client(alice), await csrf_client(carol)
    # carol has no connection: her requests carry no bearer at all (certainly not alice's, pooled);
    # the call page's listing is refused (401) and no operation starts
    alice_op = await card_waiting(alice_client, server)
    before = len(check.seen)
    resp = await carol_client.post(f"/mcp/servers/{server.pk}/tools/deploy/", {"arg-env": "x", "arg-replicas": "1"})
    assert resp.status_code == 503 and not await Operation.objects.filter(user=carol).aexists()
    assert check.seen[before:] and {(d, ok) for d, _, _, _, ok in check.seen[before:]} == {("", False)}
    assert check.tool_calls("deploy") == [(token_digest("alice-token-1"), False, True)]
    # carol connects her own account; each answer's retry goes out with its owner's token
    await sync_to_async(seed_connection)(carol, server, "carol-token-1")
    check.accepted.add("carol-token-1")
    carol_op = await card_waiting(carol_client, server)
    assert (await accept_deploy(carol_client, carol_op)).status_code == 302
    assert (await accept_deploy(alice_client, alice_op)).status_code == 302
    calls = check.tool_calls("deploy")
    assert calls[-2:] == [(token_digest("carol-token-1"), True, True), (token_digest("alice-token-1"), True, True)]
    assert alice_op.auth_identity != carol_op.auth_identity
    for op in (alice_op, carol_op):
        assert (await Operation.objects.aget(pk=op.pk)).status == Operation.Status.COMPLETED


# ------------------------------------------------------------------------------ the audit chain
def _bare_operation(**auth: str) -> Operation:
    from django.contrib.auth import get_user_model

    from mrtrweb.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="chain", defaults={"name": "Chain"})
    user, _ = get_user_model().objects.get_or_create(username="chain-user")
    server, _ = McpServer.objects.get_or_create(tenant=tenant, name="S", defaults={"url": "https://mcp.example.test/"})
    return Operation.objects.create(tenant=tenant, user=user, server=server, method="tools/call", name="t",
                                    request_id="r1", latest_request_id="r1", **auth)


def test_old_rows_keep_their_hash_and_the_new_fields_are_chained():
    """A row without authorization fields (every row before issue 13) hashes exactly as before;
    a row with them is chained over them: editing one breaks the chain."""
    import hashlib
    import json

    from django.db import connection

    old = _bare_operation()
    row_old = audit.record(old, "failed", code="x")
    assert (row_old.auth_mode, row_old.auth_digest, row_old.auth_identity) == ("", "", "")
    values = {name: getattr(row_old, name) for name in audit.HASHED_FIELDS}
    values["created_at"] = row_old.created_at.isoformat()
    values["tenant_id"], values["operation_id"] = str(row_old.tenant_id), str(row_old.operation_id)
    legacy = hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                            .encode()).hexdigest()
    assert row_old.hash == legacy  # the formula of the rows written before these fields existed

    new = _bare_operation(auth_mode="oauth_user", auth_digest="sha256:" + "a" * 64,
                          auth_identity="hmac-sha256:" + "b" * 64)
    row_new = audit.record(new, "failed", code="x")
    assert (row_new.auth_mode, row_new.auth_identity) == ("oauth_user", "hmac-sha256:" + "b" * 64)
    changed = audit.record(new, "failed", code="y", auth={"auth_mode": "oauth_user", "auth_digest": "",
                                                          "auth_identity": ""})
    assert (changed.auth_digest, changed.auth_identity) == ("", "")
    assert audit.verify_chain(old.tenant_id).broken is None
    with connection.cursor() as cur:
        cur.execute("UPDATE mrtrweb_auditevent SET auth_identity = %s WHERE id = %s",
                    ["hmac-sha256:" + "c" * 64, row_new.pk])
    report = audit.verify_chain(old.tenant_id)
    assert report.broken and f"event {row_new.pk}" in report.broken
