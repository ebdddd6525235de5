"""Retention and the once-claims (``mrtrweb.models.AuditOnce``): a purge that removes an event
removes its claim too, so a round whose receipt was purged while it is still open can be shown
(and answered) again -- its claim is not left without its event -- and the claims do not outlive
the retention; a claim whose event is kept stays."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.utils import timezone

from mrtrweb.audit import chain
from mrtrweb.audit import events as audit
from mrtrweb.models import AuditEvent, AuditOnce
from tests.audit.operations import DIGESTS, seeded_operation

pytestmark = [pytest.mark.django_db(transaction=True)]


def _claims() -> int:
    """How many claims an append writes (PostgreSQL's; SQLite's append checks under the database's
    one write lock and writes none)."""
    return 1 if connection.vendor == "postgresql" else 0

ONCE = ("round_number", "display_digest")



def _shown(digest: str, number: int = 1) -> dict:
    return dict(round_number=number, display_digest="sha256:" + digest * 64, **DIGESTS)


def test_a_receipt_purged_while_its_round_is_open_can_be_written_again(seeded):
    op = seeded_operation(seeded)
    audit.record(op, "received", round_number=1, **DIGESTS)
    audit.record(op, "shown", once=ONCE, **_shown("d"))
    assert AuditOnce.objects.filter(operation_id=op.id).count() == _claims()
    deleted, _ = audit.purge_before(op.tenant_id, timezone.now() + datetime.timedelta(seconds=1))
    assert deleted == 2
    assert not AuditOnce.objects.filter(operation_id=op.id).exists()  # no claim outlives its event
    again = audit.record(op, "shown", once=ONCE, **_shown("d"))  # the card shown again: a receipt
    assert AuditEvent.objects.filter(operation_id=op.id, event="shown").get().pk == again.pk
    assert audit.record(op, "shown", once=ONCE, **_shown("d")).pk == again.pk  # and once again
    assert AuditOnce.objects.filter(operation_id=op.id).count() == _claims()
    assert audit.verify_chain(op.tenant_id).broken is None


def test_only_the_claims_of_purged_events_go(seeded):
    op, other = seeded_operation(seeded), seeded_operation(seeded)
    audit.record(op, "shown", once=ONCE, **_shown("d", 1))  # purged
    audit.record(other, "shown", once=ONCE, **_shown("d", 1))  # purged
    cutoff = timezone.now() + datetime.timedelta(microseconds=1)
    while timezone.now() <= cutoff:
        pass
    audit.record(op, "shown", once=ONCE, **_shown("e", 2))  # kept (the same operation and kind)
    audit.record(other, "expired", round_number=1, once=("round_number",))  # kept (another kind)
    deleted, _ = audit.purge_before(op.tenant_id, cutoff)
    assert deleted == 2
    keys = set(AuditOnce.objects.filter(operation_id__in=[op.id, other.id]).values_list("operation_id", "event", "key"))
    assert keys == set() if not _claims() else keys == {(op.id, "shown", chain.once_key(_shown("e", 2), ONCE)),
                    (other.id, "expired", chain.once_key({"round_number": 1}, ("round_number",)))}
    again = audit.record(op, "shown", once=ONCE, **_shown("d", 1))  # its claim went with its event
    assert again.sequence == 5
    assert audit.record(op, "shown", once=ONCE, **_shown("e", 2)).sequence == 3  # kept: no second one
