"""Running operations: send through the user's MCP session, judge results with the gate, push
rounds to the browser, build and send retries (the Django edge around :mod:`mrtrweb.gate`).

Everything here runs on the ASGI server's event loop. A call returns as soon as the operation is
registered and its request is scheduled; results arrive in a background task that updates the
:class:`~mrtrweb.models.Operation` row, writes audit events and notifies the user's WebSocket
group ``mrtrweb.user.<id>``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import logging
import time
import unicodedata
import uuid
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.utils import timezone

from . import audit, conf, display, outage, push, results
from .bindings import configured_store
from .gate import Gate, GateRejection, OperationHandle, Retry, Round, StoreUnavailable, codes
from .handover import put_answer as _put_answer, settle as _settle, take_answer as _take_answer, \
    unsettle as _unsettle
from .connections import HANDSHAKE_VERSIONS as _HANDSHAKE_VERSIONS, connection_for, pool  # noqa: F401 -- re-exported
from .connections import declared as _declared
from .mcp import McpCallError
from .names import stored_name
from .models import McpServer, Operation

logger = logging.getLogger("mrtrweb.operations")

#: product error codes (besides the gate's): shown to the person and recorded
STORE_UNAVAILABLE = "binding_store_unavailable"
AUDIT_UNAVAILABLE = "audit_unavailable"
INVALID_RESULT = "invalid_result"
LIMIT_REACHED = "limit_reached"
#: an answer consumed and audited while the database went away: this worker sends it once it is back
ANSWER_PENDING = "answer_pending"
#: a new operation refused because this worker is draining (mrtrweb.drain): HTTP 503, nothing sent
WORKER_DRAINING = "worker_draining"
#: deny reason: the authorization identity differs from the one the original request went out with
AUTHORIZATION_CHANGED = "authorization_changed"
#: a call that stopped on authorization (issue 13): 401, 403 insufficient_scope, credentials refused
AUTHORIZATION_CODES = frozenset({"authorization_required", "insufficient_scope", "authorization_failed"})

MESSAGES = {
    STORE_UNAVAILABLE: "The round store is unavailable right now; nothing was sent. Try again shortly.",
    AUDIT_UNAVAILABLE: "The audit trail could not be written; your answer was not sent.",
    INVALID_RESULT: "The server's result is malformed and was refused.",
    "transport_error": "The MCP server could not be reached.",
    "jsonrpc_error": "The MCP server answered with an error.",
    "timeout": "The MCP server did not answer in time.",
    # issue 13: 401 / 403 insufficient_scope / the authorization server refused (never transport_error)
    "authorization_required": "The MCP server asks for authorization (HTTP 401): connect your account to it, "
                              "or ask a tenant admin to check its credentials. Nothing more was sent.",
    "insufficient_scope": "The MCP server needs permissions your connection does not grant (HTTP 403, "
                          "insufficient_scope): connect again to grant them. Nothing more was sent.",
    "authorization_failed": "The credentials were refused (by the MCP server, HTTP 403, or by its authorization "
                            "server). Nothing more was sent.",
    "inactive_mrtr_round": "This round is no longer open: it was already answered, expired or ended.",
    "mrtr_round_limit_exceeded": "The server asked for more rounds than allowed; the operation was stopped.",
    ANSWER_PENDING: "Your answer was recorded, but the database became unreachable before it could go out. "
                    "It goes out by itself as soon as the database is back; do not answer again.",
    "worker_lost": "The worker handling this call stopped before the server answered. Nothing more will be "
                   "sent for it; you may run it again.",
    # mrtrweb.drain: a graceful stop (a deploy, a restart) that could not wait for the call
    "worker_stopped": "The worker handling this call was restarted (a deploy or a restart) before the server "
                      "answered. Nothing more will be sent for it; you may run it again.",
    WORKER_DRAINING: "This worker is restarting; nothing was sent; try again.",
}


#: at most this many characters of a server's own error message are shown to the person
SERVER_ERROR_SHOWN_CHARS: Final = 300


def server_error_text(text: Any) -> str:
    """A server's JSON-RPC error message made fit to show: control and format characters (bidi
    overrides, zero-width, newlines) become spaces, whitespace is collapsed, and it is cut to
    :data:`SERVER_ERROR_SHOWN_CHARS` characters (with "…"). Not HTML-escaped (templates do that).
    Returns ``""`` for a non-string or blank message."""
    if not isinstance(text, str):
        return ""
    cleaned = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    cleaned = " ".join(cleaned.split())
    if len(cleaned) > SERVER_ERROR_SHOWN_CHARS:
        cleaned = cleaned[: SERVER_ERROR_SHOWN_CHARS - 1].rstrip() + "…"
    return cleaned


def failure_message(exc: McpCallError) -> str:
    """What the person reads when a call failed: the stable message of ``exc.code`` and, for a
    JSON-RPC error, the server's own code and message (:func:`server_error_text`), for the
    :data:`AUTHORIZATION_CODES` the ``error`` and ``error_description`` of its ``WWW-Authenticate``
    challenge (cleaned the same way; never a token); an error's own ``shown_message`` (the
    product's text, e.g. client credentials without a configured issuer) as it is. Stored on the
    operation and shown escaped; never logged or written to the audit trail (it is server text
    and may echo what was sent)."""
    own = getattr(exc, "shown_message", None)  # the product's own words (no request was sent)
    if isinstance(own, str) and own:
        return own
    message = message_for(exc.code)
    said = server_error_text(exc.rpc_message) if exc.code == "jsonrpc_error" else ""
    if said:
        code = f" {exc.rpc_code}" if isinstance(exc.rpc_code, int) else ""
        message += f" It said (JSON-RPC error{code}): {said}"
    elif exc.code in AUTHORIZATION_CODES:
        # the server's WWW-Authenticate error / error_description (or the authorization server's), cleaned
        challenge = getattr(exc, "challenge", None) or {}
        said = server_error_text(": ".join(str(challenge[k]) for k in ("error", "error_description")
                                           if isinstance(challenge.get(k), str) and challenge[k]))
        if said:
            message += f" It said: {said}"
    return message


def message_for(code: str) -> str:
    return MESSAGES.get(code, f"The server's request was refused by the gate ({code}).")


def new_request_id() -> str:
    """A fresh JSON-RPC id: a UUID string, unique across workers and connections."""
    return f"mrtr-{uuid.uuid4()}"


def user_group(user_id: Any) -> str:
    """The Channels group of one user's browser connections."""
    return f"mrtrweb.user.{user_id}"


_gate: Gate | None = None


def get_gate() -> Gate:
    """The process's gate over the configured binding store and policy."""
    global _gate
    if _gate is None:
        _gate = Gate(configured_store(), conf.policy())
    return _gate


def reset_gate() -> None:
    """Forget the cached gate (tests that change settings)."""
    global _gate
    _gate = None


_tasks: set[asyncio.Task] = set()


