"""Prometheus metrics of a worker (issue 16, "Operators see it too"), through ``prometheus_client``.

What the benchmark measures, a deployment can watch. Every metric is prefixed ``mrtrweb_``:

==========================================  =========  ==============================================
metric                                      type       labels (each from a fixed, small set)
==========================================  =========  ==============================================
``mrtrweb_rounds_received_total``           counter    ``method`` (:data:`METHODS` or ``other``),
                                                       ``kind`` (:data:`KINDS`)
``mrtrweb_rounds_rejected_total``           counter    ``code`` (:data:`REJECT_CODES` or ``other``)
``mrtrweb_rounds_answered_total``           counter    ``action`` (:data:`ACTIONS`)
``mrtrweb_denied_total``                    counter    ``reason`` (:data:`DENY_REASONS` or ``other``)
``mrtrweb_audit_events_total``              counter    ``event`` (:data:`EVENTS` or ``other``)
``mrtrweb_audit_failures_total``            counter    none (an append or read-back that failed)
``mrtrweb_audit_append_seconds``            histogram  none (one successful ``audit.record``, s)
``mrtrweb_push_latency_seconds``            histogram  none (round received -> card sent on a socket)
``mrtrweb_round_latency_seconds``           histogram  ``outcome``: ``answered`` (received -> the
                                                       retry's ``submitted`` row written and read
                                                       back, i.e. the retry leaves) or ``ended``
                                                       (received -> the round ended otherwise)
``mrtrweb_gc_pause_seconds``                histogram  ``generation`` (``0``, ``1``, ``2``)
``mrtrweb_pending_rounds``                  gauge      ``tenant`` (the tenant's primary key only)
``mrtrweb_outcomes_held``                   gauge      none (calls' outcomes this worker holds until
                                                       the database answers again)
``mrtrweb_outcomes_not_kept_total``         counter    none (outcomes past ``MAX_HELD_OUTCOMES``)
==========================================  =========  ==============================================

No label carries a person, a tenant's name or slug, a ``requestState``, a schema, an answer, a
URL or a token: values from outside (codes, reasons, methods) outside the known sets count as
``other``, so the number of series stays bounded whatever a server sends.

The counters and histograms are fed by one hook, :func:`observe_event`, called by
:func:`mrtrweb.audit.events.record` after each successful append (every event of a round passes there),
and :func:`observe_push`, called by the WebSocket consumer after it sent a round's card. Neither
touches the database and neither ever raises. ``mrtrweb_pending_rounds`` is computed at scrape
time by one grouped query (:class:`PendingRoundsCollector`), so it is the same on every worker.

Multi-worker: each worker process keeps its own counters (scrape each worker). When the
environment variable ``PROMETHEUS_MULTIPROC_DIR`` is set before the processes start (an empty
directory shared by the workers of one host, emptied at each deploy), ``prometheus_client``'s
multiprocess mode is used instead and any worker's ``/metrics`` reports the sum over all of them
(:func:`exposition`).
"""

from __future__ import annotations

import collections
import gc
import logging
import os
import threading
import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from ..gate import codes as gate_codes

logger = logging.getLogger("mrtrweb.metrics")

OTHER = "other"
#: methods an operation may call
METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
#: kinds of round: an MRTR ``input_required`` result, a request a 2025-11-25 server sent during a
#: call (``legacy_server_request``), a URL-required error (``url_elicitation_required``)
KINDS = frozenset({"mrtr", "legacy", "url"})
_KIND_OF_CODE = {"legacy_server_request": "legacy", "url_elicitation_required": "url"}
#: a round's action: the one every request of the round was answered with, else ``mixed``
ACTIONS = frozenset({"accept", "decline", "cancel", "mixed"})
#: the audit trail's event kinds (mrtrweb.models.AuditEvent.Event)
#: the events of an operation (not the configuration events of ``AuditEvent.CONFIG``)
EVENTS = frozenset({"received", "rejected", "shown", "submitted", "completed", "failed", "cancelled", "expired",
                    "denied", "app_rendered"})  # an app shown on the operation's page (issue 31)
