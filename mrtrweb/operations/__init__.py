"""Running operations: send through the user's MCP session, judge results with the gate, push
rounds to the browser, build and send retries (the Django edge around :mod:`mrtrweb.gate`).

Everything here runs on the ASGI server's event loop. A call returns as soon as the operation is
registered and its request is scheduled; results arrive in a background task that updates the
:class:`~mrtrweb.models.Operation` row, writes audit events and notifies the user's WebSocket
group ``mrtrweb.user.<id>``.

One round, from the wire to the card to the retry (MCP 2026-07-28, Multi Round-Trip Requests):

1. :mod:`.starting` -- :func:`start_operation`: limits, the row, ``Gate.register``; the call
   goes out in the background.
2. :mod:`.calls` -- ``_drive``: the request is sent on the user's connection
   (:mod:`mrtrweb.servers.connections`), progress pushed, Stop polled.
3. :mod:`.rounds` -- ``_handle_result``: a final result completes the operation; an
   ``input_required`` result is judged by ``Gate.receive``, audited (``received``) and handed to
   the person: the card is rendered by :mod:`mrtrweb.consent.panels` and pushed.
4. :mod:`.answers` -- :func:`answer_round`: the person's answer (browser or headless) is
   re-checked (access, consent receipt, authorization, configuration; read in one statement by
   :mod:`.answer_reads`).
5. :mod:`.retries` -- ``build_and_record``: ``Gate.respond`` builds the retry once, its
   ``submitted`` event is read back; then :mod:`.calls` sends it, and the loop goes on at 2.

Each phase does its database and binding-store work in one ``sync_to_async`` hop, the owner's
access checked in that same hop (in the ``WHERE`` of the row move that hands the operation to a
send): ``_start_sync``, ``_judge_round``, the card's receipt, ``_answer_sync`` (every check, the
retry built and audited, the row moved), ``_check_and_complete`` (a small final result checked,
stored and the operation completed; a big one is checked off the sync thread first);
tests/operations/test_round_cost.py counts the statements (9 on PostgreSQL) and hops (4) of one
headless round, and docs/round.md lists them. :mod:`.hops` says where a phase's hop runs: asgiref's one
sync thread, or with ``ROUND_THREADS`` on PostgreSQL one of the round's own threads.

Around it: :mod:`.legacy` (2025-11-25 servers ask during the open call), :mod:`.stopping`
(Stop, deny, access ended), :mod:`.reaping` (a dead worker's operations), :mod:`.revocation`
(access that ends through the ORM ends pending operations), :mod:`.messages` (what the person
reads, the product's codes), :mod:`.authorization` (the identity a request goes out with),
:mod:`.runtime` (tasks, rows, audit, pushes, ending an operation once), :mod:`.holding` (an outcome
held through a database outage of any length; the operations this process follows), :mod:`.untracked`
(an operation naming a worker that does not follow it: ended by that worker, or by ``mrtr_reconcile``),
:mod:`.expiry` (rounds that expire by themselves, swept by every worker's heartbeat), :mod:`.serverlog`
(a server's log messages during a call, at the person's level, pushed to the operation page).

What other packages use is public here: :func:`finish_operation` (ending an operation once),
:func:`load_operation`, :data:`running_tasks`, :func:`build_and_record`, :func:`parse_final`.
"""

from __future__ import annotations

from ..servers.connections import connection_for, pool
from ..runtime.gates import get_gate, handle_of, reset_gate
from ..runtime.push import user_group
from .answers import answer_round
from .legacy import legacy_hold, legacy_hold_s
from .messages import (ANSWER_PENDING, AUDIT_UNAVAILABLE, AUTHORIZATION_CHANGED, AUTHORIZATION_CODES, DENY_MESSAGES,
                       INVALID_RESULT, LEGACY, LEGACY_KEYS, LIMIT_REACHED, MESSAGES, STATE_REUSED,
                       STATE_REUSED_REASON, STOP_UNDELIVERED, STOPPED_BY, STOPPED_BY_AT_ROUND, STORE_UNAVAILABLE,
                       UNAVAILABLE_CODES, WORKER_DRAINING, AnswerPending, OperationRefused, failure_message,
                       message_for, server_error_text)
from .reaping import reap_interrupted
from .retries import build_and_record
from .revocation import end_operation, operation_and_state, operation_for
from .rounds import parse_final
from .runtime import Change, finish_operation, load_operation, running_tasks, new_request_id, notify, wait_idle, watching
from .starting import start_operation
from .stopping import deny, finish_interrupted, request_stop, stop_operation

__all__ = [
    "ANSWER_PENDING", "AUDIT_UNAVAILABLE", "Change", "AUTHORIZATION_CHANGED", "AUTHORIZATION_CODES", "DENY_MESSAGES",
    "INVALID_RESULT", "LEGACY", "LEGACY_KEYS", "LIMIT_REACHED", "MESSAGES", "STATE_REUSED", "STATE_REUSED_REASON",
    "STOPPED_BY", "STOPPED_BY_AT_ROUND", "STOP_UNDELIVERED", "STORE_UNAVAILABLE", "UNAVAILABLE_CODES",
    "WORKER_DRAINING", "AnswerPending", "OperationRefused", "answer_round", "connection_for", "deny", "end_operation",
    "failure_message", "finish_interrupted", "get_gate", "handle_of", "legacy_hold", "legacy_hold_s", "message_for",
    "new_request_id", "notify", "operation_and_state", "operation_for", "pool", "reap_interrupted", "request_stop", "reset_gate",
    "server_error_text", "start_operation", "stop_operation", "user_group", "wait_idle", "watching",
    # used by the drain, the benchmark and tests
    "build_and_record", "finish_operation", "load_operation", "parse_final", "running_tasks",
]
