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


from ..servers import connections
from .. import operations, prepared
from ..operations.hops import round_hop
from ..models import McpServer, Membership, Operation
from .answering import answer as _answer
from .quickstart import refusal_in, remember, start_known
from .policy import (ACCEPT_DEFAULTS, ANSWERS, APP_ONLY, CANCEL, DECLINE, SHOWN_NAME_CHARS, TASK_REQUIRED, TIMEOUT,
                     ConsentPolicy, HeadlessError, HeadlessOutcome, default_content, shown_name)

logger = logging.getLogger("mrtrweb.headless")

__all__ = ["ACCEPT_DEFAULTS", "ANSWERS", "APP_ONLY", "CANCEL", "DECLINE", "TASK_REQUIRED", "TIMEOUT", "ConsentPolicy", "HeadlessError",
           "HeadlessOutcome", "arun", "close_connections", "default_content", "operation_name", "run", "server_for",
           "shown_name"]

#: seconds between two looks at the operation row while it runs
POLL_S = 0.05
#: the longest wait for a change made in this process (:func:`mrtrweb.operations.watching`)
#: before the operation row is read anyway: what another worker did (an expiry sweep, a Stop, an
#: access revocation there) is seen within this many seconds
PUSH_WAIT_S = 0.5


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
    member of ``tenant`` (sync; one thread hop, one statement when the server exists: the access
    check of the tenant beside the server's row, :func:`_member_and_server`).

    Raises:
        HeadlessError: ``not_a_member`` (not a member, or inactive).
        django.core.exceptions.ValidationError: see :func:`server_for`.
    """
    from ..tenancy.access import denial

    found = _member_and_server(user, tenant, url)
    cause, server = found if found is not None else (denial(user.pk, tenant.pk), None)
    if cause:
        raise HeadlessError("not_a_member", "the user is not an active member of the tenant")
    return server if server is not None else server_for(url, tenant)


_MEMBER_SERVER_SQL: dict[str, Any] = {}


def _member_and_server(user: Any, tenant: Any, url: str) -> tuple[str, McpServer | None] | None:
    """(why ``user`` may not act in ``tenant``, or ``""``; the tenant's first server with exactly
    ``url`` and no owner (never a personal one, as :func:`server_for`), or None) in one statement built once per database from the access check's own SQL
    (:func:`mrtrweb.tenancy.access.check_sql`); None when that has none (the ORM's path)."""
    from django.db import connections, router

    from ..tenancy import access

    alias = router.db_for_read(McpServer)
    checked = access.check_sql(alias, with_server=False)
    if checked is None or router.db_for_read(type(user)) != alias:
        return None
    cached = _MEMBER_SERVER_SQL.get(alias)
    conn = connections[alias]
    if cached is None or cached[0] is not checked[0]:
        sql, names, slots = checked
        qn, meta = conn.ops.quote_name, McpServer._meta
        fields = []
        for field in meta.concrete_fields:
            col = field.get_col(meta.db_table)
            fields.append((field, col, conn.ops.get_db_converters(col) + col.get_db_converters(conn)))
        tenant_col, url_col, pk = qn(meta.get_field("tenant").column), qn(meta.get_field("url").column), qn(meta.pk.column)
        owner_col = qn(meta.get_field("owner").column)
        # the tenant's servers only, as server_for: a person's own (personal) server is never picked
        full = (f"SELECT a.*, {', '.join('s.' + qn(f.column) for f, _, _ in fields)} FROM (SELECT 1 AS one) o "
                f"LEFT JOIN ({sql}) a ON TRUE LEFT JOIN {qn(meta.db_table)} s ON s.{pk} = (SELECT {pk} FROM "
                f"{qn(meta.db_table)} WHERE {tenant_col} = %s AND {url_col} = %s AND {owner_col} IS NULL "
                f"ORDER BY {pk} LIMIT 1)")
        cached = _MEMBER_SERVER_SQL[alias] = (sql, full, names, slots, fields)
    _, full, names, slots, fields = cached
    params = access.bind_ids(slots, user.pk, tenant.pk, None) + [
        McpServer._meta.get_field("tenant").get_db_prep_value(tenant.pk, conn), url]
    with prepared.cursor(conn) as cur:
        cur.execute(full, params)
        found = cur.fetchone()
    cause = access.cause_of(dict(zip(names, found[:len(names)])), tenant.pk, None)
    row = found[len(names):]
    if row[0] is None:
        return cause, None
    values = []
    for (field, col, converters), value in zip(fields, row):
        for convert in converters:
            value = convert(value, col, conn)
        values.append(value)
    return cause, McpServer.from_db(alias, [f.attname for f, _, _ in fields], values)


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

    started = await start_known(user=user, tenant=tenant, url=url, method=method, params=params,
                                name=operation_name(method, params), member_server=_member_server)
    if isinstance(started, Operation):  # the member check, the server and the start in one hop
        # watched before anything of the operation ran (its task starts at the next await)
        with operations.watching(started.pk) as changes:
            return await _follow(started, changes, consent, timeout_s)
    if started is None:
        started = await round_hop(_member_server)(user, tenant, url)
        remember(tenant.pk, url, started)
    server = started
    refusal = await _not_run(user, server, params.get("name")) if method == "tools/call" else None
    if refusal is not None:
        logger.info("tools/call of a tool on server %s not run (%s): nothing sent", server.pk, refusal)
        return HeadlessOutcome(refusal, None, 0, "", refusal)
    return await _run(server, user, method, params, consent, timeout_s)


async def _not_run(user: Any, server: McpServer, name: Any) -> str | None:
    """Why the tool ``name`` is not called at all, or None: :data:`APP_ONLY` when the server lists
    it for its MCP App alone (``_meta.ui.visibility`` without ``"model"``); :data:`TASK_REQUIRED`
    when it is listed with ``execution.taskSupport: "required"`` and the server declares no task
    support (:mod:`mrtrweb.operations.tasks`: never called; where the server declares tasks it runs
    as a task, to completion). A listing that fails says None: the call then fails on its own, with
    the server's error."""
    from ..mcp import McpCallError

    try:
        conn = await connections.connection_for(user, server)
        # kept by the connection until the server says they changed (its listen stream opened for it:
        # the headless client answers at once, so the connection need not be released while a round waits)
        tools = await conn.tools_known(listen=True)
    except McpCallError:
        return None
    return refusal_in(tools, name, conn.server_capabilities)


async def _run(server: McpServer, user: Any, method: str, params: dict[str, Any], consent: ConsentPolicy,
               timeout_s: float) -> HeadlessOutcome:
    try:
        op = await operations.start_operation(user=user, server=server, method=method,
                                              name=operation_name(method, params), params=params)
    except operations.OperationRefused as exc:
        raise HeadlessError(exc.code, exc.message) from None
    # watched before anything of the operation ran (its task starts at the next await): no change is missed
    with operations.watching(op.pk) as changes:
        return await _follow(op, changes, consent, timeout_s)


async def _follow(op: Operation, changes: asyncio.Queue, consent: ConsentPolicy, timeout_s: float) -> HeadlessOutcome:
    """Answer the operation's rounds until it ends. What happens to it in this process comes as a
    :class:`mrtrweb.operations.Change` (the row as the phase wrote it, the round it awaits): no
    read of the row, no channel layer. Only when none came for :data:`PUSH_WAIT_S` is the row read
    (:func:`_read`: what another worker did)."""
    deadline = time.monotonic() + timeout_s
    answered = 0  # the last round number this agent answered
    missing: list[str] = []  # fields without a default that made accept-defaults cancel
    rnd: Any = None  # the round the last change says the operation awaits
    settled = False
    while True:
        if op.is_terminal:
            if not settled:
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
        if op.status == Operation.Status.AWAITING_INPUT and op.rounds > answered:
            answered = op.rounds
            missing += await _answer(op, consent, rnd if rnd is not None and rnd.number == op.rounds else None)
        try:
            if changes.empty():  # (a change already queued is taken without a timer)
                async with asyncio.timeout(min(PUSH_WAIT_S, max(0.0, deadline - time.monotonic()))):
                    change = await changes.get()
            else:
                change = changes.get_nowait()
        except TimeoutError:
            op, rnd = await _read(op.pk), None
            settled = bool(op.settled)
            continue
        op, rnd, settled = change.op, change.round, change.settled


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
