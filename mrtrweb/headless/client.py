"""Headless operations: the browser's code path driven by a scripted consent policy.

A machine (the ``mrtr_client`` management command, the conformance suite, another service)
runs an MCP operation exactly as a person does in the browser:
:func:`mrtrweb.operations.start_operation` registers it with the gate and sends it; every
``input_required`` round is accepted by the gate and audited (``received``); the round's consent
receipt (``shown``) is written by :func:`mrtrweb.consent.panels.record_shown`, with a reason saying that a
scripted agent, not a person, saw it; the answers are built by a :class:`ConsentPolicy` and sent
once by :func:`mrtrweb.operations.answer_round` (``submitted``), which applies every deny
condition of the browser. ``requestState``-only rounds are retried by the operation itself.

API::

    from mrtrweb import headless

    outcome = await headless.arun(url="http://127.0.0.1:8765/mcp", user=user, tenant=tenant,
                                  method="tools/call", params={"name": "deploy", "arguments": {...}},
                                  consent=headless.ConsentPolicy.parse("accept-defaults"))
    outcome.status      # "completed", "failed", "denied", "expired", "interrupted" or "timeout"

    headless.run(url=..., user=..., ...)   # the same from sync code (its own event loop)

Consent policies (``accept-defaults``, ``decline`` / ``cancel``, ``answers:FILE.json``; URL-mode,
sampling and roots requests) are described in :mod:`.policy` (:class:`ConsentPolicy`, the outcome and
error shapes), re-exported here.

Nothing here logs or prints an answer value or a ``requestState``: audit rows carry digests,
log lines carry operation ids, round numbers, keys and actions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async

from ..servers import connections
from .. import operations
from ..consent import sampling
from ..gate import GateRejection, StoreUnavailable
from ..models import McpServer, Membership, Operation
from .policy import (ACCEPT_DEFAULTS, ANSWERS, CANCEL, DECLINE, SHOWN_NAME_CHARS, TASK_REQUIRED, TIMEOUT,
                     ConsentPolicy, HeadlessError, HeadlessOutcome, default_content, shown_name)

logger = logging.getLogger("mrtrweb.headless")

__all__ = ["ACCEPT_DEFAULTS", "ANSWERS", "CANCEL", "DECLINE", "TASK_REQUIRED", "TIMEOUT", "ConsentPolicy", "HeadlessError",
           "HeadlessOutcome", "arun", "close_connections", "default_content", "operation_name", "run", "server_for",
           "shown_name"]

#: seconds between two looks at the operation row while it runs
POLL_S = 0.05
#: the longest wait for a push before the operation row is read again anyway (a lost push, or no
#: channel layer, costs at most this)
PUSH_WAIT_S = 0.5


class _Pushes:
    """The user's operation pushes (group ``mrtrweb.user.<id>``, the same ones the browser gets):
    :meth:`wait` returns when one arrives, or after ``timeout`` -- a wake-up only, the operation
    row is always read again."""

    def __init__(self, user_id: Any) -> None:
        self.group = operations.user_group(user_id)
        self.layer: Any = None
        self.channel = ""

    async def __aenter__(self) -> _Pushes:
        from channels.layers import get_channel_layer

        try:
            self.layer = get_channel_layer()
            if self.layer is not None:
                self.channel = await self.layer.new_channel()
                await self.layer.group_add(self.group, self.channel)
        except Exception as exc:  # noqa: BLE001 -- no pushes: fall back to reading the row
            logger.info("headless: no push channel (%s); polling", exc.__class__.__name__)
            self.layer = None
        return self

    async def wait(self, timeout: float) -> None:
        if self.layer is None:
            await asyncio.sleep(min(timeout, POLL_S))
            return
        try:
            await asyncio.wait_for(self.layer.receive(self.channel), timeout)
        except asyncio.TimeoutError:
            pass
        except Exception as exc:  # noqa: BLE001
            logger.info("headless: push channel failed (%s); polling", exc.__class__.__name__)
            self.layer = None

    async def __aexit__(self, *exc: Any) -> None:
        if self.layer is not None:
            try:
                await self.layer.group_discard(self.group, self.channel)
            except Exception:  # noqa: BLE001
                pass



# --------------------------------------------------------------------------------------------
# Running one operation
# --------------------------------------------------------------------------------------------


def server_for(url: str, tenant: Any) -> McpServer:
    """The tenant's :class:`McpServer` for ``url`` (the first one with exactly that URL), created
    (named after the URL) when the tenant has none (sync).

    Raises:
        django.core.exceptions.ValidationError: ``url`` is not an http(s) URL without credentials.
    """
    # the tenant's servers only: a person's own (personal) server is never picked for another
    server = McpServer.objects.filter(tenant=tenant, url=url, owner__isnull=True).order_by("pk").first()
    if server is not None:
        return server
    server = McpServer(tenant=tenant, url=url, name=_server_name(url, tenant))
    server.full_clean(exclude=["tenant"])
    server.save()
    return server


def _member_server(user: Any, tenant: Any, url: str) -> McpServer:
    """The tenant's server for ``url`` (:func:`server_for`) once ``user`` is known to be an active
    member of ``tenant`` (sync; one thread hop for both).

    Raises:
        HeadlessError: ``not_a_member`` (not a member, or inactive).
        django.core.exceptions.ValidationError: see :func:`server_for`.
    """
    from ..tenancy.access import denial

    if denial(user.pk, tenant.pk):
        raise HeadlessError("not_a_member", "the user is not an active member of the tenant")
    return server_for(url, tenant)


def _server_name(url: str, tenant: Any) -> str:
    base = ("headless " + url)[:110]
    name, n = base, 1
    while McpServer.objects.filter(tenant=tenant, name=name, owner__isnull=True).exists():
        n += 1
        name = f"{base} ({n})"
    return name


def operation_name(method: str, params: Mapping[str, Any]) -> str:
    """What an Operation row is named after: the tool or prompt name, or the resource URI."""
    value = params.get("uri") if method == "resources/read" else params.get("name")
    return str(value or "")[:500]


async def arun(*, url: str, user: Any, tenant: Any, method: str, params: dict[str, Any], consent: ConsentPolicy,
               timeout_s: float = 60) -> HeadlessOutcome:
    """Run one operation (``tools/call``, ``prompts/get`` or ``resources/read``) through the
    browser's code path, answering its rounds with ``consent``; return when it has ended.

    Creates (or reuses) the tenant's :class:`McpServer` row for ``url``. ``user`` must be a
    member of ``tenant``. After ``timeout_s`` the operation is stopped (as the person's Stop
    button does) and the outcome is ``timeout``.

    Raises:
        HeadlessError: ``not_a_member``, or the operation was refused before anything was sent
            (``limit_reached``, ``binding_store_unavailable``).
    """

    server = await sync_to_async(_member_server)(user, tenant, url)
    if method == "tools/call" and await _task_only(user, server, params.get("name")):
        logger.info("tools/call of a task-only tool on server %s not run: nothing sent", server.pk)
        return HeadlessOutcome(TASK_REQUIRED, None, 0, "", TASK_REQUIRED)
    async with _Pushes(user.pk) as pushes:  # subscribed before the start: no push is missed
        return await _run(pushes, server, user, method, params, consent, timeout_s)


async def _task_only(user: Any, server: McpServer, name: Any) -> bool:
    """Whether the server lists the tool ``name`` with ``execution.taskSupport: "required"`` and
    declares no task support (:mod:`mrtrweb.operations.tasks`: never called; where the server
    declares tasks it runs as a task, to completion). A listing that fails says no: the
    call then fails on its own, with the server's error."""
    from ..mcp import McpCallError
    from ..operations.tasks import refused

    try:
        conn = await connections.connection_for(user, server)
        tools = await conn.list_tools()
    except McpCallError:
        return False
    return any(refused(t, conn.server_capabilities) for t in tools if isinstance(t, dict) and t.get("name") == name)


