"""How many SQL statements one chained audit append sends (issue 16: the chain head is locked for
as few round trips as possible). A count, not a time; the same file runs on SQLite (default test
settings) and on PostgreSQL (``DJANGO_SETTINGS_MODULE=tests.services_settings``). ``BEGIN`` and
``COMMIT`` are sent by the driver, not through ``execute``, and are not counted here."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from mrtrweb import audit
from mrtrweb.models import AuditEvent, Operation

pytestmark = [pytest.mark.django_db(transaction=True)]

DIGESTS = {"state_digest": "sha256:" + "a" * 64, "schema_digests": {"confirm": "sha256:" + "b" * 64}}


def _operation(seeded) -> Operation:
    server = seeded["servers"]["acme"]
    rid = f"mrtr-{uuid.uuid4()}"
    op = Operation.objects.create(tenant=server.tenant, user=seeded["users"]["alice"], server=server,
                                  method="tools/call", name="deploy", params={"name": "deploy", "arguments": {}},
                                  request_id=rid, latest_request_id=rid)
    return Operation.objects.select_related("server", "tenant").get(pk=op.pk)


def _statements(fn) -> list[str]:
    seen: list[str] = []

    def spy(execute, sql, params, many, context):
        if not str(sql).startswith("BEGIN"):  # SQLite's BEGIN IMMEDIATE goes through execute
            seen.append(" ".join(str(sql).split()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        fn()
    return seen


def test_one_append_read_back_sends_three_statements_on_postgresql_seven_on_sqlite(seeded):
    """A warm append (the head row exists) with the round's digests given and ``read_back``:
    PostgreSQL: the lock (with its ``lock_timeout``), the INSERT + head move, the read-back;
    SQLite: busy timeout, the write-first head insert, the head, the INSERT, the move, the busy
    timeout restored, the read-back."""
    op = _operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    seen = _statements(lambda: audit.record(op, "submitted", round_number=1, read_back=True, **DIGESTS))
    if connection.vendor == "postgresql":
        assert len(seen) == 3, seen
        assert seen[0].startswith("SET LOCAL lock_timeout = ") and seen[0].endswith("FOR UPDATE"), seen[0]
        assert seen[1].startswith("WITH ev AS (INSERT INTO"), seen[1]
        assert seen[2].startswith("SELECT") and "FOR UPDATE" not in seen[2], seen[2]
    else:
        assert connection.vendor == "sqlite"
        assert len(seen) == 7, seen
        assert seen[0].startswith("PRAGMA busy_timeout") and seen[1].startswith("INSERT OR IGNORE"), seen
    rows = list(AuditEvent.objects.filter(operation_id=op.id).order_by("sequence"))
    assert [(r.event, r.sequence) for r in rows] == [("received", 1), ("submitted", 2)]
    assert rows[1].prev_hash == rows[0].hash and rows[1].state_digest == DIGESTS["state_digest"]
    assert audit.verify_chain(op.tenant_id).broken is None


def test_without_the_digests_one_lookup_more_and_without_read_back_one_less(seeded):
    """A caller that does not pass the round's digests costs the lookup of its ``received`` event;
    without ``read_back`` there is no read-back."""
    op = _operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    base = len(_statements(lambda: audit.record(op, "shown", round_number=1, **DIGESTS)))
    looked_up = _statements(lambda: audit.record(op, "shown", round_number=1))
    assert len(looked_up) == base + 1, looked_up
    assert base == (2 if connection.vendor == "postgresql" else 6)
    shown = AuditEvent.objects.filter(operation_id=op.id, event="shown").order_by("sequence").last()
    assert shown.schema_digests == DIGESTS["schema_digests"]  # found by the lookup


def test_the_first_append_of_a_tenant_creates_its_head(seeded):
    """No head row yet: the append creates it at the genesis and links the first event to it."""
    op = _operation(seeded)
    row = audit.record(op, "received", round_number=1, read_back=True, **DIGESTS)
    assert (row.sequence, row.prev_hash) == (1, audit.GENESIS)
    assert row.pk == AuditEvent.objects.get(operation_id=op.id).pk
    assert audit.verify_chain(op.tenant_id).events == 1
