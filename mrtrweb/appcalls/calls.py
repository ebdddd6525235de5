"""An app's ``tools/call`` and ``resources/read`` as operations of the page's person, with initiator
``app`` (issue 31 item 4): the one path, :func:`mrtrweb.operations.start_operation` -- the gate,
the limits, access at every phase, the rounds on the host's consent card, the audit.

* :func:`request_tool_call` -- the app asked for a tool: rate, the server's listing, the app's
  right (:mod:`.rights`), its arguments checked against the tool's ``inputSchema`` exactly as a
  person's JSON box is (:class:`mrtrweb.consent.forms.JsonArgumentsForm`, so
  :func:`mrtrweb.consent.argschema.check_arguments`: bounded, nothing fetched; ``bad_arguments``,
  JSON-RPC ``-32602``, before anything is held or sent). A read-only tool (``readOnlyHint: true``) starts at once; any other waits
  for the person's confirmation: a :class:`Pending` held in the binding cache under a random token
  for ``APPS_CALL_TIMEOUT_S``, rendered by the host page outside the frame;
* :func:`confirm` -- the person's Confirm (starts it, once) or Decline (nothing is sent);
* :func:`read_resource` -- ``resources/read`` from the app's own server, read-only, no confirmation;
* :func:`app_operation` / :func:`outcome` -- what the host page reads of the app's operation while
  it waits: its status, and once completed its final result only (never a round, a
  ``requestState`` or an answer: the rounds are answered on the host's card);
* the time limit: every app operation is stopped (``by="app_timeout"``) when it has not ended
  ``APPS_CALL_TIMEOUT_S`` seconds after the app asked, by a timer of the worker that started it
  and, failing that, by the next :func:`outcome` read.

``initiator_detail``: the host's (:meth:`.host.AppHost.detail`) plus ``confirmation``
(``read_only`` or ``person``) and, when the person confirmed, ``confirmed_by`` (the audit's keyed
digest of the person).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext_noop

from .. import catalog, conf, operations
from ..audit.events import keyed_digest
from ..consent.forms import JsonArgumentsForm
from ..mcp import McpCallError
from ..models import Operation
from ..servers import connections
from . import rights
from .errors import AppCallRefused
from .host import AppHost, cache

logger = logging.getLogger("mrtrweb.appcalls")

BAD_REQUEST = gettext_noop("The app's request is not one this site understands.")
DECLINED = gettext_noop("You declined the app's call; nothing was sent.")
EXPIRED = gettext_noop("The app's call waited too long for a decision; nothing was sent.")
UNAVAILABLE = gettext_noop("The app's server could not be reached to check the tool.")
BAD_ARGUMENTS = gettext_noop("The app's arguments do not fit the tool's input schema; nothing was sent.")
TOO_LARGE = gettext_noop("The app's arguments are larger than this site takes (256 KB); nothing was sent.")
#: the largest arguments an app may send (compact JSON, bytes)
MAX_ARGUMENT_BYTES = 256 * 1024
_PENDING = "mrtrweb-app-confirm:"
_WAITING = "mrtrweb-app-waiting:"
#: the most calls of one app waiting for the person's confirmation at once; past it ``too_many_waiting``
MAX_WAITING_CONFIRMATIONS = 3
TOO_MANY_WAITING = gettext_noop("The app already has calls waiting for your confirmation; decide those first.")
_timers: set[asyncio.Task] = set()


@dataclass(frozen=True)
class Pending:
    """A call waiting for the person's confirmation: ``token`` (the cache key's tail) and the
    listed ``spec`` of the tool (the card shows its name, title, description, annotations)."""

    token: str
    spec: dict[str, Any]
    arguments: dict[str, Any]


def timeout_s() -> float:
    return float(conf.get("APPS_CALL_TIMEOUT_S"))


def _count_waiting(host_pk: Any, step: int) -> bool:
    """Count one more (``step`` 1) or one fewer (-1) call of the app of operation ``host_pk`` waiting
    for the person's confirmation; False (nothing counted) when one more would pass
    :data:`MAX_WAITING_CONFIRMATIONS`. The count lives ``APPS_CALL_TIMEOUT_S`` from the first waiting
    call of its window, as long as the calls themselves, so an expired call frees its place by then."""
    store, key, ttl = cache(), _WAITING + str(host_pk), int(timeout_s()) + 1
    if step < 0:
        try:
            store.decr(key)
        except ValueError:  # the window ended: nothing counted any more
            pass
        return True
    store.add(key, 0, ttl)
    try:
        now = store.incr(key)
    except ValueError:  # expired between add and incr
        store.add(key, 1, ttl)
        now = 1
    if now > MAX_WAITING_CONFIRMATIONS:
        try:
            store.decr(key)
        except ValueError:
            pass
        return False
    return True


def _checked_arguments(arguments: Any) -> dict[str, Any]:
    import json

    if arguments is None:
        return {}
    if not isinstance(arguments, dict):
        raise AppCallRefused("bad_request", BAD_REQUEST)
    try:
        size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        raise AppCallRefused("bad_request", BAD_REQUEST) from None
    if size > MAX_ARGUMENT_BYTES:
        logger.info("app call refused: its arguments are %d bytes (at most %d)", size, MAX_ARGUMENT_BYTES)
        raise AppCallRefused("bad_arguments", TOO_LARGE, 413)
    return arguments


def _schema_checked(spec: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Sync (it may take up to ``argschema.CHECK_TIMEOUT_S``): ``arguments`` checked against the
    listed tool's ``inputSchema`` by the person's own path, :class:`JsonArgumentsForm` (not JSON,
    nested too deep, a lone surrogate, a schema mismatch, or a schema that cannot be checked within
    the bounds). The reason's code is logged, never an argument.

    Raises:
        AppCallRefused: ``bad_arguments`` (400), the form's sentence as its ``detail``.
    """
    import json

    try:
        text = json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        raise AppCallRefused("bad_request", BAD_REQUEST) from None
    form = JsonArgumentsForm(spec.get("inputSchema"), data={"arguments": text})
    if form.is_valid():
        return
    errors = form.errors.as_data().get("arguments") or []
    logger.info("app call of %s refused: its arguments do not fit the tool's inputSchema (%s)",
                str(spec.get("name"))[:100], ",".join(str(e.code) for e in errors) or "invalid")
    raise AppCallRefused("bad_arguments", BAD_ARGUMENTS, detail=" ".join(
        str(m) for e in errors for m in e.messages)[:500])