async def _run(pushes: _Pushes, server: McpServer, user: Any, method: str, params: dict[str, Any],
               consent: ConsentPolicy, timeout_s: float) -> HeadlessOutcome:
    try:
        op = await operations.start_operation(user=user, server=server, method=method,
                                              name=operation_name(method, params), params=params)
    except operations.OperationRefused as exc:
        raise HeadlessError(exc.code, exc.message) from None
    deadline = time.monotonic() + timeout_s
    answered = 0  # the last round number this agent answered
    missing: list[str] = []  # fields without a default that made accept-defaults cancel
    fresh = True  # the row as start_operation made it: running, nothing to read until a push
    while True:
        if not fresh:
            op = await _read(op.pk)
        fresh = False
        if op.is_terminal:
            if not op.settled:
                await _settled(op)
            return _outcome(op, missing)
        if time.monotonic() >= deadline:
            logger.info("operation %s: headless timeout after %ss; stopping it", op.id, timeout_s)
            await operations.stop_operation(op, by="headless_timeout")
            stopped_by = time.monotonic() + 5
            while not op.is_terminal and time.monotonic() < stopped_by:  # the driving task ends it
                await asyncio.sleep(POLL_S)
                op = await Operation.objects.aget(pk=op.pk)
            await _settled(op)
            return HeadlessOutcome(TIMEOUT, None, op.rounds, str(op.id), "headless_timeout", tuple(missing))
        if op.status == Operation.Status.AWAITING_INPUT and op.rounds > answered:  # read after a push
            answered = op.rounds
            missing += await _answer(op, consent)  # its outcome is pushed: read after the push
        await pushes.wait(min(PUSH_WAIT_S, max(0.0, deadline - time.monotonic())))


#: the audit events that end an operation (written just after its row turned terminal)
TERMINAL_EVENTS = ("completed", "failed", "denied", "cancelled")


async def _read(op_id: Any) -> Operation:
    """The operation (server, tenant, user loaded) and, as ``settled``, whether its terminal audit
    event is written (one query)."""
    from django.db.models import Exists, OuterRef

    from ..models import AuditEvent

    return await Operation.objects.select_related("server", "tenant", "user").annotate(settled=Exists(
        AuditEvent.objects.filter(operation_id=OuterRef("pk"), event__in=TERMINAL_EVENTS))).aget(pk=op_id)