def handle_of(op: Operation) -> OperationHandle:
    return OperationHandle(str(op.tenant_id), str(op.id))


def _spawn(coro) -> asyncio.Task:
    """Run ``coro`` in the background, outside the request's context: its ORM calls then share the
    process's one sync thread (one database connection) instead of pinning a connection in the
    finished request's thread for as long as the MCP server takes."""
    task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return task


async def wait_idle(timeout: float = 10.0) -> None:
    """Wait until no operation task of this loop is running (tests)."""
    loop = asyncio.get_running_loop()
    pending = [t for t in _tasks if t.get_loop() is loop]
    if pending:
        await asyncio.wait(pending, timeout=timeout)


async def notify(op: Operation) -> None:
    """Tell the user's browsers that the operation changed (they re-render it server-side).
    Never raises: a push the channel layer cannot take is logged (:mod:`mrtrweb.push`)."""
    await push.group_send(user_group(op.user_id), {"type": "operation.update", "operation_id": str(op.id)},
                          what="operation update")


async def _load(op_id: Any) -> Operation:
    return await Operation.objects.select_related("server", "tenant", "user").aget(pk=op_id)


async def _audit(op: Operation, event: str, **kw: Any) -> None:
    await sync_to_async(audit.record)(op, event, **kw)


async def _finish(op: Operation, status: str, *, code: str = "", message: str = "", result: Any = None,
                  event: str | None = None, already_marked: bool = False, reason: str = "") -> None:
    """End an operation once: update its row (only if it is not already terminal), close its
    binding, write the terminal audit event and tell the browsers."""
    op.status = status
    op.error_code = code
    op.error_message = message[:500]
    if result is not None:
        # within MAX_STORED_RESULT_BYTES; off the event loop (a result may be megabytes of JSON)
        op.result = await sync_to_async(results.for_storage, thread_sensitive=False)(result, op_id=op.id)
    fields = {"status": status, "error_code": code, "error_message": op.error_message, "result": op.result,
              "worker": "", "round_expires_at": None, "updated_at": timezone.now()}
    if not already_marked:
        updated = await Operation.objects.filter(pk=op.pk).exclude(status__in=Operation.TERMINAL).aupdate(**fields)
        if not updated:
            logger.info("operation %s was already ended; late outcome %s ignored", op.id, status)
            return
    else:  # marked by a conditional update of its own (reaper, drain, access): end it cleanly
        await Operation.objects.filter(pk=op.pk).aupdate(error_message=op.error_message, worker="",
                                                         round_expires_at=None)
    try:
        await sync_to_async(get_gate().close)(handle_of(op))
    except StoreUnavailable:
        logger.warning("could not close binding of operation %s (store unavailable); it expires on its own", op.id)
    try:
        await _audit(op, event or ("completed" if status == Operation.Status.COMPLETED else "failed"), code=code,
                     reason=reason, round_number=op.rounds, request_id=op.latest_request_id)
    except audit.AuditUnavailable:
        pass  # logged by audit.record
    await notify(op)


async def start_operation(*, user: Any, server: McpServer, method: str, name: str, params: dict[str, Any]) -> Operation:
    """Register and start an operation; returns at once (the request goes out in the background).

    Raises:
        OperationRefused: this worker is draining (``worker_draining``, 503), a per-user limit is
            reached, or the binding store is unavailable.
        django.db.DatabaseError: the database is unreachable (nothing was sent).
    """
    from . import drain, workers

    if drain.is_draining():
        logger.info("operation refused: worker %s is draining", workers.WORKER_ID)
        raise OperationRefused(WORKER_DRAINING, message_for(WORKER_DRAINING))
    await _check_limits(user, server.tenant_id)
    request_id = new_request_id()
    auth = await _current_auth(server, user.pk, server.tenant_id)
    await workers.ensure_lease()  # before the operation names this worker
    op = await Operation.objects.acreate(
        tenant_id=server.tenant_id, user=user, server=server, method=method, name=stored_name(name),
        params=results.params_for_storage(params),
        request_id=request_id, latest_request_id=request_id, worker=workers.WORKER_ID, **auth,
    )
    op.server = server
    try:
        await sync_to_async(get_gate().register)(
            request_id=request_id, server_id=str(server.pk), origin=server.origin, user=str(user.pk),
            tenant=str(server.tenant_id), method=method, params=params, operation_id=str(op.id),
            policy=conf.server_policy(server),
        )
    except StoreUnavailable:
        op.status = Operation.Status.FAILED
        op.error_code = STORE_UNAVAILABLE
        op.error_message = message_for(STORE_UNAVAILABLE)
        op.worker = ""
        await op.asave()
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    _spawn(_drive(op.id, request_id, params))
    return op


#: refusals that a service of ours being down caused (the binding store, the audit trail): the
#: only ones answered "503 Service Unavailable"; every other refusal of an answer means this
#: round can no longer be answered (denied, ended, its worker gone): 409 Conflict
UNAVAILABLE_CODES = frozenset({STORE_UNAVAILABLE, AUDIT_UNAVAILABLE, WORKER_DRAINING, ANSWER_PENDING})


