"""Secrets at rest (issue 13, item 1): sealed with MultiFernet under ``MRTRWEB["SECRET_KEYS"]``,
rotated with ``manage.py mrtr_rotate_secrets``, refused as configuration when a key is not a
Fernet key (check ``mrtrweb.E022``), and never in the clear anywhere the product writes: a dump of
every row and column of the database, the logs of a flow (every logger at DEBUG), the audit rows,
the history pages and exports (digests only).

The flows run against the real protected loopback MCP server of :mod:`tests.protected_mcp` (the
demo server behind a bearer check), once in tenant-credential mode and once OAuth per user with
a **seeded** connection (the tokens a Connect would store; see test_auth_binding.py), and a seeded
client registration and started flow (the rows a DCR and a Connect write), so that every sealed
column holds something.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import logging
import secrets
import time

import pytest
from django.core.management import CommandError
from asgiref.sync import sync_to_async
from cryptography.fernet import Fernet
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from mrtrweb import operations
from mrtrweb.authz import crypto, identity
from mrtrweb.authz.models import OAuthClientRegistration, OAuthConnection, PendingAuthorization
from mrtrweb.models import AuditEvent, LegacyAnswer, LiveBinding, McpServer, Operation, Tenant
from tests.authz.binding import CLIENT_ID, ISSUER, accept_deploy, card_waiting, seed_connection
from tests.sockets import csrf_client
from tests.protected_mcp import token_digest

KEY_A, KEY_B, KEY_C = (Fernet.generate_key().decode() for _ in range(3))


def _keys(settings, *keys: str) -> None:
    settings.MRTRWEB = dict(getattr(settings, "MRTRWEB", {}) or {}, SECRET_KEYS=list(keys))


# ------------------------------------------------------------------------------------ seal / rotate
def test_seal_opens_with_any_key_and_reseal_moves_it_to_the_first(settings):
    value = {"access_token": "tok-" + secrets.token_hex(8), "refresh_token": "ref-" + secrets.token_hex(8)}
    _keys(settings, KEY_A)
    sealed_a = crypto.seal(value)
    assert value["access_token"] not in sealed_a and crypto.unseal(sealed_a) == value
    _keys(settings, KEY_B, KEY_A)  # a new key first, the old one kept
    assert crypto.unseal(sealed_a) == value
    sealed_b = crypto.reseal(sealed_a)
    assert sealed_b != sealed_a and crypto.unseal(sealed_b) == value
    _keys(settings, KEY_B)  # the old key dropped: only what was resealed opens
    assert crypto.unseal(sealed_b) == value
    with pytest.raises(crypto.SecretUnreadable):
        crypto.unseal(sealed_a)
    with pytest.raises(crypto.SecretUnreadable):
        crypto.reseal(sealed_a)
    _keys(settings, KEY_A)
    with pytest.raises(crypto.SecretUnreadable):
        crypto.unseal(sealed_b)
    assert crypto.seal(None) == "" and crypto.unseal("") is None and crypto.reseal("") == ""
    with pytest.raises(crypto.SecretUnreadable):
        crypto.unseal(sealed_a[:-4] + "AAAA")  # tampered


def test_a_secret_digest_tells_a_change_but_not_the_secret(settings):
    a, b = crypto.secret_digest({"bearer": "weak"}), crypto.secret_digest({"bearer": "weak2"})
    assert a != b and a.startswith("hmac-sha256:") and "weak" not in a
    assert a == crypto.secret_digest({"bearer": "weak"}) and crypto.secret_digest(None) == ""
    import hashlib

    assert hashlib.sha256(b'{"bearer":"weak"}').hexdigest() not in a  # keyed, not a bare hash


@pytest.mark.parametrize("value, ok", [
    (None, True), ([KEY_A], True), ([KEY_B, KEY_A], True),
    ([], False), ("not-a-list", False), (["not a fernet key"], False), ([KEY_A, "x" * 44], False),
    ([KEY_A[:-2]], False),
])
def test_the_system_check_refuses_keys_that_are_not_fernet_keys(settings, value, ok):
    settings.MRTRWEB = dict(getattr(settings, "MRTRWEB", {}) or {}, SECRET_KEYS=value)
    messages = [m for m in run_checks() if m.id == "mrtrweb.E022"]
    assert (not messages) == ok, messages
    if not ok:
        assert "Fernet" in messages[0].msg and KEY_A not in messages[0].msg
        with pytest.raises(ImproperlyConfigured):
            crypto.keys()


def test_a_key_listed_twice_is_a_warning(settings):
    _keys(settings, KEY_A, KEY_A)
    assert "mrtrweb.W015" in {m.id for m in run_checks()}
    _keys(settings, KEY_B, KEY_A)
    assert "mrtrweb.W015" not in {m.id for m in run_checks()}


def _seed_sealed_rows() -> dict[str, str]:
    """One row of every sealed kind (sealed with the keys configured now); returns the plaintexts."""
    from django.contrib.auth import get_user_model

    plain = {k: f"{k}-{secrets.token_hex(8)}" for k in ("tenant_bearer", "client_secret", "reg_secret",
                                                         "access", "refresh", "verifier")}
    tenant = Tenant.objects.create(name="Rot", slug="rot")
    user = get_user_model().objects.create(username="rot-user")
    server = McpServer(tenant=tenant, name="S1", url="https://mcp.example.test/mcp", auth_mode="tenant")
    crypto.set_server_secret(server, {"bearer": plain["tenant_bearer"]})
    server.save()
    oauth = McpServer(tenant=tenant, name="S2", url="https://mcp2.example.test/mcp", auth_mode="oauth_user",
                      oauth_client_id="pre-registered")
    crypto.set_server_secret(oauth, {"client_secret": plain["client_secret"]})
    oauth.save()
    McpServer.objects.create(tenant=tenant, name="S3", url="https://mcp3.example.test/mcp")  # no secret
    OAuthClientRegistration.objects.create(server=oauth, issuer=ISSUER, how="dcr", client_id="dcr-1",
                                           client_info_sealed=crypto.seal({"client_id": "dcr-1",
                                                                           "client_secret": plain["reg_secret"]}))
    OAuthConnection.objects.create(tenant=tenant, user=user, server=oauth, issuer=ISSUER, client_id="dcr-1",
                                   family="f1", tokens_sealed=crypto.seal({"access_token": plain["access"],
                                                                           "refresh_token": plain["refresh"]}))
    PendingAuthorization.objects.create(state_digest="sd-1", tenant=tenant, user=user, server=oauth,
                                        session_digest="ss", authorization_origin=ISSUER,
                                        flow_sealed=crypto.seal({"code_verifier": plain["verifier"]}),
                                        expires_at=timezone.now() + datetime.timedelta(minutes=5))
    # issue 14: a live binding of the database store and a legacy answer being handed over
    from types import SimpleNamespace
    import uuid

    from mrtrweb.runtime import handover
    from mrtrweb.bindings.database import DatabaseBindingStore

    plain.update(state=f"state-{secrets.token_hex(8)}", answer=f"answer-{secrets.token_hex(8)}")
    DatabaseBindingStore().save(str(tenant.pk), "op-rot", {"tenant": str(tenant.pk), "round": {"state": plain["state"]}},
                                600)
    handover.put_answer(SimpleNamespace(id=uuid.uuid4(), tenant_id=tenant.pk), 1,
                        {"retry_id": "r", "response": {"action": "accept", "content": {"v": plain["answer"]}}})
    return plain


def _sealed_values() -> list[str]:
    return ([s.auth_secret_sealed for s in McpServer.objects.order_by("pk")]
            + list(OAuthClientRegistration.objects.values_list("client_info_sealed", flat=True))
            + list(OAuthConnection.objects.values_list("tokens_sealed", flat=True))
            + list(PendingAuthorization.objects.values_list("flow_sealed", flat=True))
            + list(LiveBinding.objects.values_list("record", flat=True))
            + list(LegacyAnswer.objects.values_list("payload", flat=True)))


def _rotate(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("mrtr_rotate_secrets", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_rotate_secrets_reseals_every_sealed_field_with_the_first_key(settings):
    _keys(settings, KEY_A)
    plain = _seed_sealed_rows()
    before = _sealed_values()
    digests = list(McpServer.objects.order_by("pk").values_list("auth_secret_digest", flat=True))
    _keys(settings, KEY_B, KEY_A)
    out, err = _rotate("--dry-run")
    assert _sealed_values() == before and "dry run" in out
    out, err = _rotate()
    assert "McpServer.auth_secret_sealed: 2 resealed, 1 empty, 0 unreadable (0 dropped)" in out
    assert "OAuthClientRegistration.client_info_sealed: 1 resealed" in out
    assert "OAuthConnection.tokens_sealed: 1 resealed" in out
    assert "PendingAuthorization.flow_sealed: 1 resealed" in out
    assert "LiveBinding.record: 1 resealed" in out and "LegacyAnswer.payload: 1 resealed" in out
    assert "total: 7 resealed, 1 empty, 0 unreadable" in out and not err
    for value in plain.values():
        assert value not in out + err
    _keys(settings, KEY_B)  # the old key can go now
    opened = [crypto.unseal(v) for v in _sealed_values() if v]
    assert len(opened) == 7
    assert LiveBinding.objects.get().record != before[5] and LegacyAnswer.objects.get().payload != before[6]
    # the live binding still reads (a rotation ends no round), the handed-over answer still opens
    from mrtrweb.bindings.database import DatabaseBindingStore

    binding = LiveBinding.objects.get()
    assert DatabaseBindingStore().load(binding.tenant, "op-rot")["round"] == {"state": plain["state"]}
    assert crypto.unseal(LegacyAnswer.objects.get().payload)["a"]["response"]["content"] == {"v": plain["answer"]}
    assert OAuthConnection.objects.get().tokens_sealed != before[4]
    assert crypto.unseal(OAuthConnection.objects.get().tokens_sealed)["access_token"] == plain["access"]
    # the digests did not change: rotation is not a new secret (no round is denied by it)
    assert list(McpServer.objects.order_by("pk").values_list("auth_secret_digest", flat=True)) == digests


@pytest.mark.django_db
def test_unreadable_secrets_are_counted_and_left_or_dropped(settings):
    _keys(settings, KEY_C)  # a key nobody keeps
    _seed_sealed_rows()
    _keys(settings, KEY_B, KEY_A)
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"7 stored secret\(s\) could not be opened") as failed:
        call_command("mrtr_rotate_secrets", stdout=out)
    assert failed.value.returncode == 2  # a deploy script notices
    assert "total: 0 resealed, 1 empty, 7 unreadable (0 dropped)" in out.getvalue()
    assert OAuthConnection.objects.count() == 1 and PendingAuthorization.objects.count() == 1
    assert LiveBinding.objects.count() == 1 and LegacyAnswer.objects.count() == 1
    out, err = _rotate("--drop-unreadable")
    assert "total: 0 resealed, 1 empty, 7 unreadable (7 dropped)" in out and not err
    assert not OAuthConnection.objects.exists() and not PendingAuthorization.objects.exists()
    assert not LiveBinding.objects.exists() and not LegacyAnswer.objects.exists()
    assert not OAuthClientRegistration.objects.exists()
    # servers stay; their secrets (and digests) are cleared for an admin to enter again
    assert McpServer.objects.count() == 3
    assert set(McpServer.objects.values_list("auth_secret_sealed", "auth_secret_digest")) == {("", "")}


@pytest.mark.django_db
def test_rotate_refuses_bad_keys(settings):
    settings.MRTRWEB = dict(getattr(settings, "MRTRWEB", {}) or {}, SECRET_KEYS=["nope"])
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not a Fernet key"):
        _rotate()


# ------------------------------------------------------------------------------ nothing in the clear
def _dump(tables=None) -> str:
    """Every row, every column, of every table of the database (or of ``tables``), as text."""
    parts = []
    with connection.cursor() as cursor:
        for table in tables or connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            for row in cursor.fetchall():
                parts.append(" ".join(str(v) for v in row))
    return "\n".join(parts)


async def _run_flows(world) -> dict[str, str]:
    """A tenant-credential operation and an OAuth-per-user operation, each answered, through the
    protected server; returns the plaintext secrets involved."""
    server, alice, check = world["server"], world["users"]["alice"], world["check"]
    plain = {"tenant": "tenant-bearer-" + secrets.token_hex(8), "access": "alice-access-" + secrets.token_hex(8)}
    server.auth_mode = McpServer.AuthMode.TENANT
    crypto.set_server_secret(server, {"bearer": plain["tenant"]})
    await server.asave()
    check.accepted.update({plain["tenant"], plain["access"]})
    client = await csrf_client(alice)
    op = await card_waiting(client, server)
    assert (await accept_deploy(client, op)).status_code == 302
    server = await McpServer.objects.aget(pk=server.pk)
    server.auth_mode = McpServer.AuthMode.OAUTH_USER
    crypto.set_server_secret(server, None)
    await server.asave()
    conn = await sync_to_async(seed_connection)(alice, server, plain["access"])
    plain["refresh"] = f"refresh-{plain['access']}"
    op2 = await card_waiting(client, server)
    assert (await accept_deploy(client, op2)).status_code == 302
    for o in (op, op2):
        row = await Operation.objects.aget(pk=o.pk)
        assert row.status == Operation.Status.COMPLETED, (row.error_code, row.error_message)
    assert {d for d, *_ in check.seen} >= {token_digest(plain["tenant"]), token_digest(plain["access"])}
    world["ops"], world["conn"], world["client"] = (op, op2), conn, client
    return plain


async def test_no_plaintext_secret_in_the_database_the_logs_or_the_audit_exports(world, caplog):
    caplog.set_level(logging.DEBUG)
    plain = await _run_flows(world)
    # the database: every sealed column opens to them, no column holds them in the clear
    dump = await sync_to_async(_dump)()
    for value in plain.values():
        assert value not in dump, value
    conn = await OAuthConnection.objects.aget(pk=world["conn"].pk)
    assert crypto.unseal(conn.tokens_sealed)["access_token"] == plain["access"]  # the dump did hold them, sealed
    assert conn.tokens_sealed in dump
    # the logs of both flows, every logger at DEBUG
    assert caplog.records
    for value in plain.values():
        assert value not in caplog.text, value
    assert "Bearer " not in caplog.text
    # the audit rows: mode and digests only
    tenant_op, oauth_op = world["ops"]
    rows = [e async for e in AuditEvent.objects.filter(operation_id__in=[tenant_op.id, oauth_op.id])]
    assert {(e.operation_id, e.auth_mode) for e in rows} == {(tenant_op.id, "tenant"), (oauth_op.id, "oauth_user")}
    assert {e.auth_digest for e in rows if e.operation_id == oauth_op.id} == {identity._sha(ISSUER, CLIENT_ID)}
    assert {e.auth_digest for e in rows if e.operation_id == tenant_op.id} == {""}
    assert all(e.auth_identity.startswith("hmac-sha256:") for e in rows)
    # the history pages and the exports
    client = world["client"]
    blobs = []
    for fmt in ("csv", "json"):
        resp = await client.get("/mcp/tenants/acme/history/", {"format": fmt})
        assert resp.status_code == 200
        blobs.append(b"".join([c async for c in resp.streaming_content]).decode())
    blobs.append((await client.get("/mcp/tenants/acme/history/")).content.decode())
    for op in world["ops"]:
        page = (await client.get(f"/mcp/history/operations/{op.id}/")).content.decode()
        assert "authorization" in page and op.auth_identity in page  # shown as a digest
        blobs.append(page)
    exported = json.loads(blobs[1])
    assert {e["auth_mode"] for e in exported if e["operation_id"] in {str(o.id) for o in world["ops"]}} == \
        {"tenant", "oauth_user"}
    for blob in blobs:
        for value in plain.values():
            assert value not in blob, value
        assert crypto.unseal(conn.tokens_sealed) is not None and conn.tokens_sealed not in blob
    await operations.wait_idle()


# ------------------------------------------------- a real Connect, a round, a refresh between rounds
from tests.oauth_sdk_as import oauth_pair_fixture  # noqa: E402,F401 - the fixture oauth_pair


async def test_a_real_connect_and_refresh_between_rounds_leave_no_secret_anywhere(oauth_pair, caplog):
    """alice connects through the real flow (DCR, PKCE, code, tokens), a round waits, her access
    token expires, her answer's retry refreshes it (same family: accepted) and completes. Then no
    access or refresh token, code, state, PKCE verifier or client secret is in the database dump,
    the logs (every logger at DEBUG), the audit rows, the history pages or the exports."""
    from mrtrweb.authz import service
    from mrtrweb.mcp.auth import follow_authorization_url

    caplog.set_level(logging.DEBUG)
    o, pair = oauth_pair, oauth_pair["pair"]
    server, alice = o["server"], o["users"]["alice"]
    redirect = "http://127.0.0.1:9/mcp/oauth/callback/"
    start = await service.start_connect(user=alice, tenant=server.tenant, server=server, session_key="sess-1",
                                        return_to="/mcp/", redirect_uri=redirect)
    pending = await PendingAuthorization.objects.aget(pk=start.pending_id)
    verifier = crypto.unseal(pending.flow_sealed)["code_verifier"]
    query = await follow_authorization_url(start.authorization_url, redirect_uri=redirect,
                                           policy=service.outbound_policy())
    conn = await service.finish_connect(user=alice, session_key="sess-1", query=query)
    first_token = next(iter(pair.provider.access))
    client = await csrf_client(alice)
    op = await card_waiting(client, server)
    assert pair.gate.seen_tokens[-1] == first_token
    # the access token is about to expire: the retry refreshes it without the person
    await OAuthConnection.objects.filter(pk=conn.pk).aupdate(expires_at=timezone.now() + datetime.timedelta(seconds=5))
    resp = await accept_deploy(client, op)
    assert resp.status_code == 302
    row = await Operation.objects.aget(pk=op.pk)
    assert row.status == Operation.Status.COMPLETED, (row.error_code, row.error_message)
    assert pair.provider.refresh_requests == 1 and pair.gate.seen_tokens[-1] != first_token
    assert (await OAuthConnection.objects.aget(pk=conn.pk)).family == conn.family
    assert {e.auth_identity async for e in AuditEvent.objects.filter(operation_id=op.id)} == {op.auth_identity}

    secrets_seen = {"code": query["code"], "state": query["state"], "verifier": verifier}
    secrets_seen.update({f"access{i}": t for i, t in enumerate(pair.provider.access)})
    secrets_seen.update({f"refresh{i}": t for i, t in enumerate(pair.provider.refresh)})
    secrets_seen.update({f"client{i}": c.client_secret for i, c in enumerate(pair.provider.clients.values())
                         if c.client_secret})
    assert len(secrets_seen) >= 6  # two access tokens, refresh tokens, the code, state and verifier
    dump = await sync_to_async(_dump)()
    blobs = {"database": dump, "logs": caplog.text}
    for fmt in ("csv", "json"):
        resp = await client.get("/mcp/tenants/acme/history/", {"format": fmt})
        blobs[fmt] = b"".join([c async for c in resp.streaming_content]).decode()
    blobs["timeline"] = (await client.get(f"/mcp/history/operations/{op.id}/")).content.decode()
    for where, blob in blobs.items():
        for what, value in secrets_seen.items():
            assert value not in blob, (what, where)
    assert (await OAuthConnection.objects.aget(pk=conn.pk)).tokens_sealed in dump  # the dump is complete


def test_moving_from_the_derived_key_to_explicit_keys_loses_nothing(settings, db):
    """A deployment that started on the embedded default (no ``SECRET_KEYS``: one key derived from
    ``SECRET_KEY``) moves to explicit keys: ``[new, "derived"]`` opens the old secrets, the rotate
    command re-seals them with ``new``, and ``[new]`` alone then opens them."""
    from io import StringIO

    from cryptography.fernet import Fernet
    from django.core.management import call_command

    from mrtrweb.authz import crypto
    from mrtrweb.models import McpServer, Tenant

    settings.MRTRWEB = {}
    tenant = Tenant.objects.create(name="Derived", slug="derived")
    server = McpServer(tenant=tenant, name="Old", url="https://mcp.example/mcp", auth_mode="tenant")
    crypto.set_server_secret(server, {"bearer": "bearer-sealed-under-the-derived-key"})
    server.save()
    new = Fernet.generate_key().decode()
    settings.MRTRWEB = {"SECRET_KEYS": [new]}
    with pytest.raises(crypto.SecretUnreadable):
        crypto.unseal(McpServer.objects.get(pk=server.pk).auth_secret_sealed)
    settings.MRTRWEB = {"SECRET_KEYS": [new, crypto.DERIVED]}
    out = StringIO()
    call_command("mrtr_rotate_secrets", stdout=out)
    assert "0 unreadable" in out.getvalue()
    settings.MRTRWEB = {"SECRET_KEYS": [new]}
    assert crypto.unseal(McpServer.objects.get(pk=server.pk).auth_secret_sealed) == {
        "bearer": "bearer-sealed-under-the-derived-key"}


# ------------------------------------------------------------ issue 14: the database binding store
from tests.legacy_rounds import DEPLOY_OK  # noqa: E402

#: the tables the database binding store and the legacy hand-over write (issue 14)
BINDING_TABLES = ("mrtrweb_livebinding", "mrtrweb_bindingindexentry", "mrtrweb_bindingclaim", "mrtrweb_legacyanswer")


async def test_live_rounds_and_handed_over_answers_are_sealed_at_rest(legacy, monkeypatch):
    """A real two-round operation and a real legacy round, looked at while they wait: the live
    binding (arguments, requestState), its index and claims, and a legacy answer being handed
    over hold nothing readable; the requestState and the answers are in no column of the
    database in the clear (the audit rows hold digests)."""
    from django.test import AsyncClient

    from mrtrweb.models import BindingClaim, BindingIndexEntry
    from tests.answering import post_answer

    alice = legacy["users"]["alice"]
    client = AsyncClient()
    await client.aforce_login(alice)
    demo = await McpServer.objects.aget(tenant__slug="acme", name="Demo server")
    destination = f"Dest-{secrets.token_hex(6)}"
    start = f"20{secrets.randbelow(60) + 30}-0{secrets.randbelow(9) + 1}-1{secrets.randbelow(9)}"  # a date
    resp = await client.post(f"/mcp/servers/{demo.pk}/tools/book_trip/", {"arg-destination": destination})
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 1
    # round 1 waits: the binding holds the arguments, sealed
    binding = await LiveBinding.objects.aget(operation_id=str(op.id))
    assert crypto.unseal(binding.record)["r"]["params"]["arguments"] == {"destination": destination}
    at_rest = await sync_to_async(_dump)(BINDING_TABLES)
    assert binding.record in at_rest and destination not in at_rest
    assert await BindingIndexEntry.objects.aexists() and await BindingClaim.objects.aexists()

    await client.get(f"/mcp/operations/{op.id}/")
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/",
                               {"action": "accept", "round": "1", "in-dates-start": start, "in-dates-nights": "7"})
    assert answer.status_code == 302
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == Operation.Status.AWAITING_INPUT and op.rounds == 2, (op.error_code, op.error_message)
    # round 2 waits with the requestState the server minted from round 1's answer
    record = crypto.unseal((await LiveBinding.objects.aget(operation_id=str(op.id))).record)["r"]
    state = record["round"]["state"]
    assert isinstance(state, str) and len(state) > 8
    everything = await sync_to_async(_dump)()
    assert state not in everything and start not in everything  # nowhere in the clear
    assert destination not in await sync_to_async(_dump)(BINDING_TABLES)

    # a legacy round: the answer is handed over as a LegacyAnswer row (the holder waits meanwhile)
    take = operations.legacy._take_answer
    monkeypatch.setattr(operations.legacy, "_take_answer", lambda op_, n: None)
    server = legacy["servers"]["acme"]
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/legacy_deploy/", {"arg-env": "prod"})
    held = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    deadline = time.monotonic() + 15
    while (await Operation.objects.aget(pk=held.pk)).status != Operation.Status.AWAITING_INPUT:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    await client.get(f"/mcp/operations/{held.id}/")
    ticket = f"CHG-{secrets.token_hex(5)}"
    answer = await post_answer(client, f"/mcp/operations/{held.id}/answer/",
                               dict(DEPLOY_OK, action="accept", round="1", **{"in-elicitation-ticket": ticket}))
    assert answer.status_code == 302
    row = await LegacyAnswer.objects.aget(operation_id=held.id)
    assert crypto.unseal(row.payload)["a"]["response"]["content"]["ticket"] == ticket
    everything = await sync_to_async(_dump)()
    assert row.payload in everything and ticket not in everything
    monkeypatch.setattr(operations.legacy, "_take_answer", take)
    deadline = time.monotonic() + 15
    while (await Operation.objects.aget(pk=held.pk)).status not in Operation.TERMINAL:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert not await LegacyAnswer.objects.aexists()
    await operations.stop_operation(op)
    await operations.wait_idle()
    assert not await LiveBinding.objects.filter(operation_id=str(op.id)).aexists()  # closed with the operation


def test_the_derived_key_is_derived_once_per_secret_key(settings, monkeypatch):
    """Without ``SECRET_KEYS`` the key is derived from ``SECRET_KEY`` once per value (issue 30:
    every seal and unseal of a round derived it again), and a changed ``SECRET_KEY`` is a changed
    key: what the old one sealed no longer opens."""
    settings.MRTRWEB = {}
    crypto._derived_from.cache_clear()
    derived = []
    real_hkdf = crypto.HKDF
    monkeypatch.setattr(crypto, "HKDF", lambda **kw: (derived.append(1), real_hkdf(**kw))[1])
    token = crypto.seal({"bearer": "b"})
    assert crypto.unseal(token) == {"bearer": "b"} and crypto.unseal(crypto.seal(1)) == 1
    assert derived == [1]
    settings.SECRET_KEY = settings.SECRET_KEY + "-rotated"
    with pytest.raises(crypto.SecretUnreadable):
        crypto.unseal(token)
    assert derived == [1, 1]
