"""The database store's phase writes with the phase's audit append joined (issue 30,
:mod:`mrtrweb.bindings.steps`, :mod:`mrtrweb.audit.joined`): ``consume`` with the ``submitted``
event and the row to running, ``claim_and_save`` with the ``received`` event -- one statement, the
event only with the store's writes, and every case in which the event is not made there leaving
what the separate statements left (the store's writes alone, the append the caller's). PostgreSQL
only (elsewhere nothing is joined); run with ``tests.services_settings``."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, router
from django.test.utils import CaptureQueriesContext

from mrtrweb.audit import events as audit
from mrtrweb.audit.joined import JoinedAppend
from mrtrweb.bindings.database import DatabaseBindingStore
from mrtrweb.models import AuditChainHead, AuditEvent, BindingClaim, Operation
from mrtrweb.operations.rows import move_sql
from tests.audit.operations import DIGESTS, seeded_operation

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("the append joins the store's statement on PostgreSQL only")


def _waiting(seeded) -> tuple[Operation, DatabaseBindingStore, dict]:
    """An operation awaiting an answer, its chain head made (its ``received`` event), its binding
    bound to ``s:r-1`` with round 1 open."""
    op = seeded_operation(seeded)
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.AWAITING_INPUT, rounds=1)
    audit.record(op, "received", round_number=1, **DIGESTS)
    store, tenant = DatabaseBindingStore(), str(op.tenant_id)
    record = {"tenant": tenant, "operation_id": str(op.id), "user": "alice", "round": {"number": 1}}
    assert store.bind(tenant, "alice", "s:r-1", str(op.id), record, 60)
    return op, store, record


def _submitted(op: Operation) -> JoinedAppend:
    then = move_sql(op.pk, {"status": Operation.Status.RUNNING}, status_not_in=Operation.TERMINAL)
    return JoinedAppend(op, "submitted", round_number=1, retry_id="r-2", actions={"confirm": "accept"},
                        read_back=True, then=then, **DIGESTS)


def _consume(op: Operation, store: DatabaseBindingStore, record: dict, joined: JoinedAppend,
             new_key: str = "s:r-2") -> tuple[bool, bool]:
    with store.joining(router.db_for_write(AuditEvent)) as join:
        join(joined)
        return store.consume(str(op.tenant_id), "round:op:1", "alice", new_key, "s:r-1", str(op.id), record, 60)


def _events(op: Operation) -> list[str]:
    return list(AuditEvent.objects.filter(operation_id=op.id).order_by("sequence").values_list("event", flat=True))


def test_the_consume_the_event_and_the_row_in_one_statement(seeded):
    op, store, record = _waiting(seeded)
    joined = _submitted(op)
    with CaptureQueriesContext(connection) as ctx:
        assert _consume(op, store, record, joined) == (True, True)
    assert len(ctx.captured_queries) == 1, ctx.captured_queries
    event = joined.event()  # its hash checked and read back
    assert event.sequence == 2 and event.then_rows == 1 and _events(op) == ["received", "submitted"]
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.RUNNING
    assert store.index_get(str(op.tenant_id), "alice", "s:r-2") == str(op.id)
    assert audit.verify_chain(op.tenant_id).broken is None


def test_a_round_consumed_already_appends_nothing(seeded):
    op, store, record = _waiting(seeded)
    assert store.claim(str(op.tenant_id), "round:op:1", 60)  # another answer's claim
    joined = _submitted(op)
    assert _consume(op, store, record, joined) == (False, False)
    assert not joined.appended and _events(op) == ["received"]
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.AWAITING_INPUT
    assert AuditChainHead.objects.get(tenant_id=op.tenant_id).sequence == 1


def test_a_retry_id_bound_elsewhere_undoes_everything(seeded):
    op, store, record = _waiting(seeded)
    store.index_add(str(op.tenant_id), "alice", "s:taken", "op-9", 60)
    joined = _submitted(op)
    assert _consume(op, store, record, joined, new_key="s:taken") == (True, False)
    assert not joined.appended and _events(op) == ["received"]
    assert not BindingClaim.objects.exists()  # the claim was not kept: the round is still answerable
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.AWAITING_INPUT


def test_a_head_locked_past_the_wait_leaves_the_consume_alone_and_the_append_to_the_caller(seeded, settings):
    """As the separate statements did: the round consumed, nothing appended, the row not moved;
    the caller's own append then waits (and here fails: the caller denies)."""
    op, store, record = _waiting(seeded)
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "AUDIT_WAIT_S": 0.3}
    locked, release, errors = threading.Event(), threading.Event(), []

    def hold() -> None:
        from django.db import transaction
        from django.db.models import F

        try:
            with transaction.atomic():
                AuditChainHead.objects.filter(tenant_id=op.tenant_id).update(sequence=F("sequence"))
                locked.set()
                release.wait(20)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert locked.wait(10), errors
    try:
        joined = _submitted(op)
        assert _consume(op, store, record, joined) == (True, True)
        with pytest.raises(audit.AuditUnavailable):
            audit.record(op, "submitted", round_number=1, **DIGESTS)
    finally:
        release.set()
        holder.join(20)
    assert not errors and not joined.appended and _events(op) == ["received"]
    assert BindingClaim.objects.count() == 1  # consumed, as before the append was joined
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.AWAITING_INPUT