async def _listed_tools(user: Any, host: AppHost) -> list[Any]:
    try:
        conn = await connections.connection_for(user, host.server)
        return list(await conn.list_tools())
    except McpCallError as exc:
        logger.info("app of operation %s: tools of server %s not listed (%s)", host.op.pk, host.server.pk, exc.code)
        raise AppCallRefused("unavailable", UNAVAILABLE, 503) from None


async def _start(user: Any, host: AppHost, method: str, name: str, params: dict[str, Any], *,
                 spec: dict[str, Any] | None, detail: dict[str, str], asked_at: float) -> Operation:
    try:
        op = await operations.start_operation(
            user=user, server=host.server, method=method, name=name, params=params,
            destructive=spec is not None and catalog.is_destructive(spec),
            output_schema=(spec or {}).get("outputSchema"),
            initiator=Operation.Initiator.APP, initiator_detail={**host.detail(), **detail})
    except operations.OperationRefused as exc:
        raise AppCallRefused(exc.code, exc.message, exc.status or 409) from None
    logger.info("app of operation %s: %s %s started as operation %s (%s)", host.op.pk, method, name[:100], op.pk,
                detail.get("confirmation", ""))
    left = max(1.0, asked_at + timeout_s() - time.time())
    timer = asyncio.ensure_future(_time_limit(op.pk, left))
    _timers.add(timer)
    timer.add_done_callback(_timers.discard)
    return op


async def _time_limit(op_id: Any, seconds: float) -> None:
    await asyncio.sleep(seconds)
    try:
        op = await operations.load_operation(op_id)
        if op.status in Operation.LIVE:
            logger.info("app operation %s: over its time limit, stopped", op_id)
            await operations.stop_operation(op, by="app_timeout")
    except Exception:  # noqa: BLE001 -- the next outcome() read stops it, or the round expires by itself
        logger.warning("app operation %s: its time limit could not stop it", op_id, exc_info=True)


async def request_tool_call(user: Any, host: AppHost, name: Any, arguments: Any) -> Operation | Pending:
    """The app's ``tools/call`` of ``name`` with ``arguments``: the started operation (read-only
    tool) or the :class:`Pending` confirmation.

    Raises:
        AppCallRefused: see :mod:`.rights`, ``bad_request``, ``bad_arguments`` (not the tool's
            ``inputSchema``, or past :data:`MAX_ARGUMENT_BYTES`), ``unavailable``, or a refused start.
    """
    asked_at = time.time()
    arguments = _checked_arguments(arguments)
    if not isinstance(name, str) or not name:
        raise AppCallRefused("bad_request", BAD_REQUEST)
    await sync_to_async(rights.take_slot)(host.op.pk)
    spec = rights.tool_for_app(await _listed_tools(user, host), name)
    await sync_to_async(_schema_checked, thread_sensitive=False)(spec, arguments)
    if rights.read_only(spec):
        return await _start(user, host, "tools/call", name, {"name": name, "arguments": arguments}, spec=spec,
                            detail={"confirmation": "read_only"}, asked_at=asked_at)
    if not await sync_to_async(_count_waiting)(host.op.pk, 1):
        logger.info("app of operation %s: refused, %d calls already wait for the person", host.op.pk,
                    MAX_WAITING_CONFIRMATIONS)
        raise AppCallRefused("too_many_waiting", TOO_MANY_WAITING, 429)
    token = secrets.token_urlsafe(24)
    held = {"user": user.pk, "host": str(host.op.pk), "name": name, "arguments": arguments, "spec": spec,
            "asked_at": asked_at}
    await sync_to_async(cache().set)(_PENDING + token, held, int(timeout_s()) + 1)
    logger.info("app of operation %s: %s waits for the person's confirmation", host.op.pk, name[:100])
    return Pending(token=token, spec=spec, arguments=arguments)


