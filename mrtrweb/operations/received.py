"""What an accepted round writes, decided before its claim is written (issue 30): the replay check,
the authorization identity, the ``received`` event and the row's move to awaiting -- handed to the
binding store's claim as one statement where it can join them (:mod:`mrtrweb.audit.joined`), else
written by :func:`mrtrweb.operations.rounds._judge_round` after the claim, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from django.utils import timezone

from ..gate import Round
from ..models import Operation
from .authorization import authorization_changed_sync
from .messages import STATE_REUSED, STATE_REUSED_REASON
from .result_reads import state_seen
from .rows import move_sql


def _schema_digests(rnd: Round) -> dict[str, str]:
    """The round's ``requestedSchema`` digests by input request key (what its audit events carry)."""
    return {k: v.schema_digest for k, v in rnd.requests.items() if v.schema_digest}


@dataclasses.dataclass
class Received:
    """What :func:`_judge_round` writes for an accepted round, decided before its claim is written:
    the ``received`` event's ``fields`` (:func:`mrtrweb.audit.events.record`'s keywords), the row's
    move to ``awaiting`` (``then``: its SQL, None when the round is not handed over) and the event
    joined to the claim's statement (``joined``; None where the store cannot join it)."""

    replayed: bool
    changed: dict[str, str] | None
    fields: dict[str, Any]
    awaiting: dict[str, Any]
    then: tuple[str, list[Any]] | None
    joined: Any = None


def prepare_received(op: Operation, rnd: Round, trail: Any, server: Any, request_id: str, received_code: str, *,
                     joinable: bool = True) -> Received:
    """The replay check (with the access's trail, else :func:`.result_reads.state_seen`), the
    authorization identity and the ``received`` event of ``rnd`` (see :class:`Received`; its
    ``joined`` only when ``joinable``: the store joins appends). Sync."""
    from django.db import connections, router

    from ..audit.joined import JoinedAppend
    from ..models import AuditEvent
    from .expiry import expires_at

    if not rnd.state_digest:
        replayed, reused = False, False
    elif trail is not None and trail[:2] == (rnd.state_digest, rnd.number):  # read with the access
        replayed, reused = trail[2], trail[3]
    else:
        replayed, reused = state_seen(op, rnd.state_digest, rnd.number)
    changed = authorization_changed_sync(op, server=server)
    hand_over = changed is None and not replayed and not rnd.state_only
    awaiting = {"status": Operation.Status.AWAITING_INPUT, "rounds": rnd.number, "worker": "",
                "round_expires_at": expires_at(rnd.expires_at), "updated_at": timezone.now()}
    then = move_sql(op.pk, awaiting, status_in=(Operation.Status.RUNNING,)) if hand_over else None
    fields = dict(code=STATE_REUSED if reused else received_code, reason=STATE_REUSED_REASON if reused else "",
                  round_number=rnd.number, request_id=request_id, state_digest=rnd.state_digest,
                  schema_digests=_schema_digests(rnd), config_digest=op.server.config_digest(), auth=changed)
    joined = JoinedAppend(op, "received", then=then, **fields) \
        if joinable and JoinedAppend.joins(connections[router.db_for_write(AuditEvent)]) else None
    return Received(replayed, changed, fields, awaiting, then, joined)


@contextlib.contextmanager
def joining_audit(gate: Any):
    """The store's ``joining`` for the audit's database (:meth:`mrtrweb.bindings.primed.Priming.joining`),
    yielding its ``join``; None for a store that joins nothing."""
    from django.db import router

    from ..models import AuditEvent

    joining = getattr(gate.store, "joining", None)
    if joining is None:
        yield None
        return
    with joining(router.db_for_write(AuditEvent)) as join:
        yield join