class OperationRefused(Exception):
    """An operation or an answer was refused before anything was sent; ``status`` is the HTTP
    status of an answer refused so (503 for :data:`UNAVAILABLE_CODES`, else 409)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = 503 if code in UNAVAILABLE_CODES else 409


async def _current_auth(server: McpServer, user_id: Any, tenant_id: Any) -> dict[str, str]:
    """The authorization identity a request to ``server`` goes out with now, for ``user_id``, as the
    digests an operation and its audit rows record (:func:`mrtrweb.authz.identity.binding_fields`)."""
    from .authz import identity

    return identity.binding_fields(await identity.identity_for(server=server, user=user_id, tenant=tenant_id))


async def _authorization_changed(op: Operation) -> dict[str, str] | None:
    """The current authorization digests when they differ from those the operation's original
    request went out with (the person disconnected, connected another account, a tenant credential
    was replaced, the server's auth mode changed), else None. ``op.server`` is re-read first: an
    admin's change made a moment ago counts. A refresh keeps them (same token family)."""
    server = await McpServer.objects.aget(pk=op.server_id)
    now = await _current_auth(server, op.user_id, op.tenant_id)
    recorded = {name: getattr(op, name) for name in now}
    return None if now == recorded else now


async def _check_limits(user: Any, tenant_id: Any) -> None:
    """Refuse a new operation when the user or the tenant has too many rounds waiting for an
    answer, or started too many operations in the last minute (``MRTRWEB`` limits)."""
    since = timezone.now() - timezone.timedelta(minutes=1)
    waiting = Operation.Status.AWAITING_INPUT
    checks = (
        (Operation.objects.filter(user=user, status=waiting), "MAX_PENDING_ROUNDS",
         "You have too many rounds waiting for an answer; answer or let them expire first."),
        (Operation.objects.filter(user=user, created_at__gte=since), "MAX_STARTS_PER_MINUTE",
         "You started too many operations in the last minute; wait a moment."),
        (Operation.objects.filter(tenant_id=tenant_id, status=waiting), "MAX_TENANT_PENDING_ROUNDS",
         "Your organisation has too many rounds waiting for an answer right now; try again later."),
        (Operation.objects.filter(tenant_id=tenant_id, created_at__gte=since), "MAX_TENANT_STARTS_PER_MINUTE",
         "Your organisation started too many operations in the last minute; wait a moment."),
    )
    for queryset, key, message in checks:
        if await queryset.acount() >= int(conf.get(key)):
            logger.info("limit %s reached for user %s / tenant %s", key, getattr(user, "pk", "?"), tenant_id)
            raise OperationRefused(LIMIT_REACHED, message)


def _is_final(raw: Any) -> bool:
    """A result that claims to be final: an object with ``resultType`` absent (older servers) or
    ``"complete"`` and no MRTR payload. Anything else goes to the gate."""
    if not isinstance(raw, dict):
        return False
    if "inputRequests" in raw or "requestState" in raw:
        return False
    return "resultType" not in raw or raw["resultType"] == "complete"


#: per method: the list of a final result that may be long (checked item by item, see _parse_final)
_FINAL_LISTS = {"tools/call": "content", "prompts/get": "messages", "resources/read": "contents"}


@functools.cache
def _final_adapters(method: str) -> tuple[Any, Any] | None:
    """The SDK model of ``method``'s final result and a TypeAdapter of one item of its long list."""
    import mcp_types
    from pydantic import TypeAdapter

    model = {"tools/call": mcp_types.CallToolResult, "prompts/get": mcp_types.GetPromptResult,
             "resources/read": mcp_types.ReadResourceResult}.get(method)
    if model is None:
        return None
    field = model.model_fields[_FINAL_LISTS[method]]
    return model, TypeAdapter(field.annotation.__args__[0])


def _parse_final(method: str, raw: dict[str, Any]) -> bool:
    """Whether the SDK accepts the final result for ``method``.

    Blocking; run it off the event loop. The long list (``content``, ``messages``, ``contents``) is
    checked one item at a time, so a result of many thousands of blocks never holds the GIL (and
    so the event loop) for the whole check."""
    from pydantic import ValidationError

    adapters = _final_adapters(method)
    if adapters is None:
        return True
    model, item = adapters
    body = {k: v for k, v in raw.items() if k != "resultType"}
    key = _FINAL_LISTS[method]
    listed = body.get(key)
    try:
        if isinstance(listed, list):
            model.model_validate({**body, key: []})
            for value in listed:
                item.validate_python(value)
        else:
            model.model_validate(body)
    except (ValidationError, ValueError, TypeError):
        return False
    return True


async def finish_interrupted(op: Operation) -> None:
    """Settle an operation whose worker died during a call (already marked ``interrupted``)."""
    from .workers import WORKER_LOST

    await _finish(op, Operation.Status.INTERRUPTED, code=WORKER_LOST, message=message_for(WORKER_LOST),
                  event="failed", already_marked=True)


#: reasons of a ``denied`` outcome (issue "audit trail", deny conditions)
DENY_MESSAGES = {
    "missing_consent_receipt": "No record shows that this round was displayed to you, so no answer is sent for it.",
    "request_state_replayed": "The server sent again a requestState this operation had already sent back in an "
                              "earlier round; the operation was stopped and nothing was sent.",
    "server_config_changed": "The server's configuration changed after it asked (its name, address, or what it "
                             "may ask for, such as roots or sampling): this round can no longer be answered, and "
                             "your answer was not sent.",
    "timeout": "This round expired before the answer arrived; nothing was sent.",
    "cancelled": "You stopped this operation; nothing was sent for its open round.",
    AUDIT_UNAVAILABLE: "The audit trail could not be written or read back; your answer was not sent.",
    "deprecated_request_refused": "You refused the server's sampling or roots request; the operation ended and "
                                  "nothing was sent to the server.",
    "legacy_handover_failed": "Your answer was accepted but could not be handed to the worker holding the "
                              "server's call; the server was told cancel.",
    "access_revoked": "Your access to this server or organisation ended; nothing more was sent for this "
                      "operation.",
    AUTHORIZATION_CHANGED: "The authorization this operation started with changed before its answer could go "
                           "out (you disconnected from the server or connected another account, or its "
                           "credentials were replaced): nothing was sent. You may run it again.",
}


async def deny(op: Operation, reason: str) -> None:
    """End the operation with a ``denied`` outcome for ``reason``; nothing more is sent for it."""
    logger.info("operation %s denied: %s", op.id, reason)
    await _finish(op, Operation.Status.DENIED, code="denied", reason=reason,
                  message=DENY_MESSAGES.get(reason, "The answer was denied."), event="denied")


def _last_answer_was_cancel(op_id: Any) -> bool:
    """Whether the person's last answer of the operation was Cancel on every request (the outcome
    is then ``cancelled``: the server was told, and finished)."""
    from .models import AuditEvent

    actions = AuditEvent.objects.filter(operation_id=op_id, event="submitted").order_by("-sequence") \
        .values_list("actions", flat=True).first()
    return bool(actions) and set(actions.values()) == {"cancel"}


#: who stops an operation (:func:`stop_operation`), and what the operation's page then says
STOPPED_BY: Final = {
    "person": "You stopped this operation; the call was cancelled at the server.",
    "headless_timeout": "The headless client's time limit passed; the call was cancelled at the server.",
}
#: the same, when the operation was stopped while a round waited for its answer
STOPPED_BY_AT_ROUND: Final = {
    "person": DENY_MESSAGES["cancelled"],
    "headless_timeout": "The headless client's time limit passed; nothing was sent for its open round.",
}


#: the 503 page of a Stop the worker driving the call cannot be told about (the cache is down)
STOP_UNDELIVERED: Final = ("The stop could not be passed on to the worker running this call: a service it needs is "
                           "unreachable right now. The call goes on; please try Stop again in a moment.")


async def stop_operation(op: Operation, *, by: str = "person") -> bool:
    """Stop an operation: the person's Stop, or ``by="headless_timeout"`` (see :data:`STOPPED_BY`).
    A round waiting for an answer: its binding is closed, nothing is sent, the outcome is
    ``denied`` (reason ``cancelled``). A call in flight: the worker driving it (any worker) cancels
    the request within ``STOP_POLL_S`` and ends it the same way. Returns False when the operation
    had already ended.

    Raises:
        ValueError: ``by`` is not a key of :data:`STOPPED_BY`.
        mrtrweb.outage.ServiceUnavailable: a call in flight, and its stop request cannot be
            written (the cache is down): nothing changed (:data:`STOP_UNDELIVERED`, a 503)."""
    if by not in STOPPED_BY:
        raise ValueError(f"by must be one of {sorted(STOPPED_BY)}")
    op = await _load(op.pk)
    if op.status == Operation.Status.AWAITING_INPUT:
        logger.info("operation %s denied: cancelled (by: %s)", op.id, by)
        await _finish(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                      message=STOPPED_BY_AT_ROUND[by])
        # a legacy server may be holding its call open for this round: the worker holding it
        # answers the server "cancel" when it sees the stop (see _hold)
        try:
            await sync_to_async(request_stop)(op.id, by)
        except Exception:  # noqa: BLE001 -- the holder still sees the operation ended within a second
            logger.warning("could not write the stop request of operation %s", op.id)
        return True
    if op.status == Operation.Status.RUNNING:
        try:
            await sync_to_async(request_stop)(op.id, by)
        except Exception as exc:
            if outage.kind(exc) is None:
                raise
            raise outage.ServiceUnavailable("cache", STOP_UNDELIVERED) from exc
        return True
    return False


async def _access_ended(op: Operation) -> bool:
    """Whether the owner's access to ``op`` ended (:mod:`mrtrweb.access`); it is then ended as
    ``denied`` (``access_revoked``) and nothing more is sent for it."""
    from . import access

    cause = await access.operation_denial(op)
    if cause:
        await access.end_operation(op, cause)
    return bool(cause)


def _shown_exists(op_id: Any, round_number: int) -> bool:
    from .models import AuditEvent

    return AuditEvent.objects.filter(operation_id=op_id, round_number=round_number, event="shown").exists()


def _received_config(op_id: Any, round_number: int) -> str | None:
    from .models import AuditEvent

    row = AuditEvent.objects.filter(operation_id=op_id, round_number=round_number, event="received") \
        .order_by("-sequence").values_list("config_digest", flat=True).first()
    return row


#: the code of a ``received`` row whose ``requestState`` another operation of the tenant also
#: received: legal (the state is opaque, a server may mint it deterministically), so it is recorded
#: for the tenant's admins (history, ``mrtr_reconcile``) and never denied
STATE_REUSED: Final = "request_state_reused"
STATE_REUSED_REASON: Final = "the same requestState was received by another operation of this tenant (not a replay)"


def _state_seen(op: Operation, state_digest: str, round_number: int) -> tuple[bool, bool]:
    """Where the tenant's audit trail already holds ``state_digest`` (a ``received`` row), sync.

    Returns ``(replayed, reused)``: *replayed* -- another round of **this** operation received it,
    so its retry already sent that state back (denied: ``request_state_replayed``); *reused* --
    another operation of the tenant (same or another user) received it (recorded as
    :data:`STATE_REUSED`, not denied)."""
    from .models import AuditEvent

    rows = AuditEvent.objects.filter(tenant_id=op.tenant_id, event="received", state_digest=state_digest)
    replayed = rows.filter(operation_id=op.id).exclude(round_number=round_number).exists()
    return replayed, rows.exclude(operation_id=op.id).exists()


_STOPPED = object()
#: seconds between two checks of a stop request while a call is in flight
STOP_POLL_S = 0.25


def _stop_key(op_id: Any) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:stop:{op_id}"


def request_stop(op_id: Any, by: str = "person") -> None:
    """Ask whichever worker drives the operation to abandon its in-flight call (sync); ``by`` is
    who stops it (a key of :data:`STOPPED_BY`)."""
    from django.core.cache import caches

    caches[conf.get("BINDING_CACHE")].set(_stop_key(op_id), by, timeout=int(conf.get("TTL_S")))


def _stop_requested(op_id: Any) -> str | None:
    """Who asked to stop the operation (a key of :data:`STOPPED_BY`), or None."""
    from django.core.cache import caches

    try:
        by = caches[conf.get("BINDING_CACHE")].get(_stop_key(op_id))
    except Exception:  # noqa: BLE001 -- a cache outage never stops a call by itself
        return None
    if by is None:
        return None
    return by if by in STOPPED_BY else "person"


async def _send_cancellable(op: Operation, conn: Any, params: dict[str, Any], request_id: str,
                            call: "_Call | None" = None) -> Any:
    """Send one request, pushing its progress notifications to the user's browsers, and abandon it
    when the person stops the operation: the SDK then cancels the request (``notifications/cancelled``
    on a stream transport; on 2026-07-28 Streamable HTTP the request's POST is closed). Returns the
    raw result, or ``_STOPPED``.

    With ``call``, requests the server sends during the call (2025-11-25) become rounds of the
    operation (:func:`_on_server_request`); while one is held for the person, a stop is answered
    there first ("cancel" to the server), and the call is abandoned after."""
    last_push = 0.0

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        nonlocal last_push
        now = asyncio.get_running_loop().time()
        if now - last_push < 0.2 and (total is None or progress < total):
            return  # throttled
        last_push = now
        await push.group_send(user_group(op.user_id), {
            "type": "operation.progress", "operation_id": str(op.id), "progress": progress, "total": total,
            # server text: pushed as data (the page sets it as textContent), bidi/controls visible
            "message": display.shown(message[:200]) if isinstance(message, str) else ""}, what="progress")

    extra: dict[str, Any] = {}
    if call is not None:
        extra["on_server_request"] = lambda method, p: _on_server_request(call, method, p)
    task = asyncio.ensure_future(conn.send(op.method, params, request_id, on_progress=on_progress, **extra))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=STOP_POLL_S)
            if done:
                return task.result()
            if call is not None and call.holding:
                continue  # the held round answers the stop first (see _hold)
            by = await sync_to_async(_stop_requested)(op.id)
            if by:
                task.cancel()
                # let the SDK queue its notifications/cancelled (2025-11-25 sessions) before the
                # operation ends and a per-operation connection is closed
                await asyncio.wait({task}, timeout=1.0)
                logger.info("operation %s stopped during the call (by: %s)", op.id, by)
                await _finish(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                              message=STOPPED_BY[by])
                return _STOPPED
    finally:
        if not task.done():
            task.cancel()


