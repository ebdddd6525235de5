"""Reconciliation of the audit trail: every received round paired with what ended it.

A round (an ``input_required`` the gate accepted, event ``received``) ends with exactly one of:
its ``submitted`` answer, or the operation's one terminal outcome (``completed``, ``failed``,
``expired``, ``cancelled``, ``denied``). :func:`reconcile` reports, per tenant:

* ``expired`` -- rounds past their lifetime with no outcome: it settles them by writing their
  ``expired`` event (and marking the operation expired, its binding closed);
* ``duplicate_submissions`` -- a round answered more than once (never settleable);
* ``late_submissions`` -- an answer recorded after the round's lifetime (never settleable);
* ``multiple_outcomes`` -- an operation with more than one terminal outcome (never settleable);
* ``foreign_attempts`` -- answers attempted by another user or tenant (recorded, nothing sent);
* ``replayed_states`` -- a ``requestState`` digest received again by the operation whose earlier
  round had already sent it back (the operation was denied ``request_state_replayed``);
* ``reused_states`` -- a ``requestState`` digest received by more than one operation of a tenant
  (same or different users): legal, a server may mint its opaque state deterministically, so it
  was not denied; listed for the tenant's admins.

And the operations whose state cannot be right (:func:`mrtrweb.operations.untracked.scan`), under
``stranded``: ``dead_worker`` (live, naming a worker with no fresh lease), ``no_worker``
(``running``, naming none), ``untracked`` (live on a live worker that does not follow it),
``terminal_named`` (ended, still naming a worker), ``unverified`` (a count: live on a live worker
that published nothing, or on one whose lease is only a little stale, not judged). Each listed
one is repaired (unless ``settle=False``): ended ``interrupted`` (``worker_lost`` /
``untracked``), or ``denied`` when someone asked to stop it; a terminal one's worker is cleared.

Entries: ``replayed_states`` ``{"tenant", "operation", "state_digest", "rounds": [n, ...]}``;
``reused_states`` ``{"tenant", "state_digest", "operations": [{"operation", "rounds"}, ...],
"users": number of distinct user digests}``. Digests only, never a state.
"""

from __future__ import annotations

import collections
import datetime
from typing import Any

from django.utils import timezone

from .. import conf
from ..operations import expiry
from ..models import AuditEvent
from ..operations import untracked

UNSETTLEABLE = ("duplicate_submissions", "late_submissions", "multiple_outcomes")


