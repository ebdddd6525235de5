"""An audit append joined to a phase's own statement (:mod:`mrtrweb.audit.joined`, issue 30): made
only with the write it follows, and every case in which it is not made there leaves what the
separate statements left, the caller told which case it was. PostgreSQL only (elsewhere nothing
is joined: :meth:`JoinedAppend.joins` is False); run with ``tests.services_settings``."""

from __future__ import annotations


import pytest
from django.db import connection, connections, router

from mrtrweb.audit import events as audit
from mrtrweb.audit.joined import JoinedAppend
from mrtrweb.models import AuditChainHead, AuditEvent, Operation
from mrtrweb.operations.runtime import mark_ended_sql
from tests.audit.concurrency import ChainHolder
from tests.audit.operations import DIGESTS, seeded_operation

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("the append joins another statement on PostgreSQL only")


def _running(seeded, *, head: bool = True) -> Operation:
    """An operation in flight (its row running), its tenant's chain head made first with ``head``."""
    op = seeded_operation(seeded)
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.RUNNING)
    if head:
        audit.record(op, "received", round_number=1, **DIGESTS)
    op.status, op.rounds = Operation.Status.COMPLETED, 1
    return op


def _completed(op: Operation) -> JoinedAppend:
    return JoinedAppend(op, "completed", round_number=1, request_id=op.latest_request_id, **DIGESTS)


def _events(op: Operation) -> list[str]:
    return list(AuditEvent.objects.filter(operation_id=op.id).order_by("sequence").values_list("event", flat=True))


def test_the_event_is_appended_only_with_the_write_it_follows(seeded):
    """The row's move and the ``completed`` event: one statement, the event's hash checked; made
    again, the move writes nothing (the row ended) and nothing is appended."""
    op = _running(seeded)
    joined = _completed(op)
    assert JoinedAppend.joins(connections[router.db_for_write(AuditEvent)])
    seen: list[str] = []
    built = mark_ended_sql(op, Operation.Status.COMPLETED)
    with connection.execute_wrapper(lambda execute, sql, *args: seen.append(sql) or execute(sql, *args)):
        assert joined.run_after(built) == 1
    assert len(seen) == 1 and seen[0].startswith("WITH w AS (UPDATE"), seen
    event = joined.event()
    assert event is not None and event.sequence == 2 and event.state_digest == DIGESTS["state_digest"]
    assert _events(op) == ["received", "completed"]
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.COMPLETED
    assert audit.verify_chain(op.tenant_id).broken is None
    again = _completed(op)
    assert again.run_after(mark_ended_sql(op, Operation.Status.COMPLETED)) == 0
    assert not again.appended and again.event() is None and _events(op) == ["received", "completed"]
    assert AuditChainHead.objects.get(tenant_id=op.tenant_id).sequence == 2


def test_without_a_chain_head_the_write_is_made_and_the_event_left_to_the_caller(seeded):
    """The tenant's first event: the head does not exist, so the statement moves the row and
    appends nothing (``appended`` False); the caller's own append creates the head (as the
    separate statements did)."""
    op = _running(seeded, head=False)
    assert not AuditChainHead.objects.filter(tenant_id=op.tenant_id).exists()
    joined = _completed(op)
    assert joined.run_after(mark_ended_sql(op, Operation.Status.COMPLETED)) == 1
    assert not joined.appended and joined.event() is None and _events(op) == []
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.COMPLETED
    audit.record(op, "completed", round_number=1, **DIGESTS)
    assert _events(op) == ["completed"] and audit.verify_chain(op.tenant_id).broken is None


def test_a_head_locked_past_the_wait_fails_the_statement_and_writes_nothing(seeded, settings):
    """The chain held by another writer for longer than ``AUDIT_WAIT_S``: the whole statement
    fails (``run_after`` None), the row is not moved: the caller makes both on their own."""
    op = _running(seeded)
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "AUDIT_WAIT_S": 0.3}
    holder = ChainHolder(op.tenant_id)
    try:
        joined = _completed(op)
        assert joined.run_after(mark_ended_sql(op, Operation.Status.COMPLETED)) is None
    finally:
        holder.release()
    assert not joined.appended and _events(op) == ["received"]
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.RUNNING