async def _drive(op_id: Any, request_id: str, params: dict[str, Any]) -> None:
    """Send one request of the operation and follow it until it needs the person or ends. The
    operation names this worker (``Operation.worker``) while it does: set by
    :func:`start_operation` or :func:`_build_and_record`, after the lease was written."""
    from .workers import WORKER_ID, ensure_heartbeat, ensure_lease

    try:
        await ensure_heartbeat()
        op = await _load(op_id)
        if op.worker != WORKER_ID:  # an operation started before this worker ran the call
            await ensure_lease()
            await Operation.objects.filter(pk=op.pk).exclude(status__in=Operation.TERMINAL).aupdate(
                worker=WORKER_ID, updated_at=timezone.now())
            op.worker = WORKER_ID
        while True:
            if await _access_ended(op):
                return
            call = _Call(op, request_id)
            dedicated = ""
            try:
                declare, suffix = _declared(op.server)
                # the operation's own user's credentials, never anyone else's
                conn = await connection_for(op.user, op.server, key=f"{op.server_id}{suffix}", declare=declare)
                if conn.protocol_version in _HANDSHAKE_VERSIONS:
                    # A legacy server asks during the call, and its requests can only be matched to a
                    # call as the one in flight on a connection: each operation gets its own.
                    dedicated = f"{op.server_id}{suffix}/operation:{op.id}"
                    conn = await connection_for(op.user, op.server, key=dedicated, declare=declare)
                try:
                    raw = await _send_cancellable(op, conn, params, request_id, call)
                finally:
                    if dedicated:
                        await pool().close(str(op.user_id), dedicated)
                await _database_back(op_id)
                if call.rounds:  # legacy rounds were answered during the call: the row moved on
                    op = await _load(op_id)
                if raw is _STOPPED:
                    return
            except McpCallError as exc:
                logger.info("operation %s: MCP call failed (%s)", op.id, exc.code)
                await _database_back(op_id)
                if exc.code == "insufficient_scope":
                    await _note_challenge(op, exc)
                if call.rounds:
                    op = await _load(op_id)
                await _finish(op, Operation.Status.FAILED, code=exc.code, message=failure_message(exc))
                return
            if await _access_ended(op):
                return
            nxt = await _handle_result(op, call.gate_id, raw)
            if nxt is None:
                return
            request_id, params = nxt.id, nxt.params
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 -- never leave an operation spinning
        logger.exception("operation %s crashed", op_id)
        try:
            op = await _load(op_id)
            await _finish(op, Operation.Status.FAILED, code="internal_error",
                          message="The operation stopped on an internal error; nothing more was sent.")
        except Exception:  # noqa: BLE001
            logger.exception("operation %s could not be marked failed", op_id)
    finally:
        await sync_to_async(close_old_connections)()