#: events that end a round without its answer leaving (``mrtrweb_round_latency_seconds{outcome="ended"}``)
_ENDING = frozenset({"completed", "failed", "cancelled", "expired", "denied"})
#: codes of a ``rejected`` event: the gate's and the product's (tests/runtime/test_metrics.py keeps these
#: in step with mrtrweb.operations.messages and mrtrweb.tenancy.access)
REJECT_CODES = frozenset(gate_codes.ALL_CODES) | frozenset({
    "access_revoked", "binding_store_unavailable", "audit_unavailable", "invalid_result", "worker_draining",
    "authorization_changed", "protocol_changed", "invalid_url_required_error"})
#: reasons of a ``denied`` event (the keys of mrtrweb.operations.messages.DENY_MESSAGES)
DENY_REASONS = frozenset({
    "missing_consent_receipt", "request_state_replayed", "server_config_changed", "timeout", "cancelled",
    "audit_unavailable", "deprecated_request_refused", "legacy_handover_failed", "access_revoked", "url_declined",
    "url_cancelled", "authorization_changed"})

def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when set (prometheus_client's multiprocess mode, which it turns
    on when the variable exists at all, even empty), else None.

    Raises:
        ImproperlyConfigured: set, but not an existing directory (an empty value would make every
            process write its files into its working directory).
    """
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR", os.environ.get("prometheus_multiproc_dir"))
    if path is None:
        return None
    if not path or not os.path.isdir(path):
        raise ImproperlyConfigured("PROMETHEUS_MULTIPROC_DIR is set but is not an existing directory: create it "
                                   "before the workers start, or unset the variable")
    return path


multiprocess_dir()  # a misconfigured directory stops start-up here, before any metric writes a file


REGISTRY = CollectorRegistry(auto_describe=True)

ROUNDS_RECEIVED = Counter("mrtrweb_rounds_received", "Rounds received from MCP servers (input requests "
                          "passed by the gate and audited).", ["method", "kind"], registry=REGISTRY)
ROUNDS_REJECTED = Counter("mrtrweb_rounds_rejected", "Rounds or answers refused (audited as rejected), by "
                          "code.", ["code"], registry=REGISTRY)
ROUNDS_ANSWERED = Counter("mrtrweb_rounds_answered", "Rounds answered (the retry recorded and read back), by "
                          "action.", ["action"], registry=REGISTRY)
DENIED = Counter("mrtrweb_denied", "Operations denied (nothing more sent), by reason.", ["reason"],
                 registry=REGISTRY)
AUDIT_EVENTS = Counter("mrtrweb_audit_events", "Audit events appended, by event.", ["event"], registry=REGISTRY)
AUDIT_FAILURES = Counter("mrtrweb_audit_failures", "Audit appends or read-backs that failed (the retry was not "
                         "sent).", registry=REGISTRY)
AUDIT_APPEND = Histogram("mrtrweb_audit_append_seconds", "Duration of one successful audit append (chain lock, "
                         "insert, head move, read-back when asked), seconds.", registry=REGISTRY,
                         buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15))
PUSH_LATENCY = Histogram("mrtrweb_push_latency_seconds", "Round received (its operation marked awaiting input) "
                         "to its card sent on a person's WebSocket, seconds.", registry=REGISTRY,
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
ROUND_LATENCY = Histogram("mrtrweb_round_latency_seconds", "Round received to its retry leaving (outcome "
                          "answered) or to the round ending otherwise (outcome ended), seconds.", ["outcome"],
                          registry=REGISTRY, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
                                                      300, 600, 1800, 3600))
GC_PAUSE = Histogram("mrtrweb_gc_pause_seconds", "Pauses of the cyclic garbage collector, by generation, "
                     "seconds.", ["generation"], registry=REGISTRY,
                     buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
OUTCOMES_HELD = Gauge("mrtrweb_outcomes_held", "Outcomes of calls this worker holds until the database answers "
                      "again (written once it does).", registry=REGISTRY, multiprocess_mode="livesum")
OUTCOMES_NOT_KEPT = Counter("mrtrweb_outcomes_not_kept", "Outcomes of calls not kept during a database outage "
                            "(MAX_HELD_OUTCOMES reached; the operation ends failed).", registry=REGISTRY)


_children: dict[tuple[Any, ...], Any] = {}


def _child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, cached (the label values come from bounded sets, so does the cache)."""
    key = (id(metric), *values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def bounded(value: Any, allowed: frozenset[str]) -> str:
    """``value`` when it is one of ``allowed``, else :data:`OTHER` (labels never grow unbounded)."""
    return value if isinstance(value, str) and value in allowed else OTHER


def round_action(actions: Any) -> str:
    """The label of a round's answer: its one action (``accept``/``decline``/``cancel``), ``mixed``
    when its requests were answered differently, :data:`OTHER` for anything else."""
    values = set(actions.values()) if isinstance(actions, dict) else set()
    if len(values) > 1:
        return "mixed" if values <= ACTIONS else OTHER
    return bounded(next(iter(values), None), ACTIONS - {"mixed"})


# ---------------------------------------------------------------------------------------------
# Round latency: when each round of this process was received (monotonic clock)
# ---------------------------------------------------------------------------------------------

#: the most rounds whose start this process remembers (the oldest are forgotten first); an entry
#: is the operation's UUID, the round number and a float: ~150-250 bytes (measured with tracemalloc)
MAX_TRACKED_ROUNDS = 50_000
_started: collections.OrderedDict[tuple[Any, int], float] = collections.OrderedDict()
_started_lock = threading.Lock()


def _round_started(key: tuple[Any, int], now: float) -> None:
    with _started_lock:
        _started[key] = now
        _started.move_to_end(key)
        while len(_started) > MAX_TRACKED_ROUNDS:
            _started.popitem(last=False)


def _round_start(key: tuple[Any, int]) -> float | None:
    with _started_lock:
        return _started.pop(key, None)


def observe_event(operation: Any, event: str, *, code: str = "", reason: str = "", round_number: int = 0,
                  actions: dict[str, str] | None = None, seconds: float | None = None, row: Any = None) -> None:
    """Count one audit event that was appended (called by :func:`mrtrweb.audit.events.record`).

    Args:
        operation: the :class:`~mrtrweb.models.Operation` (its ``id``, ``method``, ``status`` and
            ``updated_at`` are read; nothing is stored but its id with the round number).
        event: the event kind; ``code``/``reason``/``actions``: the event's, bucketed to fixed sets.
        round_number: the round the event belongs to (0: none).
        seconds: how long the append took (``mrtrweb_audit_append_seconds``).
        row: the row ``record`` returned when it was called with ``once``: a row older than this
            call (the receipt existed already, nothing appended) is not counted.

    Never raises (a failure is logged at DEBUG and the metric skipped).
    """
    try:
        now = time.monotonic()
        if row is not None and row.created_at.timestamp() < time.time() - (seconds or 0.0) - 0.001:
            return  # an existing receipt returned (``once``): nothing was appended
        _child(AUDIT_EVENTS, bounded(event, EVENTS)).inc()
        if seconds is not None:
            AUDIT_APPEND.observe(seconds)
        key = (operation.id, round_number)
        if event == "received":
            _child(ROUNDS_RECEIVED, bounded(operation.method, METHODS), _KIND_OF_CODE.get(code, "mrtr")).inc()
            if key[1]:
                _round_started(key, now - (seconds or 0.0))
            return
        if event == "rejected":
            _child(ROUNDS_REJECTED, bounded(code, REJECT_CODES)).inc()
            return  # a refused answer leaves the round open (a refused round never started one)
        if event == "denied":
            _child(DENIED, bounded(reason, DENY_REASONS)).inc()
        if event == "submitted":
            _child(ROUNDS_ANSWERED, round_action(actions)).inc()
        if key[1] and (event == "submitted" or event in _ENDING):
            started = _round_start(key)
            outcome = "answered" if event == "submitted" else "ended"
            if started is not None:
                _child(ROUND_LATENCY, outcome).observe(max(0.0, now - started))
            elif event == "submitted":  # received by another worker: from when it was handed to the person
                waited = _since_awaiting(operation)
                if waited is not None:
                    _child(ROUND_LATENCY, outcome).observe(waited)
    except Exception as exc:  # noqa: BLE001 -- metrics never break the product
        logger.debug("metrics: event not counted (%s)", exc.__class__.__name__)


def audit_failed() -> None:
    """Count one audit append or read-back that failed. Never raises."""
    try:
        AUDIT_FAILURES.inc()
    except Exception:  # noqa: BLE001
        pass


def _since_awaiting(operation: Any) -> float | None:
    """Seconds (wall clock) since ``operation`` was marked awaiting input, when it is."""
    if getattr(operation, "status", None) != "awaiting_input" or getattr(operation, "updated_at", None) is None:
        return None
    return max(0.0, time.time() - operation.updated_at.timestamp())


# ---------------------------------------------------------------------------------------------
# Push latency: a round's card sent on a socket (first time per socket and round)
# ---------------------------------------------------------------------------------------------

MAX_TRACKED_PUSHES = 10_000
_pushed: collections.OrderedDict[tuple[str, str, int], None] = collections.OrderedDict()
_pushed_lock = threading.Lock()


def observe_push(operation: Any, channel: str) -> None:
    """A card of ``operation`` was sent on the socket ``channel``: when it shows an open round
    (status ``awaiting_input``) and is the first push of this round on this socket, observe the
    time since the operation was marked awaiting input (its ``updated_at``, set by the worker that
    received the round, wall clock) in ``mrtrweb_push_latency_seconds``. Never raises."""
    try:
        waited = _since_awaiting(operation)
        if waited is None:
            return
        key = (str(channel), str(operation.id), int(operation.rounds))
        with _pushed_lock:
            if key in _pushed:
                return
            _pushed[key] = None
            while len(_pushed) > MAX_TRACKED_PUSHES:
                _pushed.popitem(last=False)
        PUSH_LATENCY.observe(waited)
    except Exception as exc:  # noqa: BLE001 -- metrics never break the product
        logger.debug("metrics: push not observed (%s)", exc.__class__.__name__)


# ---------------------------------------------------------------------------------------------
# Garbage collector pauses (gc.callbacks)
# ---------------------------------------------------------------------------------------------

_gc_started = [0.0]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_started[0] = time.perf_counter()
        return
    try:
        generation = info.get("generation")
        _child(GC_PAUSE, str(generation) if generation in (0, 1, 2) else OTHER).observe(
            time.perf_counter() - _gc_started[0])
    except Exception:  # noqa: BLE001 -- never raise inside the collector
        pass


def install_gc_hook() -> None:
    """Time every collection of this process (idempotent)."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


install_gc_hook()


# ---------------------------------------------------------------------------------------------
# Pending rounds per tenant (computed at scrape) and the exposition
# ---------------------------------------------------------------------------------------------

class PendingRoundsCollector:
    """``mrtrweb_pending_rounds{tenant="<pk>"}``: operations waiting for an answer, per tenant
    primary key, from one grouped query at scrape time (right across workers). When the database
    does not answer, the metric is left out of that scrape (logged), never an error."""

    def describe(self) -> list:
        return []

    def collect(self):
        from django.db.models import Count

        from ..models import Operation

        family = GaugeMetricFamily("mrtrweb_pending_rounds", "Operations waiting for a person's answer, per "
                                   "tenant (primary key).", labels=["tenant"])
        try:
            rows = (Operation.objects.filter(status=Operation.Status.AWAITING_INPUT).order_by()
                    .values_list("tenant_id").annotate(n=Count("id")))
            for tenant_id, count in rows:
                family.add_metric([str(int(tenant_id))], count)
        except Exception as exc:  # noqa: BLE001 -- a scrape never fails on the database
            logger.warning("metrics: pending rounds not counted (%s)", exc.__class__.__name__)
            return
        yield family


PENDING = PendingRoundsCollector()
REGISTRY.register(PENDING)




def _add_process_collectors() -> None:
    from prometheus_client import PlatformCollector, ProcessCollector

    ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes...
    PlatformCollector(registry=REGISTRY)


_add_process_collectors()


def registry() -> CollectorRegistry:
    """The registry a scrape reads: this process's (:data:`REGISTRY`, with the process and
    platform collectors), or in multiprocess mode one summing every worker's files plus
    :data:`PENDING`."""
    if multiprocess_dir():
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        merged.register(PENDING)
        return merged
    return REGISTRY


def exposition(accept: str | None) -> tuple[bytes, str]:
    """The text exposition for a scrape's ``Accept`` header: ``(body, content type)``
    (OpenMetrics when asked for, else the Prometheus text format 0.0.4). Sync: it queries the
    database (call it from a sync view)."""
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry()), content_type
