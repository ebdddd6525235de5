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

Consent policies (:meth:`ConsentPolicy.parse`):

``accept-defaults``
    Accept every form with its schema's defaults (SEP-1034), optional fields without a default
    left out -- **only when every required field has a default** (that validates). A machine does
    not invent answers: when a form of the round has a required field without one (a "drop the
    database?" boolean, a ticket number, a choice), no stand-in is picked (not the first option,
    not ``false``, not ``""``); the whole round is answered ``cancel`` (sent as the retry, as a
    person's Cancel), the outcome names those fields (``missing_defaults``: ``KEY.FIELD``, names
    only, never a value) and ``mrtr_client`` exits 9.
``decline`` / ``cancel``
    Answer every request of every round with that action.
``answers:FILE.json``
    A JSON object keyed by input-request key: an object value is the form content to accept
    (absent fields take their defaults; the gate validates it), the strings ``"decline"`` /
    ``"cancel"`` answer that key with that action. A key absent from the file is declined.

URL-mode requests are **declined** unless ``url_done=True`` (command flag ``--url-done``): a
machine cannot open the page, so "accept" (meaning "I completed it") is only sent when the caller
vouches that the out-of-band step is done. ``url_done`` applies to the accepting policies
(``accept-defaults``, ``answers``); with ``decline`` / ``cancel`` it is refused as ``bad_policy``
(those policies answer every request with their action). An answers file may decline or cancel
one URL request by its key.

Sampling and roots requests (the deprecated exception, only where a tenant admin allowed them,
:mod:`mrtrweb.consent.sampling`) are approved only as the caller says:

* ``roots/list`` is answered with the server's configured roots (what the card shows a person)
  by ``accept-defaults``, and by ``answers`` when the file holds an object for its key (``{}``);
* ``sampling/createMessage`` only by ``answers``, with an object for its key: the sampling
  provider's form data (the default provider, :class:`mrtrweb.consent.sampling.PersonWritesReply`,
  takes ``{"reply": "the assistant's text"}``); the provider builds the result and the gate
  validates it. ``accept-defaults`` never approves one: a machine has no reply of its own.

Otherwise (``decline``, ``cancel``, a key absent or ``"decline"``/``"cancel"`` in the file) the
operation ends ``denied`` (``deprecated_request_refused``), as when a person refuses one; nothing
is sent.

Nothing here logs or prints an answer value or a ``requestState``: audit rows carry digests,
log lines carry operation ids, round numbers, keys and actions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async

from ..servers import connections
from ..text import display
from .. import operations
from ..consent import sampling
from ..gate import CheckedSchema, ContentMismatch, GateRejection, Round, StoreUnavailable
from ..models import McpServer, Membership, Operation

logger = logging.getLogger("mrtrweb.headless")

__all__ = ["ACCEPT_DEFAULTS", "ANSWERS", "CANCEL", "DECLINE", "TASK_REQUIRED", "TIMEOUT", "ConsentPolicy", "HeadlessError",
           "HeadlessOutcome", "arun", "close_connections", "default_content", "operation_name", "run", "server_for",
           "shown_name"]

ACCEPT_DEFAULTS = "accept-defaults"
DECLINE = "decline"
CANCEL = "cancel"
ANSWERS = "answers"

#: the outcome status when ``timeout_s`` passed first (the operation is then stopped)
TIMEOUT = "timeout"
#: the outcome of a ``tools/call`` of a tool listed with ``execution.taskSupport: "required"``:
#: not run, no operation (:mod:`mrtrweb.operations.tasks`)
TASK_REQUIRED = "task_required"
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


