"""How many SQL statements one chained audit append sends (issue 16: the chain head is locked for
as few round trips as possible). A count, not a time; the same file runs on SQLite (default test
settings) and on PostgreSQL (``DJANGO_SETTINGS_MODULE=tests.services_settings``). ``BEGIN`` and
``COMMIT`` are sent by the driver, not through ``execute``, and are not counted here."""

from __future__ import annotations


import pytest
from django.conf import settings
from django.db import connection

from mrtrweb.audit import events as audit
from mrtrweb.models import AuditEvent, Operation
from tests.audit.operations import DIGESTS, seeded_operation

pytestmark = [pytest.mark.django_db(transaction=True)]




def _statements(fn) -> list[str]:
    seen: list[str] = []

    def spy(execute, sql, params, many, context):
        if not str(sql).startswith("BEGIN"):  # SQLite's BEGIN IMMEDIATE goes through execute
            seen.append(" ".join(str(sql).split()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        fn()
    return seen


def test_one_append_read_back_sends_two_statements_on_postgresql_seven_on_sqlite(seeded):
    """A warm append (the head row exists) with the round's digests given and ``read_back``:
    PostgreSQL: ONE statement in its own transaction (``lock_timeout``, then the head locked and
    moved and the event inserted, in one round trip, no ``BEGIN``/``COMMIT`` round trips), then
    the read-back; SQLite: busy timeout, the write-first head insert, the head, the INSERT, the
    move, the busy timeout restored, the read-back."""
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    seen = _statements(lambda: audit.record(op, "submitted", round_number=1, read_back=True, **DIGESTS))
    if connection.vendor == "postgresql":
        assert len(seen) == 2, seen
        # lock_timeout set by the statement itself, before its lock (no SET of its own: one statement at the server)
        assert seen[0].startswith("WITH t AS (SELECT set_config('lock_timeout', "), seen[0]
        assert ";" not in seen[0], seen[0]
        assert "FOR UPDATE" in seen[0] and "UPDATE \"mrtrweb_auditchainhead\"" in seen[0], seen[0]
        assert "INSERT INTO \"mrtrweb_auditevent\"" in seen[0], seen[0]
        assert seen[1].startswith("SELECT") and "FOR UPDATE" not in seen[1], seen[1]
        assert connection.get_autocommit() and not connection.in_atomic_block
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
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    base = len(_statements(lambda: audit.record(op, "shown", round_number=1, **DIGESTS)))
    looked_up = _statements(lambda: audit.record(op, "shown", round_number=1))
    assert len(looked_up) == base + 1, looked_up
    assert base == (1 if connection.vendor == "postgresql" else 6)
    shown = AuditEvent.objects.filter(operation_id=op.id, event="shown").order_by("sequence").last()
    assert shown.schema_digests == DIGESTS["schema_digests"]  # found by the lookup


def test_the_first_append_of_a_tenant_creates_its_head(seeded):
    """No head row yet: the append creates it at the genesis and links the first event to it."""
    op = seeded_operation(seeded)
    row = audit.record(op, "received", round_number=1, read_back=True, **DIGESTS)
    assert (row.sequence, row.prev_hash) == (1, audit.GENESIS)
    assert row.pk == AuditEvent.objects.get(operation_id=op.id).pk
    assert audit.verify_chain(op.tenant_id).events == 1


HOSTILE = ['quote " backslash \\ slash / tab \t newline \n', "ünïcödé ✓ 😀 \u2028 \u2029 \x7f \x01",
           '","prev_hash":"' + "0" * 64 + '","sequence":1,"x":"', "}{][,:", "'; DROP TABLE x; --", "%s %(x)s {0} $1"]


@pytest.mark.parametrize("read_back", [False, True])
def test_the_database_computes_the_canonical_hash_of_hostile_text(seeded, read_back):
    """On PostgreSQL the database hashes the event's canonical JSON (Python cut it around
    ``prev_hash`` and ``sequence``): text that looks like JSON, quotes, escapes, non-ASCII, and
    nested keys named like the linked fields still give the hash :func:`audit.event_hash`
    computes, so every append (read back or not) keeps the chain verifiable."""
    op = seeded_operation(seeded)
    for i, text in enumerate(HOSTILE):
        op.name = text
        audit.record(op, "rejected", code="x", reason=text, round_number=i + 1, read_back=read_back,
                     request_id=text[:60], state_digest=text[:80], schema_digests={"prev_hash": text, "sequence": 7},
                     actions={text: "accept", "sequence": "decline"}, display_digest=text[:80])
    rows = list(AuditEvent.objects.filter(operation_id=op.id).order_by("sequence"))
    assert [r.reason for r in rows] == HOSTILE
    assert all(r.hash == audit.event_hash(r.__dict__) for r in rows)
    report = audit.verify_chain(op.tenant_id)
    assert report.broken is None and report.events == len(HOSTILE)


def test_an_append_inside_a_callers_transaction_is_rolled_back_with_it(seeded):
    """Inside a caller's ``atomic`` block the append is part of the caller's transaction."""
    from django.db import transaction

    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    with pytest.raises(RuntimeError), transaction.atomic():
        audit.record(op, "shown", round_number=1, **DIGESTS)
        raise RuntimeError("the caller fails")
    assert list(AuditEvent.objects.filter(operation_id=op.id).values_list("event", flat=True)) == ["received"]
    assert audit.record(op, "shown", round_number=1, **DIGESTS).sequence == 2
    assert audit.verify_chain(op.tenant_id).broken is None


def _raw(sql: str) -> None:
    with connection.cursor() as cur:
        cur.execute(sql)


def test_the_read_back_reads_the_database_and_catches_a_row_that_differs(seeded, caplog):
    """A row the database stores otherwise than it was written (here a trigger rewrites its
    ``reason`` after the insert) fails the read-back: AuditUnavailable, the retry is not sent.
    Without ``read_back`` nothing reads it again (the chain check finds it later)."""
    op = seeded_operation(seeded)
    if connection.vendor == "postgresql":
        create = ["CREATE FUNCTION tamper() RETURNS trigger AS $$ BEGIN UPDATE mrtrweb_auditevent SET reason = "
                  "'tampered' WHERE id = NEW.id; RETURN NULL; END; $$ LANGUAGE plpgsql",
                  "CREATE TRIGGER tamper AFTER INSERT ON mrtrweb_auditevent FOR EACH ROW "
                  "WHEN (NEW.reason = 'honest') EXECUTE FUNCTION tamper()"]
        drop = ["DROP TRIGGER tamper ON mrtrweb_auditevent", "DROP FUNCTION tamper()"]
    else:
        create = ["CREATE TRIGGER tamper AFTER INSERT ON mrtrweb_auditevent WHEN NEW.reason = 'honest' BEGIN "
                  "UPDATE mrtrweb_auditevent SET reason = 'tampered' WHERE id = NEW.id; END"]
        drop = ["DROP TRIGGER tamper"]
    for sql in create:
        _raw(sql)
    try:
        unchecked = audit.record(op, "shown", reason="honest", round_number=1, **DIGESTS)
        with pytest.raises(audit.AuditUnavailable, match="read back differs"):
            audit.record(op, "submitted", reason="honest", round_number=1, read_back=True, **DIGESTS)
        fine = audit.record(op, "submitted", reason="other", round_number=1, read_back=True, **DIGESTS)
    finally:
        for sql in drop:
            _raw(sql)
    assert unchecked.reason == "honest" and fine.reason == "other"
    assert AuditEvent.objects.get(pk=unchecked.pk).reason == "tampered"
    assert "read back differs" in caplog.text
    assert "was altered" in audit.verify_chain(op.tenant_id).broken


def test_with_server_side_binding_the_append_is_still_one_statement_its_lock_timeout_first(seeded, monkeypatch):
    """PostgreSQL with ``OPTIONS["server_side_binding"]`` (Django's cursor binds server-side; no
    several statements in one execute): the append is still ONE statement, ``lock_timeout`` set by
    its first step before the head's lock, then the read-back -- as with client-side binding and as
    with :mod:`mrtrweb.prepared`'s cursor (the default)."""
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL option")
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "server_side_binding", True)
    for prepare in (False, True):
        monkeypatch.setattr(settings, "MRTRWEB", {**getattr(settings, "MRTRWEB", {}), "PREPARED_STATEMENTS": prepare})
        connection.close()
        try:
            seen = _statements(lambda: audit.record(op, "submitted", round_number=1 + prepare, read_back=True,
                                                    **DIGESTS))
        finally:
            connection.close()  # the next test's connection binds client-side again
        assert [s.split()[0] for s in seen] == ["WITH", "SELECT"], seen
        assert seen[0].index("set_config('lock_timeout'") < seen[0].index("FOR UPDATE") and ";" not in seen[0], seen
    assert audit.verify_chain(op.tenant_id).broken is None
    assert AuditEvent.objects.filter(operation_id=op.id).count() == 3


def test_a_receipt_written_once_costs_one_statement_and_its_repeat_one_more(seeded):
    """``once`` (the consent receipt): on PostgreSQL ONE statement, which inserts the receipt's claim
    (unique, ``ON CONFLICT DO NOTHING``: a concurrent inserter waits for the first and then writes
    nothing) before it locks the head, and appends only with the claim (issue 30: no lock of the
    head by a statement of its own); a repeat writes nothing and returns the first receipt (found by
    one lookup after). A claim per receipt."""
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    kw = dict(round_number=1, display_digest="sha256:" + "d" * 64, once=("round_number", "display_digest"), **DIGESTS)
    first_sql = _statements(lambda: audit.record(op, "shown", **kw))
    again: list = []
    repeat_sql = _statements(lambda: again.append(audit.record(op, "shown", **kw)))
    other = audit.record(op, "shown", **dict(kw, display_digest="sha256:" + "e" * 64))
    shown = list(AuditEvent.objects.filter(operation_id=op.id, event="shown").order_by("sequence"))
    assert [r.display_digest[-1] for r in shown] == ["d", "e"] and other.pk == shown[1].pk
    assert again[0].pk == shown[0].pk
    if connection.vendor == "postgresql":
        assert len(first_sql) == 1 and first_sql[0].count("FOR UPDATE") == 1 and ";" not in first_sql[0], first_sql
        assert 'INSERT INTO "mrtrweb_auditonce"' in first_sql[0] and "ON CONFLICT DO NOTHING" in first_sql[0]
        assert first_sql[0].index("mrtrweb_auditonce") < first_sql[0].index("FOR UPDATE"), first_sql
        assert "NOT EXISTS" in first_sql[0]
        assert len(repeat_sql) == 2 and repeat_sql[1].startswith("SELECT"), repeat_sql
        from mrtrweb.models import AuditOnce

        assert sorted(AuditOnce.objects.filter(operation_id=op.id).values_list("key", flat=True)) == [
            f"round_number=1&display_digest=sha256:{c * 64}" for c in "de"]
    assert audit.verify_chain(op.tenant_id).broken is None


def test_receipts_written_at_once_by_many_threads_land_once(seeded):
    """16 threads (each its own connection) write the same receipt at the same moment, with
    other events appended meanwhile: one receipt, and the chain verifies."""
    from tests.audit.concurrency import run_threads

    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    kw = dict(round_number=1, display_digest="sha256:" + "d" * 64, once=("round_number", "display_digest"), **DIGESTS)

    def write(i: int) -> None:
        audit.record(op, "shown", **kw)
        audit.record(op, "rejected", code="x", round_number=1, **DIGESTS)

    assert not run_threads(write, 16)
    assert AuditEvent.objects.filter(operation_id=op.id, event="shown").count() == 1
    assert AuditEvent.objects.filter(operation_id=op.id, event="rejected").count() == 16
    report = audit.verify_chain(op.tenant_id)
    assert report.broken is None and report.events == 18


def test_receipts_racing_one_being_committed_land_once(seeded):
    """PostgreSQL, the race the receipt's one statement must close (issue 30): one writer has
    appended the receipt in a transaction still open (its claim and the head held), and 8 others
    send the same receipt meanwhile: their statements start, and take their snapshots, before
    that receipt commits, so a check of the events alone would miss it (two tabs, two receipts).
    Their claims wait at the unique index for the first writer's transaction, then write nothing:
    one receipt, one claim, every writer gets that receipt back, and the chain verifies."""
    import threading
    import time

    from django.db import connections, transaction

    from mrtrweb.models import AuditOnce

    if connection.vendor != "postgresql":
        pytest.skip("SQLite's append checks under the database's one write lock")
    from tests.audit.concurrency import run_threads

    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    kw = dict(round_number=1, display_digest="sha256:" + "d" * 64, once=("round_number", "display_digest"), **DIGESTS)
    held, go, first, errors = threading.Event(), threading.Event(), [], []

    def holder() -> None:
        try:
            with transaction.atomic():
                first.append(audit.record(op, "shown", **kw))
                held.set()
                go.wait(20)
        except BaseException as exc:  # noqa: BLE001 -- reported to the test
            errors.append(exc)
        finally:
            held.set()
            connections.close_all()

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    assert held.wait(10) and not errors, errors
    got: list = []
    racers = threading.Thread(target=lambda: errors.extend(run_threads(
        lambda _i: got.append(audit.record(op, "shown", **kw)), 8)), daemon=True)
    racers.start()
    deadline = time.monotonic() + 10  # the racers at the database (a process sends at most
    waiting = 0  # APPENDERS_PER_TENANT of them at a time) have started their statements and wait
    try:
        with connections["default"].cursor() as cur:
            while time.monotonic() < deadline and waiting < audit.APPENDERS_PER_TENANT:
                time.sleep(0.02)
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND query LIKE %s AND pid <> pg_backend_pid()", ["WITH t AS (SELECT set_config('lock_timeout'%"])
                waiting = cur.fetchone()[0]
    finally:
        go.set()
    assert waiting == audit.APPENDERS_PER_TENANT, "the racing receipts never waited"
    thread.join(20)
    racers.join(60)
    assert not errors, errors
    assert AuditEvent.objects.filter(operation_id=op.id, event="shown").count() == 1
    assert AuditOnce.objects.filter(operation_id=op.id, event="shown").count() == 1
    assert {r.pk for r in got} == {first[0].pk} and len(got) == 8
    assert audit.verify_chain(op.tenant_id).broken is None


def test_a_process_queues_its_appenders_of_one_tenant_and_a_full_queue_fails_closed(seeded, settings):
    """PostgreSQL: at most ``APPENDERS_PER_TENANT`` threads of a process wait at the database for
    one tenant's chain head; the rest wait in the process. A place that never comes free within
    ``AUDIT_WAIT_S`` fails the append as a lock wait that ran out (``AuditUnavailable``: the
    retry it guards is not sent), and nothing is written; another tenant's appends do not wait."""
    import threading

    if connection.vendor != "postgresql":
        pytest.skip("the queue guards PostgreSQL's one-statement append")
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "AUDIT_WAIT_S": 0.3}
    op = seeded_operation(seeded)
    audit.record(op, "submitted", round_number=1, **DIGESTS)  # the head row exists
    before = AuditEvent.objects.filter(operation_id=op.pk).count()
    taken = threading.BoundedSemaphore(audit.APPENDERS_PER_TENANT)
    for _ in range(audit.APPENDERS_PER_TENANT):  # every place held (as by appenders still waiting)
        taken.acquire()
    real = audit._queues.get(op.tenant_id)
    audit._queues[op.tenant_id] = taken
    try:
        with pytest.raises(audit.AuditUnavailable):
            audit.record(op, "submitted", round_number=1, read_back=True, **DIGESTS)
        assert AuditEvent.objects.filter(operation_id=op.pk).count() == before
        taken.release()  # one place free: the append goes through
        audit.record(op, "submitted", round_number=1, read_back=True, **DIGESTS)
        assert AuditEvent.objects.filter(operation_id=op.pk).count() == before + 1
    finally:
        if real is None:
            audit._queues.pop(op.tenant_id, None)
        else:
            audit._queues[op.tenant_id] = real
    assert audit.verify_chain(op.tenant_id).broken is None


def test_an_append_builds_only_the_statement_it_sends(seeded, monkeypatch):
    """PostgreSQL: an append with a write of its own (``then``) builds its one-trip statement
    alone (issue 30: the statement without ``then`` was built too, its canonical JSON and all,
    and never sent); the event and the write are made as before."""
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement append is PostgreSQL's")
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    built = []
    real = audit.PgAppend

    class Counting(real):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("then", args[3] if len(args) > 3 else None))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(audit, "PgAppend", Counting)
    then = ('UPDATE "mrtrweb_operation" SET "error_code" = %s WHERE "id" = %s', ["touched", op.pk])
    event = audit.record(op, "submitted", round_number=1, read_back=True, then=then, **DIGESTS)
    assert len(built) == 1 and built[0] is not None, built
    assert event.then_rows == 1 and Operation.objects.get(pk=op.pk).error_code == "touched"
    audit.record(op, "shown", round_number=1, **DIGESTS)
    assert len(built) == 2 and built[1] is None
    assert audit.verify_chain(op.tenant_id).broken is None