#: the longest the outcome of a call waits for the database to answer again (an outage during
#: the call or as its result arrives), seconds; then it is handled anyway (and fails, logged)
RESULT_DB_WAIT_S: Final = 60.0


async def _database_back(op_id: Any) -> None:
    """Before a call's outcome is written: the process's shared sync-thread connection may have
    been broken by a database outage during the call (it is held across the call, and a broken
    connection is never reconnected by itself). Give it back (a broken one is discarded) and read
    the operation's status on a fresh one, retrying with pauses while the database is down, up to
    :data:`RESULT_DB_WAIT_S`. The server's result is then not lost to a blip that is over."""
    from django.db import DatabaseError

    deadline = time.monotonic() + RESULT_DB_WAIT_S
    pause, warned = 0.2, False
    while True:
        try:
            await sync_to_async(close_old_connections)()
            await Operation.objects.filter(pk=op_id).values_list("status", flat=True).afirst()
            if warned:
                logger.warning("operation %s: the database answers again; the outcome is written now", op_id)
            return
        except DatabaseError as exc:
            if time.monotonic() >= deadline:
                logger.error("operation %s: the database did not answer for %ss after the call (%s)", op_id,
                             RESULT_DB_WAIT_S, exc.__class__.__name__)
                return
            if not warned:
                warned = True
                logger.warning("operation %s: the call ended while the database is unreachable (%s); its outcome "
                               "waits for it (up to %ss)", op_id, exc.__class__.__name__, RESULT_DB_WAIT_S)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)


async def _handle_result(op: Operation, request_id: str, raw: Any) -> Retry | None:
    """Judge one result. Returns the retry to send next (state-only rounds), or None."""
    gate = get_gate()
    if _is_final(raw):
        # off the event loop: a result may hold hundreds of thousands of blocks
        if not await sync_to_async(_parse_final, thread_sensitive=False)(op.method, raw):
            logger.info("operation %s: final result refused by the SDK types", op.id)
            await _finish(op, Operation.Status.FAILED, code=INVALID_RESULT, message=message_for(INVALID_RESULT))
            return None
        cancelled = await sync_to_async(_last_answer_was_cancel)(op.id)
        await _finish(op, Operation.Status.COMPLETED, result=raw, event="cancelled" if cancelled else "completed")
        return None
    try:
        rnd: Round = await sync_to_async(gate.receive)(
            tenant=str(op.tenant_id), user=str(op.user_id), request_id=request_id, origin=op.server.origin, result=raw)
    except GateRejection as exc:
        logger.info("operation %s: round refused (%s): %s", op.id, exc.code, exc.reason)
        try:
            await _audit(op, "rejected", code=exc.code, reason=exc.reason, round_number=op.rounds + 1,
                         request_id=request_id)
        except audit.AuditUnavailable:
            pass
        # The gate's reason names the refused check (never a value), e.g. which method was asked.
        await _finish(op, Operation.Status.FAILED, code=exc.code,
                      message=f"{message_for(exc.code)} Reason: {exc.reason}.")
        return None
    except StoreUnavailable:
        await _finish(op, Operation.Status.FAILED, code=STORE_UNAVAILABLE, message=message_for(STORE_UNAVAILABLE))
        return None
    op.rounds = rnd.number
    replayed, reused = (await sync_to_async(_state_seen)(op, rnd.state_digest, rnd.number)) if rnd.state_digest \
        else (False, False)
    changed = await _authorization_changed(op)
    try:
        await _audit(op, "received", code=STATE_REUSED if reused else "", reason=STATE_REUSED_REASON if reused else "",
                     round_number=rnd.number, request_id=request_id, state_digest=rnd.state_digest,
                     schema_digests={k: v.schema_digest for k, v in rnd.requests.items() if v.schema_digest},
                     config_digest=op.server.config_digest(), auth=changed)
    except audit.AuditUnavailable:
        await deny(op, AUDIT_UNAVAILABLE)
        return None
    if changed is not None:  # a retry could only go out under another identity than the original request's
        await Operation.objects.filter(pk=op.pk).aupdate(rounds=rnd.number)
        await deny(op, AUTHORIZATION_CHANGED)
        return None
    if replayed:
        await Operation.objects.filter(pk=op.pk).aupdate(rounds=rnd.number)  # the page counts the replayed round
        await deny(op, "request_state_replayed")
        return None
    if rnd.state_only:
        await asyncio.sleep(rnd.backoff_s)
        if await _authorization_changed(op) is not None:  # changed during the back-off
            await deny(op, AUTHORIZATION_CHANGED)
            return None
        return await _build_and_record(op, None)
    from .expiry import expires_at

    # handed to the person: no worker drives it now (any worker may take the answer), and it
    # expires by itself (mrtrweb.expiry)
    moved = await Operation.objects.filter(pk=op.pk, status=Operation.Status.RUNNING).aupdate(
        status=Operation.Status.AWAITING_INPUT, rounds=rnd.number, worker="",
        round_expires_at=expires_at(rnd.expires_at), updated_at=timezone.now())
    if not moved:  # ended meanwhile (stopped, access ended): its round is never shown
        logger.info("operation %s ended while its round %s arrived; the round is not shown", op.id, rnd.number)
        return None
    op.status = Operation.Status.AWAITING_INPUT
    await notify(op)
    return None