class HeadlessError(Exception):
    """The operation could not be run at all (bad policy, not a member, refused before sending).

    Attributes:
        code: a stable code (``bad_policy``, ``not_a_member``, ``limit_reached``,
            ``binding_store_unavailable``...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class HeadlessOutcome:
    """How a headless operation ended.

    Attributes:
        status: an :class:`~mrtrweb.models.Operation` terminal status (``completed``, ``failed``,
            ``denied``, ``expired``, ``interrupted``), ``timeout``, or ``task_required`` (the tool
            runs only as a task and the server declares no task support: nothing was sent,
            ``operation_id`` is ``""``).
        result: the server's final result object (``completed`` only), else ``None``.
        rounds: how many ``input_required`` rounds the operation had.
        operation_id: the Operation row's id (its audit trail and history page).
        error_code: the operation's error code (``""`` when completed), or ``headless_timeout``.
        missing_defaults: for ``accept-defaults``: the required fields without a (valid) default
            that made it answer a round ``cancel``, as ``KEY.FIELD`` in round order (server names,
            control and format characters shown as ``\\uXXXX``, see :func:`shown_name`); ``()``
            when it cancelled nothing.
        error_message: what the operation page says of how it ended (``Operation.error_message``:
            the product's message and, for a JSON-RPC error, the server's code and message
            cleaned by :func:`mrtrweb.operations.server_error_text`; at most 500 characters);
            ``""`` when completed or timed out. Server text: print it through
            :func:`mrtrweb.text.display.shown`, never log it.
    """

    status: str
    result: Any
    rounds: int
    operation_id: str
    error_code: str
    missing_defaults: tuple[str, ...] = ()
    error_message: str = ""


@dataclasses.dataclass(frozen=True)
class ConsentPolicy:
    """A scripted consent policy (see the module docstring).

    Attributes:
        kind: ``accept-defaults``, ``decline``, ``cancel`` or ``answers``.
        answers: for ``answers``: input-request key -> content object, or ``"decline"``/``"cancel"``.
        url_done: accept URL-mode requests (the caller completed the out-of-band step).
    """

    kind: str
    answers: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    url_done: bool = False

    @classmethod
    def parse(cls, spec: str, *, url_done: bool = False) -> ConsentPolicy:
        """``accept-defaults``, ``decline``, ``cancel`` or ``answers:PATH`` (a JSON file).

        Raises:
            HeadlessError: ``bad_policy`` (unknown policy, unreadable file, not a JSON object, a
                value that is neither an object nor ``"decline"``/``"cancel"``, or ``url_done``
                with ``decline``/``cancel``).
        """
        if url_done and spec in (DECLINE, CANCEL):
            raise HeadlessError("bad_policy", f"--url-done accepts URL-mode requests, but the {spec!r} policy answers "
                                              f"every request with {spec!r}: use accept-defaults or answers:FILE.json")
        if spec in (ACCEPT_DEFAULTS, DECLINE, CANCEL):
            return cls(spec, url_done=url_done)
        if spec.startswith(ANSWERS + ":"):
            path = Path(spec[len(ANSWERS) + 1:])
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise HeadlessError("bad_policy", f"cannot read answers file {path}: {exc.__class__.__name__}") \
                    from None
            return cls.from_answers(data, url_done=url_done)
        raise HeadlessError("bad_policy", f"unknown consent policy {spec!r} (accept-defaults, decline, cancel, "
                                          "answers:FILE.json)")

    @classmethod
    def from_answers(cls, data: Any, *, url_done: bool = False) -> ConsentPolicy:
        """An ``answers`` policy from an already-parsed object (see :meth:`parse`)."""
        if not isinstance(data, dict):
            raise HeadlessError("bad_policy", "the answers file must hold a JSON object keyed by input-request key")
        for key, value in data.items():
            if not (isinstance(value, dict) or value in (DECLINE, CANCEL)):
                raise HeadlessError("bad_policy", f"answer for {key!r} must be an object (the content) or "
                                                  "\"decline\"/\"cancel\"")
        return cls(ANSWERS, answers=dict(data), url_done=url_done)

    # -- building the answers of one round ---------------------------------------------------

    def approved_deprecated(self, rnd: Round) -> dict[str, dict[str, Any]] | None:
        """The sampling/roots requests of ``rnd`` this policy approves (see the module docstring),
        as ``{key: form data}`` (``{}`` for roots), or ``None`` when it refuses one of them (the
        operation is then refused). ``{}`` when the round holds none."""
        approved: dict[str, dict[str, Any]] = {}
        for key, view in rnd.requests.items():
            if view.kind not in ("sampling", "roots"):
                continue
            given = self.answers.get(key) if self.kind == ANSWERS else None
            if isinstance(given, dict):
                approved[key] = dict(given) if view.kind == "sampling" else {}
            elif self.kind == ACCEPT_DEFAULTS and view.kind == "roots":
                approved[key] = {}
            else:
                return None
        return approved

    def responses(self, rnd: Round, provided: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The answers to every request of ``rnd``, or ``None`` when the round holds a
        sampling/roots request without an answer in ``provided`` (built by the caller for the keys
        :meth:`approved_deprecated` names: the configured roots, the provider's sampling result):
        the operation is then refused. For ``accept-defaults``, every request is answered
        ``cancel`` when :meth:`missing_defaults` names a field (refused when the round also holds
        a sampling/roots request: those cannot be cancelled one by one)."""
        out: dict[str, Any] = {}
        provided = provided or {}
        deprecated = [key for key, view in rnd.requests.items() if view.kind in ("sampling", "roots")]
        if any(key not in provided for key in deprecated):
            return None
        if self.missing_defaults(rnd):
            return None if deprecated else {key: {"action": CANCEL} for key in rnd.requests}
        for key, view in rnd.requests.items():
            if key in deprecated:
                out[key] = provided[key]
                continue
            given = self.answers.get(key, DECLINE) if self.kind == ANSWERS else None
            if self.kind in (DECLINE, CANCEL):
                out[key] = {"action": self.kind}
            elif view.kind == "url":
                if given in (DECLINE, CANCEL):
                    out[key] = {"action": given}
                else:
                    out[key] = {"action": "accept"} if self.url_done else {"action": DECLINE}
            elif self.kind == ACCEPT_DEFAULTS:
                content = default_content(view.schema) if view.schema is not None else None
                out[key] = {"action": "accept", "content": content} if content is not None else {"action": CANCEL}
            else:
                out[key] = {"action": "accept", "content": dict(given)} if isinstance(given, dict) \
                    else {"action": given}
        return out

    def missing_defaults(self, rnd: Round) -> list[str]:
        """For ``accept-defaults``: the fields of ``rnd``'s forms that keep it from accepting --
        required fields without a default, or whose defaults fail the form's own schema -- as
        ``KEY.FIELD`` (:func:`shown_name`), in request and field order; ``[]`` for any other
        policy, or when every form can be accepted with its defaults."""
        if self.kind != ACCEPT_DEFAULTS:
            return []
        missing: list[str] = []
        for key, view in rnd.requests.items():
            if view.kind == "url" or view.schema is None:
                continue
            names = [f.name for f in view.schema.fields if f.required and not f.has_default]
            if not names:
                try:
                    view.schema.validate({f.name: f.default for f in view.schema.fields if f.has_default})
                except ContentMismatch as exc:  # the server's own defaults break its schema
                    names = [f.name for f in view.schema.fields if f.name in exc.errors] or \
                        [f.name for f in view.schema.fields if f.has_default]
            missing += [f"{shown_name(key)}.{shown_name(name)}" for name in names]
        return missing