async def _settled(op: Operation, grace_s: float = 5.0) -> None:
    """Wait (briefly) until the operation's terminal audit event is written: the row turns
    terminal first, so a caller reading the trail right after :func:`arun` sees it whole."""
    from ..models import AuditEvent

    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if await AuditEvent.objects.filter(operation_id=op.id, event__in=TERMINAL_EVENTS).aexists():
            return
        await asyncio.sleep(POLL_S)


def _outcome(op: Operation, missing: list[str]) -> HeadlessOutcome:
    return HeadlessOutcome(str(op.status), op.result if op.status == Operation.Status.COMPLETED else None,
                           op.rounds, str(op.id), op.error_code, tuple(missing), op.error_message or "")


async def _answer(op: Operation, consent: ConsentPolicy) -> list[str]:
    """Show the open round to the scripted agent (consent receipt), then answer it once. Returns
    :meth:`ConsentPolicy.missing_defaults` of the round when the policy answered it ``cancel``
    for them (else ``[]``)."""
    from ..consent.panels import record_shown

    def show() -> tuple[Operation, Any]:  # one thread hop: the round, the row, the consent receipt
        state = operations.get_gate().state(operations.handle_of(op))
        rnd = state.round if state else None
        if rnd is None or rnd.number != op.rounds:
            return op, None  # the round ended meanwhile (expired, stopped): the row says how
        record_shown(op, rnd, reason=f"headless: scripted consent policy {consent.kind}")
        return op, rnd  # read with its server, tenant and user by _run

    try:
        full, rnd = await sync_to_async(show)()
    except StoreUnavailable:
        await operations.deny(op, operations.STORE_UNAVAILABLE)
        return []
    if rnd is None:
        return []
    approved = consent.approved_deprecated(rnd)
    provided: dict[str, Any] = {}
    for key, form_data in (approved or {}).items():
        view = rnd.requests[key]
        if view.kind == "roots":
            provided[key] = sampling.roots_answer(full.server)
            continue
        try:
            provided[key] = await sampling.provide(sampling.get_provider(), dict(view.params), user=full.user,
                                                   operation=full, form_data=form_data)
        except Exception:  # noqa: BLE001 -- a provider failure sends nothing
            logger.exception("operation %s round %s: the sampling provider failed", op.id, rnd.number)
            await operations.deny(full, "deprecated_request_refused")
            return []
    responses = consent.responses(rnd, provided) if approved is not None else None
    if responses is None:
        logger.info("operation %s round %s: sampling/roots refused by the scripted policy (keys: %s)", op.id,
                    rnd.number, ", ".join(shown_name(k) for k, v in rnd.requests.items()
                                         if v.kind in ("sampling", "roots")))
        await operations.deny(full, "deprecated_request_refused")
        return []
    missing = consent.missing_defaults(rnd)
    if missing:
        logger.info("operation %s round %s: accept-defaults answers cancel: required fields without a default: %s",
                    op.id, rnd.number, ", ".join(missing))
    logger.info("operation %s round %s: answering %s", op.id, rnd.number,
                {shown_name(k): v.get("action") or ("approved" if k in provided else None) for k, v in responses.items()})
    try:
        await operations.answer_round(full, responses, round_number=rnd.number)
    except GateRejection as exc:
        # e.g. answers that do not match the schema: no person can correct them here
        logger.info("operation %s round %s: answer refused by the gate (%s)", op.id, rnd.number, exc.code)
        await operations.deny(full, exc.code)
    except operations.OperationRefused as exc:
        logger.info("operation %s round %s: answer refused (%s)", op.id, rnd.number, exc.code)
        if not (await Operation.objects.aget(pk=op.pk)).is_terminal:
            await operations.deny(full, exc.code)
    return missing


def run(**kw: Any) -> HeadlessOutcome:
    """:func:`arun` from sync code: on a new event loop whose MCP connections are closed before
    returning (the same keyword arguments)."""

    async def main() -> HeadlessOutcome:
        try:
            return await arun(**kw)
        finally:
            await close_connections()
            await _release_lease()

    return asyncio.run(main())


async def _release_lease() -> None:
    """This process drove its operation with a worker lease of its own (:mod:`mrtrweb.runtime.workers`):
    stop renewing it and delete it, unless an operation still names this process (then it goes
    stale and another worker's reaper settles that operation)."""
    from ..runtime import workers

    await workers.stop_heartbeat()
    try:
        busy = await Operation.objects.filter(status__in=Operation.LIVE, worker=workers.WORKER_ID).aexists()
    except Exception:  # noqa: BLE001 -- the lease goes stale
        return
    if not busy:
        await workers.lease_call(workers.release)


async def close_connections() -> None:
    """Wait for this loop's operation tasks, then close its MCP connections (end of a run)."""
    await operations.wait_idle(timeout=5)
    await connections.pool().close_all()