def reconcile(*, settle: bool = True, now: datetime.datetime | None = None) -> dict[str, Any]:
    """Scan every tenant's events; returns the JSON report (see the module docstring)."""
    now = now or timezone.now()
    ttl = datetime.timedelta(seconds=float(conf.get("TTL_S")))
    report: dict[str, Any] = {k: [] for k in ("expired", "duplicate_submissions", "late_submissions",
                                              "multiple_outcomes", "foreign_attempts", "replayed_states",
                                              "reused_states")}
    report.update(rounds=0, operations=0, pending=0)
    by_op: dict[Any, list[AuditEvent]] = collections.defaultdict(list)
    # (tenant, state digest) -> operation -> its round numbers; and the users who received it
    states: dict[tuple[Any, str], dict[str, set[int]]] = collections.defaultdict(lambda: collections.defaultdict(set))
    state_users: dict[tuple[Any, str], set[str]] = collections.defaultdict(set)
    for ev in AuditEvent.objects.order_by("tenant_id", "sequence").iterator():
        by_op[ev.operation_id].append(ev)
        if ev.event == "received" and ev.state_digest:
            states[(ev.tenant_id, ev.state_digest)][str(ev.operation_id)].add(ev.round_number)
            state_users[(ev.tenant_id, ev.state_digest)].add(ev.user_digest)
        if ev.event == "rejected" and ev.reason == "answer attempt by another user":
            report["foreign_attempts"].append({"operation": str(ev.operation_id), "round": ev.round_number,
                                               "event_id": ev.pk, "at": ev.created_at.isoformat()})
    for (tenant_id, state), ops in states.items():
        for op_id, numbers in sorted(ops.items()):
            if len(numbers) > 1:
                report["replayed_states"].append({"tenant": tenant_id, "operation": op_id, "state_digest": state,
                                                  "rounds": sorted(numbers)})
        if len(ops) > 1:
            report["reused_states"].append({
                "tenant": tenant_id, "state_digest": state, "users": len(state_users[(tenant_id, state)]),
                "operations": [{"operation": op_id, "rounds": sorted(numbers)} for op_id, numbers in sorted(ops.items())]})
    for op_id, events in by_op.items():
        received = {e.round_number: e for e in events if e.event == "received"}
        if not received:
            continue
        report["operations"] += 1
        report["rounds"] += len(received)
        terminal = [e for e in events if e.event in AuditEvent.TERMINAL]
        if len(terminal) > 1:
            report["multiple_outcomes"].append({"operation": str(op_id), "outcomes": [e.event for e in terminal]})
        submitted = collections.defaultdict(list)
        for e in events:
            if e.event == "submitted":
                submitted[e.round_number].append(e)
        for number, rnd in sorted(received.items()):
            answers = submitted.get(number, [])
            if len(answers) > 1:
                report["duplicate_submissions"].append({"operation": str(op_id), "round": number,
                                                        "retry_ids": [a.retry_id for a in answers]})
            for a in answers:
                if a.created_at > rnd.created_at + ttl:
                    report["late_submissions"].append({"operation": str(op_id), "round": number,
                                                       "retry_id": a.retry_id})
            if answers or terminal:
                continue
            if rnd.created_at + ttl < now:
                report["expired"].append({"operation": str(op_id), "round": number})
                if settle:
                    _settle_expired(op_id, number)
            else:
                report["pending"] += 1
    report["unsettled"] = sum(len(report[k]) for k in UNSETTLEABLE)
    report["stranded"] = untracked.scan(settle=settle, now=now)
    return report


def _settle_expired(op_id: Any, round_number: int) -> None:
    """Settle a round the audit trail shows past its lifetime (:func:`mrtrweb.operations.expiry.expire`, for
    any operation that has not ended), then push the person's pages."""
    ended = expiry.expire(op_id, round_number, due_only=False)
    if ended is not None:
        expiry.push(ended)


STRANDED_LABELS = {
    "dead_worker": "live operations naming a dead worker (interrupted, worker_lost)",
    "no_worker": "running operations naming no worker (ended)",
    "untracked": "live operations their live worker does not follow (ended)",
    "terminal_named": "ended operations still naming a worker (cleared)"}


def summary(report: dict[str, Any]) -> str:
    """The human-readable lines of a report."""
    lines = [f"{report['operations']} operations, {report['rounds']} rounds received, {report['pending']} still live"]
    labels = {"expired": "rounds expired without an outcome (expired event written)",
              "duplicate_submissions": "rounds answered more than once",
              "late_submissions": "answers recorded after the round's lifetime",
              "multiple_outcomes": "operations with more than one outcome",
              "foreign_attempts": "answer attempts by another user or tenant (refused)",
              "replayed_states": "requestState digests an operation received again after sending them back (denied)",
              "reused_states": "requestState digests received by more than one operation (allowed, recorded)"}
    for key, label in labels.items():
        lines.append(f"{len(report[key]):5d}  {label}")
    stranded = report.get("stranded") or {}
    for key, label in STRANDED_LABELS.items():
        lines.append(f"{len(stranded.get(key, [])):5d}  {label}")
    lines.append(f"{stranded.get('unverified', 0):5d}  live operations not judged (their worker published nothing, "
                 "or its lease is only a little stale)")
    lines.append("anomalies that cannot be settled: " + str(report["unsettled"]))
    return "\n".join(lines)