def default_content(checked: CheckedSchema) -> dict[str, Any] | None:
    """The ``accept-defaults`` content of a form: its defaults (optional fields without one left
    out), or ``None`` when a required field has no default or the defaults do not validate."""
    if any(spec.required and not spec.has_default for spec in checked.fields):
        return None
    try:
        return checked.validate({spec.name: spec.default for spec in checked.fields if spec.has_default})
    except ContentMismatch:
        return None


#: the longest server name :func:`shown_name` returns, in characters
SHOWN_NAME_CHARS = 100


def shown_name(name: Any) -> str:
    """A server-chosen key or field name fit for a terminal line or a log: control, bidi and
    invisible characters made visible (``⟨U+202E⟩``, :func:`mrtrweb.text.display.shown`); at most
    :data:`SHOWN_NAME_CHARS` characters (then "…")."""
    text = display.shown(str(name))
    return text if len(text) <= SHOWN_NAME_CHARS else text[: SHOWN_NAME_CHARS - 1] + "…"


# --------------------------------------------------------------------------------------------
# Running one operation
# --------------------------------------------------------------------------------------------


def server_for(url: str, tenant: Any) -> McpServer:
    """The tenant's :class:`McpServer` for ``url`` (the first one with exactly that URL), created
    (named after the URL) when the tenant has none (sync).

    Raises:
        django.core.exceptions.ValidationError: ``url`` is not an http(s) URL without credentials.
    """
    server = McpServer.objects.filter(tenant=tenant, url=url).order_by("pk").first()
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
    while McpServer.objects.filter(tenant=tenant, name=name).exists():
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