def test_an_insert_the_database_refuses_leaves_the_consume_alone(seeded):
    """The append's insert refused (a trigger): the statement writes nothing, the store's writes are
    made alone, the append is the caller's (and fails there as it did)."""
    op, store, record = _waiting(seeded)
    with connection.cursor() as cur:
        cur.execute("CREATE FUNCTION sink_down() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'sink down'; END; "
                    "$$ LANGUAGE plpgsql")
        cur.execute("CREATE TRIGGER sink_down BEFORE INSERT ON mrtrweb_auditevent FOR EACH ROW "
                    "WHEN (NEW.event = 'submitted') EXECUTE FUNCTION sink_down()")
    try:
        joined = _submitted(op)
        assert _consume(op, store, record, joined) == (True, True)
    finally:
        with connection.cursor() as cur:
            cur.execute("DROP TRIGGER sink_down ON mrtrweb_auditevent")
            cur.execute("DROP FUNCTION sink_down()")
    assert not joined.appended and _events(op) == ["received"]
    assert BindingClaim.objects.count() == 1
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.AWAITING_INPUT


def test_the_claim_the_record_and_the_received_event_in_one_statement(seeded):
    op, store, record = _waiting(seeded)
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.RUNNING)
    then = move_sql(op.pk, {"status": Operation.Status.AWAITING_INPUT}, status_in=(Operation.Status.RUNNING,))
    joined = JoinedAppend(op, "received", round_number=2, then=then, **DIGESTS)
    tenant = str(op.tenant_id)
    with CaptureQueriesContext(connection) as ctx, store.joining(router.db_for_write(AuditEvent)) as join:
        join(joined)
        assert store.claim_and_save(tenant, "recv:op:s:r-1", str(op.id), dict(record, rounds=2), 60) is True
    assert len(ctx.captured_queries) == 1 and joined.event().then_rows == 1
    assert _events(op) == ["received", "received"]
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.AWAITING_INPUT
    again = JoinedAppend(op, "received", round_number=2, then=then, **DIGESTS)
    with store.joining(router.db_for_write(AuditEvent)) as join:  # the same result again: its claim is taken
        join(again)
        assert store.claim_and_save(tenant, "recv:op:s:r-1", str(op.id), record, 60) is False
    assert not again.appended and _events(op) == ["received", "received"]
    assert store.load(tenant, str(op.id))["rounds"] == 2  # not saved the second time


