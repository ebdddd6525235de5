"""The claims of the audit events an operation has at most once (``mrtrweb.models.AuditOnce``, issue
30): migration 0030 backfills them from the events written before they existed, keyed as the
append keys them, and changes no audit row."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from mrtrweb.audit import chain
from mrtrweb.audit import events as audit
from mrtrweb.models import AuditEvent, AuditOnce
from tests.audit.operations import DIGESTS, seeded_operation

pytestmark = [pytest.mark.django_db(transaction=True)]




def _backfill() -> None:
    migration = importlib.import_module("mrtrweb.migrations.0030_audit_once").Migration
    (statements,) = [op.sql for op in migration.operations if hasattr(op, "sql")]
    with connection.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def test_the_migration_backfills_one_claim_per_receipt_and_expired_round_as_the_append_keys_them(seeded):
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    shown = dict(round_number=1, display_digest="sha256:" + "d" * 64, **DIGESTS)
    for digest in "de":  # two displays of round 1: two receipts
        audit.record(op, "shown", **dict(shown, display_digest="sha256:" + digest * 64))
    audit.record(op, "expired", round_number=1)
    audit.record(op, "rejected", code="x", round_number=1, **DIGESTS)  # no claim: not a once-event
    expected = {("shown", chain.once_key(dict(shown, display_digest="sha256:" + c * 64),
                                         ("round_number", "display_digest"))) for c in "de"}
    expected.add(("expired", chain.once_key({"round_number": 1}, ("round_number",))))
    AuditOnce.objects.all().delete()  # as before the claims existed (the claims are not audit rows)
    events = list(AuditEvent.objects.filter(operation_id=op.id).values_list("pk", "hash"))
    _backfill()
    _backfill()  # again: nothing more
    claims = set(AuditOnce.objects.filter(operation_id=op.id).values_list("event", "key"))
    assert claims == expected
    assert AuditOnce.objects.filter(operation_id=op.id, tenant_id=op.tenant_id).count() == 3
    assert list(AuditEvent.objects.filter(operation_id=op.id).values_list("pk", "hash")) == events
    # a receipt appended again after the backfill finds its claim: nothing written, the first returned
    again = audit.record(op, "shown", once=("round_number", "display_digest"), **shown)
    assert AuditEvent.objects.filter(operation_id=op.id, event="shown").count() == 2
    assert again.display_digest == shown["display_digest"]
    assert audit.verify_chain(op.tenant_id).broken is None


def test_a_claim_without_its_event_fails_closed(seeded):
    """PostgreSQL: a claim whose event is gone (purged) makes the append write nothing and fail
    (the caller denies), never loop nor write a second event."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite's append checks the events under the database's one write lock")
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    kw = dict(round_number=1, display_digest="sha256:" + "d" * 64, **DIGESTS)
    AuditOnce.objects.create(tenant_id=op.tenant_id, operation_id=op.id, event="shown",
                             key=chain.once_key(kw, ("round_number", "display_digest")))
    with pytest.raises(audit.AuditUnavailable):
        audit.record(op, "shown", once=("round_number", "display_digest"), **kw)
    assert not AuditEvent.objects.filter(operation_id=op.id, event="shown").exists()


def test_with_server_side_binding_a_receipt_is_claimed_and_written_once(seeded, monkeypatch):
    """PostgreSQL with server-side binding (the append's lock, check and statement sent one after
    the other, in a transaction): the claim is written with the receipt, its parameters typed by
    the driver, and a repeat writes nothing."""
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL option")
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    kw = dict(round_number=1, display_digest="sha256:" + "d" * 64, once=("round_number", "display_digest"), **DIGESTS)
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "server_side_binding", True)
    connection.close()
    try:
        first = audit.record(op, "shown", **kw)
        again = audit.record(op, "shown", **kw)
    finally:
        connection.close()  # the next test's connection binds client-side again
    assert again.pk == first.pk
    assert AuditEvent.objects.filter(operation_id=op.id, event="shown").count() == 1
    assert AuditOnce.objects.filter(operation_id=op.id, event="shown").count() == 1
    assert audit.verify_chain(op.tenant_id).broken is None