async def _build_and_record(op: Operation, responses: dict[str, Any] | None, *, retry_id: str | None = None,
                            code: str = "") -> Retry:
    """Build the retry with the gate, write + read back its ``submitted`` event, then return it.
    The operation is running again; an MRTR retry names this worker (it sends it), a legacy
    answer leaves the worker holding the server's call named (``code`` :data:`LEGACY`).

    Raises:
        GateRejection: the gate refused the answer (nothing changed, nothing sent).
        OperationRefused: the store or the audit failed (nothing sent; the operation ends when
            its round was already consumed).
    """
    from .workers import WORKER_ID, ensure_lease

    gate = get_gate()
    retry_id = retry_id or new_request_id()
    driver = {} if code == LEGACY else {"worker": WORKER_ID}
    if driver:
        try:
            await ensure_lease()  # before the operation names this worker
        except Exception:  # noqa: BLE001 -- the database is down: nothing consumed, nothing sent
            logger.warning("operation %s: answer refused, this worker's lease could not be written", op.id)
            raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    try:
        retry: Retry = await sync_to_async(gate.respond)(
            handle_of(op), retry_id=retry_id, responses=responses, user=str(op.user_id), tenant=str(op.tenant_id),
            params=results.stored_params(op.params))
    except StoreUnavailable:
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    try:
        await _audit(op, "submitted", code=code, round_number=retry.round_number, request_id=op.latest_request_id,
                     retry_id=retry.id, actions=dict(retry.actions), read_back=True)
    except audit.AuditUnavailable:
        await deny(op, AUDIT_UNAVAILABLE)
        raise OperationRefused(AUDIT_UNAVAILABLE, DENY_MESSAGES[AUDIT_UNAVAILABLE]) from None
    fields = dict(latest_request_id=str(retry.id), status=Operation.Status.RUNNING, rounds=op.rounds,
                  round_expires_at=None, **driver)
    # The round is consumed and its answer audited: from here on the answer must go out. A
    # database lost at this moment is waited for (ANSWER_DB_WAIT_S); past that, an MRTR retry is
    # kept by this worker and sent once the database answers again (up to the round's TTL).
    moved = await _move_when_back(op.pk, fields, ANSWER_DB_WAIT_S)
    if moved is None:
        if code == LEGACY:
            logger.error("operation %s: legacy answer recorded but the database stayed unreachable; the holder "
                         "gives up at its deadline", op.id)
            raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE))
        _spawn(_send_when_back(op.id, retry, fields))
        raise OperationRefused(ANSWER_PENDING, message_for(ANSWER_PENDING))
    if not moved:  # ended meanwhile (stopped, access ended): the retry is not sent
        logger.info("operation %s ended while its answer was recorded; retry %s not sent", op.id, retry.id)
        raise OperationRefused(codes.INACTIVE_MRTR_ROUND, message_for(codes.INACTIVE_MRTR_ROUND))
    op.latest_request_id = str(retry.id)
    op.status = Operation.Status.RUNNING
    return retry


#: the longest an answer's request waits for the database to record that its retry goes out
#: (a database lost just after the answer was consumed and audited), seconds
ANSWER_DB_WAIT_S: Final = 10.0


async def _move_when_back(op_id: Any, fields: dict[str, Any], wait_s: float) -> int | None:
    """Move the operation's row (``fields``; only if it has not ended), retrying with pauses while
    the database fails, up to ``wait_s`` seconds. Returns the rows moved (0: it had ended), or
    None when the database did not answer in time."""
    from django.db import DatabaseError

    deadline = time.monotonic() + wait_s
    pause = 0.1
    while True:
        try:
            return await Operation.objects.filter(pk=op_id).exclude(status__in=Operation.TERMINAL).aupdate(
                updated_at=timezone.now(), **fields)
        except DatabaseError as exc:
            if time.monotonic() >= deadline:
                logger.error("operation %s: the database did not answer for %ss after an answer was recorded (%s)",
                             op_id, wait_s, exc.__class__.__name__)
                return None
            logger.warning("operation %s: the database failed as an answer was recorded (%s); retrying", op_id,
                           exc.__class__.__name__)
            await sync_to_async(close_old_connections)()
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)


async def _send_when_back(op_id: Any, retry: Retry, fields: dict[str, Any]) -> None:
    """An answer recorded while the database went away: wait for it (up to ``TTL_S``), move the
    row and send the retry, once (this task holds the only copy of the retry)."""
    moved = await _move_when_back(op_id, fields, float(conf.get("TTL_S")))
    if not moved:
        logger.error("operation %s: retry %s not sent (%s)", op_id, retry.id,
                     "the database did not come back" if moved is None else "the operation ended meanwhile")
        return
    logger.warning("operation %s: the database answers again; the recorded answer goes out now", op_id)
    op = await _load(op_id)
    await notify(op)
    await _drive(op_id, str(retry.id), retry.params)


async def answer_round(op: Operation, responses: dict[str, Any]) -> Retry:
    """Answer the operation's open round (the person's validated answers) and send the retry in
    the background. The caller has checked that ``op`` belongs to the requesting user.

    Raises:
        GateRejection: refused by the gate (recorded as ``rejected``; nothing sent).
        OperationRefused: store or audit unavailable, or a deny condition (nothing sent).
    """
    op = await _load(op.pk)
    if await _access_ended(op):
        raise OperationRefused("denied", DENY_MESSAGES["access_revoked"])
    if not await sync_to_async(_shown_exists)(op.id, op.rounds):
        await deny(op, "missing_consent_receipt")
        raise OperationRefused("denied", DENY_MESSAGES["missing_consent_receipt"])
    # before the configuration check: a replaced tenant credential also changes the config digest,
    # and the person should read that the authorization changed
    if await _authorization_changed(op) is not None:
        await deny(op, AUTHORIZATION_CHANGED)
        raise OperationRefused("denied", DENY_MESSAGES[AUTHORIZATION_CHANGED])
    if await sync_to_async(_received_config)(op.id, op.rounds) != op.server.config_digest():
        await deny(op, "server_config_changed")
        raise OperationRefused("denied", DENY_MESSAGES["server_config_changed"])
    if await sync_to_async(_is_legacy_round)(op.id, op.rounds):
        return await _answer_legacy(op, responses)
    try:
        retry = await _build_and_record(op, responses)
    except GateRejection as exc:
        logger.info("operation %s: answer refused (%s): %s", op.id, exc.code, exc.reason)
        try:
            await _audit(op, "rejected", code=exc.code, round_number=op.rounds, request_id=op.latest_request_id)
        except audit.AuditUnavailable:
            pass
        raise
    await notify(op)
    _spawn(_drive(op.id, str(retry.id), retry.params))
    return retry