def _take_pending(token: str) -> dict[str, Any] | None:
    store = cache()
    held = store.get(_PENDING + token)
    if not isinstance(held, dict) or not store.delete(_PENDING + token):
        return None  # unknown, expired, or taken by a concurrent decision: that one counts
    _count_waiting(held.get("host"), -1)
    return held


async def confirm(user: Any, host: AppHost, token: str, *, yes: bool) -> Operation:
    """The person's decision on a pending call: ``yes`` starts it (once), else nothing is sent.

    Raises:
        AppCallRefused: ``declined`` (409), ``expired`` (410: unknown, used or past its time; also
            another person's or another app's token), or a refused start.
    """
    held = await sync_to_async(_take_pending)(str(token)[:100])
    if held is None or held.get("user") != user.pk or held.get("host") != str(host.op.pk) \
            or time.time() > held["asked_at"] + timeout_s():
        raise AppCallRefused("expired", EXPIRED, 410)
    if not yes:
        logger.info("app of operation %s: the person declined %s", host.op.pk, str(held["name"])[:100])
        raise AppCallRefused("declined", DECLINED, 409)
    return await _start(user, host, "tools/call", held["name"], {"name": held["name"], "arguments": held["arguments"]},
                        spec=held["spec"], asked_at=held["asked_at"],
                        detail={"confirmation": "person", "confirmed_by": keyed_digest(f"user:{user.pk}")})


async def read_resource(user: Any, host: AppHost, uri: Any) -> Operation:
    """The app's ``resources/read`` of ``uri``, from the app's own server only (the host's; the app
    cannot name another).

    Raises:
        AppCallRefused: ``bad_request``, ``rate_limited``, or a refused start.
    """
    asked_at = time.time()
    if not isinstance(uri, str) or not uri or len(uri) > 2000 or not uri.isprintable():
        raise AppCallRefused("bad_request", BAD_REQUEST)
    await sync_to_async(rights.take_slot)(host.op.pk)
    return await _start(user, host, "resources/read", uri, {"uri": uri}, spec=None,
                        detail={"confirmation": "read_only"}, asked_at=asked_at)


async def app_operation(user: Any, host: AppHost, op_id: Any) -> Operation:
    """The operation ``op_id`` of ``user`` that this host's app made (404 otherwise)."""
    op = await operations.operation_for(user, op_id)
    if op.initiator != Operation.Initiator.APP or (op.initiator_detail or {}).get("app_of") != str(host.op.pk):
        raise Http404("Not this app's call")
    return op


async def outcome(op: Operation) -> dict[str, Any]:
    """What the host page reads of an app's operation: ``{"status": "running" | "awaiting_input"}``
    (with ``"round"``), ``{"status": "completed", "result": {...}}``, or ``{"status": <ended>,
    "error": code, "message": text}``. An operation past its time limit is stopped first."""
    if op.status in Operation.LIVE:
        age = (timezone.now() - op.created_at).total_seconds()
        if age > timeout_s() + 5:  # its timer's worker is gone: stopped here
            try:
                await operations.stop_operation(op, by="app_timeout")
            except Exception:  # noqa: BLE001 -- an outage: the page asks again, the round expires by itself
                logger.warning("app operation %s: over its time limit, its stop could not be written", op.pk)
                return {"status": str(op.status), "round": op.rounds}
            op = await operations.load_operation(op.pk)
    if op.status == Operation.Status.RUNNING:
        return {"status": "running"}
    if op.status == Operation.Status.AWAITING_INPUT:
        return {"status": "awaiting_input", "round": op.rounds}
    if op.status == Operation.Status.COMPLETED and isinstance(op.result, dict):
        return {"status": "completed", "result": op.result}
    return {"status": str(op.status), "error": op.error_code or str(op.status),
            "message": op.error_message or str(op.status)}