def test_the_store_close_falls_back_to_its_own_writes_when_the_head_stays_locked(seeded, settings):
    """The database store's close with the row's move first and the append joined: with the head
    locked past the wait, the store makes its own statement alone (the row moved, the binding and
    its index entry deleted, as before the append was joined) and the append is the caller's."""
    from mrtrweb.bindings.database import DatabaseBindingStore
    from mrtrweb.models import BindingIndexEntry, LiveBinding

    op = _running(seeded)
    store, tenant = DatabaseBindingStore(), str(op.tenant_id)
    assert store.index_add(tenant, str(op.user_id), "s:r-1", str(op.id), 60)
    store.save(tenant, str(op.id), {"tenant": tenant, "operation_id": str(op.id)}, 60)
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "AUDIT_WAIT_S": 0.3}
    alias = router.db_for_write(Operation)
    holder = ChainHolder(op.tenant_id)
    try:
        joined = _completed(op)
        with store.along(alias, *mark_ended_sql(op, Operation.Status.COMPLETED), joined=joined) as made:
            store.discard(tenant, str(op.id), index=(str(op.user_id), "s:r-1"))
    finally:
        holder.release()
    assert made == [True, True] and not joined.appended
    assert Operation.objects.get(pk=op.pk).status == Operation.Status.COMPLETED
    assert not LiveBinding.objects.filter(operation_id=str(op.id)).exists()
    assert not BindingIndexEntry.objects.filter(operation_id=str(op.id)).exists()
    assert _events(op) == ["received"]


def test_the_store_close_and_the_event_in_one_statement(seeded):
    """Unlocked: the row's move, the binding's deletes and the event, one statement."""
    from mrtrweb.bindings.database import DatabaseBindingStore
    from mrtrweb.models import LiveBinding

    op = _running(seeded)
    store, tenant = DatabaseBindingStore(), str(op.tenant_id)
    assert store.index_add(tenant, str(op.user_id), "s:r-1", str(op.id), 60)
    store.save(tenant, str(op.id), {"tenant": tenant, "operation_id": str(op.id)}, 60)
    joined = _completed(op)
    seen: list[str] = []
    built = mark_ended_sql(op, Operation.Status.COMPLETED)
    with connection.execute_wrapper(lambda execute, sql, *args: seen.append(sql) or execute(sql, *args)):
        with store.along(router.db_for_write(Operation), *built, joined=joined) as made:
            store.discard(tenant, str(op.id), index=(str(op.user_id), "s:r-1"))
    assert made == [True, True] and joined.appended and len(seen) == 1, seen
    assert joined.event().sequence == 2 and _events(op) == ["received", "completed"]
    assert not LiveBinding.objects.filter(operation_id=str(op.id)).exists()
    assert audit.verify_chain(op.tenant_id).broken is None


def _refusing(event: str):
    """A trigger making the database refuse every new ``event`` row (a sink that fails), and its removal."""
    create = ["CREATE FUNCTION sink_down() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'sink down'; END; "
              "$$ LANGUAGE plpgsql",
              "CREATE TRIGGER sink_down BEFORE INSERT ON mrtrweb_auditevent FOR EACH ROW "
              f"WHEN (NEW.event = '{event}') EXECUTE FUNCTION sink_down()"]
    drop = ["DROP TRIGGER sink_down ON mrtrweb_auditevent", "DROP FUNCTION sink_down()"]
    return create, drop