# ---------------------------------------------------------------------------------------------
# Legacy servers (2025-11-25): requests the server sends while its call is open
# ---------------------------------------------------------------------------------------------
#
# A 2025-11-25 server asks its questions as server-to-client requests (``elicitation/create``,
# form or URL mode; ``sampling/createMessage``; ``roots/list``) on the open call. The worker
# driving the call (A) turns each one into a gate round, exactly as if the server had answered
# ``input_required`` with that one input request: ``gate.receive`` against the operation's current
# request id (schema subset, URL checks, deprecated-method policy, TTL, single use, identity), the
# ``received`` event, the operation awaiting input, the card pushed. The person's answer comes
# through ``answer_round`` on any worker (B): consent receipt, configuration check, ``gate.respond``
# (validation, consumed once), the ``submitted`` event; then, instead of a retry, the validated
# response goes to A as a sealed ``LegacyAnswer`` row (taken once), and A returns it to the server
# as the result of its request. The call goes on; its final result completes the operation.
#
# One settle key per round (a claim in the binding store; :mod:`mrtrweb.handover`) is taken by
# whoever settles the round first: B before it consumes the round, A before it gives up on it
# (deadline, stop, operation ended). So an answer that was consumed is always delivered (a restart
# of the cache in between loses nothing), and a round that A gave up on can no longer be consumed.
# B gives the key back when the gate refuses the answer.

#: ``code`` of the ``received``/``submitted`` events of a legacy round
LEGACY = "legacy_server_request"
#: the input request key of a legacy round, per method
LEGACY_KEYS = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}
#: seconds A keeps waiting for an answer that B is submitting when the hold ends
LEGACY_SETTLE_GRACE_S = 30.0
#: seconds between two reads of the operation's row while a call is held
_STATUS_POLL_S = 1.0


@dataclasses.dataclass
class _Call:
    """One request of an operation in flight on this worker.

    ``gate_id`` is the id the gate's binding awaits a result for: the wire id, then, after each
    legacy round, that round's retry id (never sent: the call goes on under its wire id).
    """

    op: Operation
    wire_id: str
    gate_id: str = ""
    holding: bool = False
    rounds: int = 0
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.gate_id = self.gate_id or self.wire_id


async def _note_challenge(op: Operation, exc: McpCallError) -> None:
    """Keep the scope an ``insufficient_scope`` challenged with, for the next Connect (SEP-2350)."""
    from .authz import service as authz

    try:
        await authz.note_challenge(server=op.server, user=op.user, tenant=op.server.tenant_id, scope=exc.scope)
    except Exception:  # noqa: BLE001 - a note for later; the operation fails with its code regardless
        logger.exception("operation %s: the scope challenge could not be noted", op.id)


def legacy_hold_s() -> float:
    """``MRTRWEB["LEGACY_HOLD_S"]``: the longest a legacy server's call is held open for one round."""
    return float(conf.get("LEGACY_HOLD_S"))


def _hold_key(op_id: Any) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:legacy:{op_id}:hold"


def _cache():
    from django.core.cache import caches

    return caches[conf.get("BINDING_CACHE")]


def legacy_hold(op: Operation) -> dict[str, Any] | None:
    """The hold of an operation's open legacy round, for its panel (sync): ``{"deadline": aware
    datetime, "method": ..., "round": n}``, or None when the server is not holding a call for it."""
    import datetime

    if op.status != Operation.Status.AWAITING_INPUT:
        return None
    try:
        hold = _cache().get(_hold_key(op.id))
    except Exception:  # noqa: BLE001 -- the card still shows; only the notice is missing
        logger.warning("legacy hold of operation %s unreadable", op.id)
        return None
    if not isinstance(hold, dict) or hold.get("round") != op.rounds:
        return None
    deadline = datetime.datetime.fromtimestamp(float(hold["deadline"]), tz=datetime.timezone.utc)
    return {"deadline": deadline, "method": hold.get("method", ""), "round": hold["round"]}


def _is_legacy_round(op_id: Any, round_number: int) -> bool:
    from .models import AuditEvent

    return AuditEvent.objects.filter(operation_id=op_id, round_number=round_number, event="received",
                                     code=LEGACY).exists()


def _refusal(method: str, why: str) -> Any:
    import mcp_types

    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=f"{method} refused by the client: {why}")


def _cancelled(method: str) -> Any:
    """What the server gets when the person did not answer (stopped, ended, timed out)."""
    if method == "elicitation/create":
        return {"action": "cancel"}
    return _refusal(method, "the person did not approve it")


def _clock(ts: float) -> str:
    import datetime

    return timezone.localtime(datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc)).strftime("%H:%M:%S %Z")


async def _on_server_request(call: _Call, method: str, params: dict[str, Any]) -> Any:
    """Answer a request the server sent during ``call`` (runs on the worker holding the call).
    Requests arriving together are taken one after the other: each is a round of its own."""
    async with call.lock:
        return await _legacy_round(call, method, params)


async def _legacy_round(call: _Call, method: str, params: dict[str, Any]) -> Any:
    op = await _load(call.op.pk)
    if op.status != Operation.Status.RUNNING:
        logger.info("operation %s: %s from the server refused: the operation is %s", op.id, method, op.status)
        return _refusal(method, "the operation has ended")
    if await _access_ended(op):
        return _refusal(method, "the operation has ended")
    key = LEGACY_KEYS.get(method, "request")
    result = {"resultType": "input_required", "inputRequests": {key: {"method": method, "params": params}}}
    try:
        rnd: Round = await sync_to_async(get_gate().receive)(
            tenant=str(op.tenant_id), user=str(op.user_id), request_id=call.gate_id, origin=op.server.origin,
            result=result)
    except GateRejection as exc:
        logger.info("operation %s: server request %s refused (%s): %s", op.id, method, exc.code, exc.reason)
        try:
            await _audit(op, "rejected", code=exc.code, reason=exc.reason, round_number=op.rounds + 1,
                         request_id=call.gate_id)
        except audit.AuditUnavailable:
            pass
        await _finish(op, Operation.Status.FAILED, code=exc.code,
                      message=f"{message_for(exc.code)} Reason: {exc.reason}.")
        return _refusal(method, exc.code)
    except StoreUnavailable:
        await _finish(op, Operation.Status.FAILED, code=STORE_UNAVAILABLE, message=message_for(STORE_UNAVAILABLE))
        return _refusal(method, STORE_UNAVAILABLE)
    call.rounds += 1
    deadline = min(time.time() + legacy_hold_s(), rnd.expires_at)
    try:
        await _audit(op, "received", code=LEGACY, reason=f"{method} during the open call {call.wire_id}"[:200],
                     round_number=rnd.number, request_id=call.gate_id,
                     schema_digests={k: v.schema_digest for k, v in rnd.requests.items() if v.schema_digest},
                     config_digest=op.server.config_digest())
    except audit.AuditUnavailable:
        op.rounds = rnd.number
        await deny(op, AUDIT_UNAVAILABLE)
        return _cancelled(method)
    try:
        await sync_to_async(_cache().set)(_hold_key(op.id), {"round": rnd.number, "deadline": deadline,
                                                             "method": method}, timeout=int(legacy_hold_s()) + 120)
    except Exception as exc:  # noqa: BLE001 -- only the panel's notice reads it
        logger.warning("legacy hold of operation %s not recorded: %s", op.id, exc.__class__.__name__)
    from .expiry import expires_at

    # the worker holding the call stays named (Operation.worker): if it dies, the reaper ends this
    moved = await Operation.objects.filter(pk=op.pk, status=Operation.Status.RUNNING).aupdate(
        status=Operation.Status.AWAITING_INPUT, rounds=rnd.number, round_expires_at=expires_at(rnd.expires_at),
        updated_at=timezone.now())
    op.rounds = rnd.number
    if not moved:  # stopped between the check above and now
        await _finish(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                      message=DENY_MESSAGES["cancelled"])
        return _cancelled(method)
    op.status = Operation.Status.AWAITING_INPUT
    await notify(op)
    logger.info("operation %s: legacy round %s (%s) held until %s", op.id, rnd.number, method, _clock(deadline))
    call.holding = True
    try:
        return await _hold(call, op, rnd, method, deadline)
    finally:
        call.holding = False
        try:
            await sync_to_async(_cache().delete)(_hold_key(op.id))
        except Exception:  # noqa: BLE001 -- it expires on its own
            pass


