"""Chain verification, signed checkpoints and purge of a tenant's audit chain (re-exported by
:mod:`mrtrweb.audit.events`, where callers find them).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from django.db import transaction

from .chain import GENESIS, drop_purged_claims, event_hash
from ..models import AuditChainHead, AuditEvent

logger = logging.getLogger("mrtrweb.audit")


CHECKPOINT_SALT = "mrtrweb.audit.checkpoint"  # a salt: never renamed with the module


def sign_checkpoint(tenant_id: Any, sequence: int, hash_hex: str) -> str:
    """A :mod:`django.core.signing` token over (tenant, sequence, hash)."""
    from django.core import signing

    return signing.dumps({"tenant": str(tenant_id), "sequence": sequence, "hash": hash_hex}, salt=CHECKPOINT_SALT)


def _checkpoint_ok(cp) -> bool:
    from django.core import signing

    try:
        data = signing.loads(cp.signature, salt=CHECKPOINT_SALT)
    except signing.BadSignature:
        return False
    return data == {"tenant": str(cp.tenant_id), "sequence": cp.sequence, "hash": cp.hash}


@dataclasses.dataclass
class ChainReport:
    """The result of verifying one tenant's chain. ``broken`` is None when intact, else a
    sentence naming the first broken link (sequence, event id, what is wrong)."""

    tenant_id: Any
    events: int
    head_sequence: int
    broken: str | None = None


def verify_chain(tenant_id: Any) -> ChainReport:
    """Walk a tenant's events in sequence order from its latest valid checkpoint (or the genesis)
    and check each link: consecutive sequence, ``prev_hash`` equal to the previous hash, ``hash``
    equal to the recomputed hash; finally the head row must match the last event."""
    from ..models import AuditCheckpoint

    checkpoints = list(AuditCheckpoint.objects.filter(tenant_id=tenant_id).order_by("sequence"))
    for cp in checkpoints:
        if not _checkpoint_ok(cp):
            return ChainReport(tenant_id, 0, 0, f"checkpoint at sequence {cp.sequence} has an invalid signature")
    seq, prev = (checkpoints[-1].sequence, checkpoints[-1].hash) if checkpoints else (0, GENESIS)
    count = 0
    for row in AuditEvent.objects.filter(tenant_id=tenant_id).order_by("sequence", "id").iterator():
        count += 1
        if row.sequence <= seq and checkpoints:
            return ChainReport(tenant_id, count, seq, f"event {row.pk} (sequence {row.sequence}) is older than the "
                                                      "last checkpoint but still present")
        if row.sequence != seq + 1:
            return ChainReport(tenant_id, count, seq, f"link {seq + 1} is missing: the next event (id {row.pk}) has "
                                                      f"sequence {row.sequence}")
        if row.prev_hash != prev:
            return ChainReport(tenant_id, count, seq, f"event {row.pk} (sequence {row.sequence}) does not link to "
                                                      "the previous event")
        if row.hash != event_hash(row.__dict__):
            return ChainReport(tenant_id, count, seq, f"event {row.pk} (sequence {row.sequence}) was altered: its "
                                                      "content does not match its hash")
        seq, prev = row.sequence, row.hash
    head = AuditChainHead.objects.filter(tenant_id=tenant_id).first()
    if head is not None and (head.sequence != seq or head.hash != prev):
        return ChainReport(tenant_id, count, seq, f"the chain ends at sequence {seq} but its head says "
                                                  f"{head.sequence}: events at the end were removed")
    return ChainReport(tenant_id, count, seq)


def purge_before(tenant_id: Any, cutoff) -> tuple[int, int]:
    """Delete a tenant's events created before ``cutoff`` (a prefix of the chain; their once-claims
    too) after writing a signed checkpoint of the last purged link: the rest stays verifiable.
    Returns (events deleted, checkpoint sequence or 0)."""
    from ..models import AuditCheckpoint

    with transaction.atomic():
        rows = AuditEvent.objects.filter(tenant_id=tenant_id).order_by("sequence")
        last = None
        for row in rows.iterator():
            if row.created_at >= cutoff:
                break
            last = row
        if last is None:
            return 0, 0
        AuditCheckpoint.objects.create(tenant_id=tenant_id, sequence=last.sequence, hash=last.hash,
                                       purged=AuditEvent.objects.filter(tenant_id=tenant_id,
                                                                        sequence__lte=last.sequence).count(),
                                       signature=sign_checkpoint(tenant_id, last.sequence, last.hash))
        drop_purged_claims(tenant_id, last.sequence)
        doomed = AuditEvent.objects.filter(tenant_id=tenant_id, sequence__lte=last.sequence)
        deleted = doomed._raw_delete(doomed.db)  # the one sanctioned deletion: retention, behind a checkpoint
    logger.info("audit purge: tenant %s, %s events up to sequence %s", tenant_id, deleted, last.sequence)
    return deleted, last.sequence