async def _headless_round(seeded, event: str):
    """One headless round while the database refuses ``event`` rows: its outcome and its events."""
    from asgiref.sync import sync_to_async

    from mrtrweb.headless import client as headless
    from mrtrweb.headless.client import ConsentPolicy

    def run(statements: list[str]) -> None:
        with connection.cursor() as cur:
            for sql in statements:
                cur.execute(sql)

    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    create, drop = _refusing(event)
    await sync_to_async(run)(create)
    try:
        outcome = await headless.arun(url=server.url, user=alice, tenant=server.tenant, method="tools/call",
                                      params={"name": "wait_then_ask", "arguments": {"seconds": 0}},
                                      consent=ConsentPolicy.parse("accept-defaults"))
    finally:
        await sync_to_async(run)(drop)
    events = [e async for e in AuditEvent.objects.filter(operation_id=outcome.operation_id)
              .order_by("sequence").values_list("event", flat=True)]
    return outcome, events


@pytest.fixture(params=["database", "cache"])
def binding_store(request, settings):
    """Each binding store in turn (the database's joins the events to its statements; Redis's none
    but the end's row move)."""
    from mrtrweb.runtime import gates

    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "BINDING_STORE": request.param}
    gates.reset_gate()
    yield request.param
    gates.reset_gate()


@pytest.mark.parametrize("event", ["received", "submitted"])
async def test_a_refused_received_or_submitted_event_denies_the_round_as_before(seeded, event, binding_store):
    """The database refuses the event joined to the claim's (the consume's) statement: the store's
    writes are made alone, the caller's own append fails, and the round is denied for the audit
    (nothing sent), as when they were separate statements."""
    outcome, events = await _headless_round(seeded, event)
    assert outcome.status == "denied", outcome
    assert event not in events and events[-1] == "denied", events
    assert seeded["mcp"].calls[("wait_then_ask", True)] == 0  # no retry reached the server
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert op.status == Operation.Status.DENIED and op.error_code == "denied"


async def test_a_refused_completed_event_leaves_the_operation_completed_as_before(seeded, caplog, binding_store):
    """The database refuses the ``completed`` event joined to the end's statement: the row's move and
    the binding's close are made alone, the caller's own append fails (logged): the operation is
    completed, its binding gone, as when they were separate statements."""
    from mrtrweb.models import LiveBinding

    outcome, events = await _headless_round(seeded, "completed")
    assert outcome.status == "completed", outcome
    assert events == ["received", "shown", "submitted"], events
    assert "audit write failed" in caplog.text and "completed" in caplog.text
    assert not await LiveBinding.objects.filter(operation_id=str(outcome.operation_id)).aexists()
    from asgiref.sync import sync_to_async

    from mrtrweb.operations import get_gate

    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert await sync_to_async(get_gate().store.load)(str(op.tenant_id), str(op.id)) is None  # closed in either store


def test_hostile_text_in_the_event_goes_in_as_parameters_and_hashes_as_stored(seeded):
    """The event's text fields (a name, a request id) holding quotes, ``%s``, ``$$``, a backslash, a
    placeholder-like ``"prev_hash":"`` and non-ASCII: the joined statement binds them as parameters
    (no other SQL runs, nothing breaks the statement's placeholders) and the hash the database
    computed matches the stored row, read back and across the chain."""
    from mrtrweb.audit.chain import read_event

    op = _running(seeded)
    hostile = "de'ploy\"; DROP TABLE x; -- %s %(x)s $$ \\ \"prev_hash\":\"0\" \"sequence\":\"1\" é—✓"
    Operation.objects.filter(pk=op.pk).update(name=hostile, latest_request_id=hostile[:60])
    op.name, op.latest_request_id = hostile, hostile[:60]
    joined = _completed(op)
    assert joined.run_after(mark_ended_sql(op, Operation.Status.COMPLETED)) == 1
    event = joined.event()
    again = read_event(connection, event.pk)
    assert again["name"] == hostile and again["request_id"] == hostile[:60]
    assert again["hash"] == audit.event_hash(again) == event.hash
    assert audit.verify_chain(op.tenant_id).broken is None