async def _hold(call: _Call, op: Operation, rnd: Round, method: str, deadline: float) -> Any:
    """Hold the server's request until the person's answer comes (from any worker), the person
    stops, the operation ends, or ``deadline``; return what the server gets."""
    loop = asyncio.get_running_loop()
    next_status = loop.time() + _STATUS_POLL_S
    giving_up: str | None = None  # why A wants to end the round without an answer
    give_up_at = 0.0
    while True:
        payload = await sync_to_async(_take_answer)(op, rnd.number)
        if payload is not None:
            call.gate_id = str(payload["retry_id"])
            logger.info("operation %s: legacy round %s answered; the server gets it now", op.id, rnd.number)
            return payload["response"]
        if giving_up is None:
            if await sync_to_async(_stop_requested)(op.id):
                giving_up = "stopped"
            elif loop.time() >= next_status:
                next_status = loop.time() + _STATUS_POLL_S
                status = await Operation.objects.filter(pk=op.pk).values_list("status", flat=True).afirst()
                if status in Operation.TERMINAL:
                    giving_up = "ended"
            if giving_up is None and time.time() >= deadline:
                giving_up = "timeout"
            give_up_at = time.time()
        if giving_up is not None:
            try:
                won = await sync_to_async(_settle)(op, rnd.number, giving_up)
            except StoreUnavailable:
                won = False
            if won:
                return await _give_up(op, rnd, method, giving_up, deadline)
            if time.time() - give_up_at > LEGACY_SETTLE_GRACE_S:
                logger.error("operation %s: legacy round %s was being answered but no answer came in %ss; the "
                             "server is told cancel", op.id, rnd.number, LEGACY_SETTLE_GRACE_S)
                await _finish(op, Operation.Status.DENIED, code="denied", reason="legacy_handover_failed",
                              event="denied", message=DENY_MESSAGES["legacy_handover_failed"])
                return _cancelled(method)
            # an answer is being submitted right now (B holds the settle key): wait for it
        await asyncio.sleep(STOP_POLL_S)


async def _give_up(op: Operation, rnd: Round, method: str, why: str, deadline: float) -> Any:
    """End a held round without an answer; the server gets cancel (elicitation) or an error."""
    if why == "timeout":
        logger.info("operation %s: legacy round %s not answered by %s; the server is told cancel", op.id,
                    rnd.number, _clock(deadline))
        await _finish(op, Operation.Status.DENIED, code="denied", reason="timeout", event="denied",
                      message=f"The server held its call open for your answer until {_clock(deadline)}; no answer "
                              "came in time, so the server was told cancel. Nothing else was sent.")
    else:
        logger.info("operation %s: legacy round %s ended (%s); the server is told cancel", op.id, rnd.number, why)
        # stopped: the stop already ended the operation (denied, cancelled); this is a no-op then
        await _finish(op, Operation.Status.DENIED, code="denied", reason="cancelled", event="denied",
                      message=DENY_MESSAGES["cancelled"])
    return _cancelled(method)


async def _answer_legacy(op: Operation, responses: dict[str, Any]) -> Retry:
    """``answer_round`` for a legacy round: validate and consume it with the gate, record it, and
    hand the validated response to the worker holding the server's call (no retry is sent)."""
    from .workers import WORKER_LOST, is_alive

    if not await sync_to_async(is_alive)(op.worker):
        # the worker holding the server's call is gone, and the call with it: nothing can reach the server
        claimed = await Operation.objects.filter(pk=op.pk, status=Operation.Status.AWAITING_INPUT).aupdate(
            status=Operation.Status.INTERRUPTED, error_code=WORKER_LOST,
            error_message=message_for(WORKER_LOST), worker="", round_expires_at=None)
        if claimed:
            await finish_interrupted(op)
        raise OperationRefused(WORKER_LOST, message_for(WORKER_LOST))
    try:
        won = await sync_to_async(_settle)(op, op.rounds, "answer")
    except StoreUnavailable:
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    if not won:
        logger.info("operation %s: answer to legacy round %s refused: the round was already settled", op.id, op.rounds)
        try:
            await _audit(op, "rejected", code=codes.INACTIVE_MRTR_ROUND, reason="the server's request was already "
                         "answered or given up", round_number=op.rounds, request_id=op.latest_request_id)
        except audit.AuditUnavailable:
            pass
        raise GateRejection(codes.INACTIVE_MRTR_ROUND, "the legacy round was already settled")
    try:
        retry = await _build_and_record(op, responses, retry_id=f"mrtr-legacy-{uuid.uuid4()}", code=LEGACY)
    except GateRejection as exc:
        await sync_to_async(_unsettle)(op, op.rounds)
        logger.info("operation %s: answer refused (%s): %s", op.id, exc.code, exc.reason)
        try:
            await _audit(op, "rejected", code=exc.code, round_number=op.rounds, request_id=op.latest_request_id)
        except audit.AuditUnavailable:
            pass
        raise
    except BaseException:
        await sync_to_async(_unsettle)(op, op.rounds)
        raise
    (key, response), = retry.params["inputResponses"].items()
    try:
        await sync_to_async(_put_answer)(op, retry.round_number, {"retry_id": str(retry.id), "response": response})
    except Exception as exc:  # noqa: BLE001
        logger.error("operation %s: legacy answer not handed over (%s)", op.id, exc.__class__.__name__)
        await sync_to_async(_unsettle)(op, retry.round_number)
        await deny(op, "legacy_handover_failed")
        raise OperationRefused(STORE_UNAVAILABLE, DENY_MESSAGES["legacy_handover_failed"]) from None
    await notify(op)
    return retry