def _race(n: int, work) -> list:
    """``work(i)`` in ``n`` threads at once (each its own connection); their results (or errors)."""
    barrier, out = threading.Barrier(n), [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            out[i] = work(i)
        except BaseException as exc:  # noqa: BLE001
            out[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


@pytest.mark.parametrize("head_locked", [False, True])
def test_racing_answers_consume_the_round_once_and_append_one_event(seeded, settings, head_locked):
    """Four answers of one round at once, each its consume with the ``submitted`` event joined (and,
    with ``head_locked``, the chain head held past the wait so that they fall back to the store's
    writes alone): exactly one wins, at most one event is appended, the chain has no gap or fork."""
    op, store, record = _waiting(seeded)
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "AUDIT_WAIT_S": 0.5}
    joined = [_submitted(op) for _ in range(4)]
    holder_done, release, locked = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        from django.db import transaction
        from django.db.models import F

        try:
            with transaction.atomic():
                AuditChainHead.objects.filter(tenant_id=op.tenant_id).update(sequence=F("sequence"))
                locked.set()
                release.wait(20)
        finally:
            connections.close_all()
            holder_done.set()

    if head_locked:
        threading.Thread(target=hold, daemon=True).start()
        assert locked.wait(10)
    try:
        results = _race(4, lambda i: _consume(op, store, record, joined[i], new_key=f"s:r-{i + 2}"))
    finally:
        release.set()
        if head_locked:
            holder_done.wait(20)
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert sorted(results) == [(False, False)] * 3 + [(True, True)], results
    appended = [j for j in joined if j.appended]
    assert len(appended) == (0 if head_locked else 1)
    assert _events(op) == ["received"] + (["submitted"] if not head_locked else [])
    assert BindingClaim.objects.count() == 1
    assert audit.verify_chain(op.tenant_id).broken is None
    if not head_locked:
        assert appended[0].event().then_rows == 1


def test_joined_and_separate_appends_of_one_tenant_at_once_keep_the_chain(seeded):
    """Joined appends (the end's row move with its event) and plain appends of one tenant from eight
    threads at once: every event is appended once, the sequence has no gap and the chain verifies."""
    from mrtrweb.operations.runtime import mark_ended_sql
    from tests.audit.operations import DIGESTS as D

    op0 = seeded_operation(seeded)
    audit.record(op0, "received", round_number=1, **D)  # the head
    ops = [seeded_operation(seeded) for _ in range(8)]
    for op in ops:
        Operation.objects.filter(pk=op.pk).update(status=Operation.Status.RUNNING)
        op.status, op.rounds = Operation.Status.COMPLETED, 1

    def work(i: int):
        op = ops[i]
        if i % 2:
            return audit.record(op, "completed", round_number=1, **D).sequence
        joined = JoinedAppend(op, "completed", round_number=1, request_id=op.latest_request_id, **D)
        assert joined.run_after(mark_ended_sql(op, Operation.Status.COMPLETED)) == 1
        return joined.event().sequence

    results = _race(8, work)
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert sorted(results) == list(range(2, 10))
    report = audit.verify_chain(op0.tenant_id)
    assert report.broken is None and report.head_sequence == 9


def test_racing_results_claim_the_binding_once_and_append_one_received_event(seeded):
    """The same result judged by four workers at once (each the claim and the record with the
    ``received`` event and the row's move joined): one claim wins, one event, the row moved once."""
    op, store, record = _waiting(seeded)
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.RUNNING)
    then = move_sql(op.pk, {"status": Operation.Status.AWAITING_INPUT}, status_in=(Operation.Status.RUNNING,))
    joined = [JoinedAppend(op, "received", round_number=2, then=then, **DIGESTS) for _ in range(4)]
    tenant = str(op.tenant_id)

    def claim(i: int) -> bool:
        with store.joining(router.db_for_write(AuditEvent)) as join:
            join(joined[i])
            return store.claim_and_save(tenant, "recv:op:s:r-1", str(op.id), dict(record, rounds=2), 60)

    results = _race(4, claim)
    assert sorted(results) == [False, False, False, True], results
    won = [j for j in joined if j.appended]
    assert len(won) == 1 and won[0].event().then_rows == 1
    assert _events(op) == ["received", "received"]
    assert audit.verify_chain(op.tenant_id).broken is None
