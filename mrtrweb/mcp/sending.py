"""Sending one request on a connection under the id the product chose, and getting its raw result
back: the send half of :class:`~mrtrweb.mcp.connection.McpConnection` (a mixin: it uses the
connection's ``timeout_s``, ``_live_client``, ``_evidence``, ``_open_calls``, ``_in_flight``,
``_broken``, ``_last_activity``, from :mod:`.param_headers` ``_param_headers``, and from
:mod:`.session_renewal` what renews a lost 2025-11-25 session).

SDK internals used here (pinned by ``tests/mcp/test_mcp_client.py``): ``ClientSession._stamp`` (adds
the negotiated protocol's ``_meta`` and ``Mcp-*`` headers) and
``ClientSession._dispatcher.send_raw_request`` with ``CallOptions["request_id"]``; see the module
docstring of :mod:`.connection` for why the public ``send_request`` cannot be used.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import encode_header_value
from mcp_types import CLIENT_CAPABILITIES_META_KEY as _CAPS_KEY

from .errors import SESSION_LOST, TIMEOUT, TRANSPORT_ERROR, McpCallError
from .evidence import classify, id_key
from .server_log import LogCallback, stamp_level
from .server_requests import SENDING, OpenCall, ServerRequestHandler

__all__ = ["ProgressCallback", "Sending"]

#: ``async (progress, total, message) -> None``; ``progress``/``total`` are the server's numbers.
ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]


def _per_request(data: dict[str, Any], opts: CallOptions, extensions: Mapping[str, Any] | None) -> None:
    """After the SDK's stamp: the per-request extensions (on a copy of the session's capabilities,
    which the stamp shares between requests) and ``Mcp-Name`` for ``tasks/*`` (SEP-2663)."""
    meta = (data.get("params") or {}).get("_meta")
    if not isinstance(meta, dict) or _CAPS_KEY not in meta:
        return  # a 2025-11-25 connection: nothing per request
    if extensions:
        caps = json.loads(json.dumps(meta[_CAPS_KEY]))
        caps.setdefault("extensions", {}).update(extensions)
        meta[_CAPS_KEY] = caps
    task_id = data["params"].get("taskId")
    if str(data.get("method", "")).startswith("tasks/") and isinstance(task_id, str):
        opts.setdefault("headers", {})["Mcp-Name"] = encode_header_value(task_id)


class Sending:
    """The send half of a connection (see the module doc)."""

    timeout_s: float
    session_generation: int

    async def send(
        self,
        method: str,
        params: Mapping[str, Any],
        request_id: str | int,
        *,
        on_progress: ProgressCallback | None = None,
        timeout_s: float | None = None,
        on_server_request: ServerRequestHandler | None = None,
        extensions: Mapping[str, Any] | None = None,
        on_log: LogCallback | None = None,
        log_level: str | None = None,
    ) -> dict[str, Any]:
        """Send one JSON-RPC request under exactly ``request_id``; return the raw ``result`` object.

        ``params`` reach the wire as given (copied; never mutated), plus what the SDK stamps
        for the negotiated protocol: at 2026-07-28 the ``_meta`` keys
        ``io.modelcontextprotocol/protocolVersion``/``clientInfo``/``clientCapabilities`` (and
        ``progressToken`` when ``on_progress`` is given), and for a ``tools/call`` the
        ``Mcp-Param-*`` headers its tool's ``x-mcp-header`` annotations designate (SEP-2243; from
        this connection's tools listing, listed first if the tool was not in it:
        :mod:`.param_headers`). The result is the JSON object as decoded
        from the wire, with no pydantic validation: malformed MRTR results come back as they are.

        Args:
            method: e.g. ``"tools/call"``, ``"prompts/get"``, ``"resources/read"``.
            params: the request params (a JSON object).
            request_id: the wire id; must not collide with a request in flight on this
                connection. Use strings that do not parse as integers (UUIDs): the SDK's own ids
                are integers and ``"7"`` correlates like ``7``.
            on_progress: ``async (progress, total, message)`` for ``notifications/progress``.
            timeout_s: overrides the connection's ``timeout_s`` for this request.
            on_server_request: answers the requests the server sends on this call's response
                stream (2025-11-25 servers: ``elicitation/create``, ``sampling/createMessage``,
                ``roots/list``); while it runs, this call's timeout is paused. Without it such
                requests are refused. See :meth:`_route` for how a request is matched to a call.
            extensions: client extensions declared for this one request (2026-07-28, SEP-2575
                per-request opt-in: added to ``_meta["io.modelcontextprotocol/clientCapabilities"]
                .extensions``; e.g. the tasks extension, :mod:`.tasks`). Ignored on a 2025-11-25
                connection. A ``tasks/*`` request also carries ``Mcp-Name: <taskId>`` (SEP-2663).
            on_log: ``async (level, logger, data)`` for the ``notifications/message`` this call's
                response stream carries (:mod:`.server_log`).
            log_level: the least level of log messages asked for (one of ``server_log.LEVELS``):
                ``_meta`` of this request at 2026-07-28, ``logging/setLevel`` on a 2025-11-25
                session first where the server declares ``logging`` and the session has another.

        On a 2025-11-25 connection whose session the server lost (HTTP 404 to its
        ``Mcp-Session-Id``), a new session is opened before the request goes out; the request that
        got the 404 is not sent again (:mod:`.session_renewal`).

        Raises:
            McpCallError: ``transport_error``, ``jsonrpc_error`` or ``timeout``;
                ``invalid_x_mcp_header`` (nothing sent) for a tool the listing excluded;
                ``session_lost`` (2025-11-25: the server no longer knows the session the request
                went out on; it is not sent again).
            ValueError: ``request_id`` is not a str/int, or is already in flight here.
            TypeError: ``params`` is not a mapping or not JSON-serializable.
        """
        return await self._send(method, params, request_id, on_progress=on_progress, timeout_s=timeout_s,
                                on_server_request=on_server_request, extensions=extensions, on_log=on_log,
                                log_level=log_level)

    async def _send(self, method: str, params: Mapping[str, Any], request_id: str | int, *,
                    on_progress: ProgressCallback | None = None, timeout_s: float | None = None,
                    on_server_request: ServerRequestHandler | None = None,
                    extensions: Mapping[str, Any] | None = None, renew: bool = True,
                    probe: bool = True, on_log: LogCallback | None = None,
                    log_level: str | None = None) -> dict[str, Any]:
        """:meth:`send`; ``renew``: open a new session first if the current one is lost; ``probe``:
        after a broken response stream, ask whether the session is lost (``False`` for the probe's
        own ``ping``)."""
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            raise ValueError("request_id must be a str or an int")
        if not isinstance(params, Mapping):
            raise TypeError("params must be a mapping")
        try:
            # A JSON round trip is the deep copy: it also refuses what the transport could not
            # serialize (which would otherwise fail inside the SDK's task group and kill the connection).
            wire_params = json.loads(json.dumps(params, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"params are not JSON: {exc}") from None
        param_headers = await self._param_headers(method, wire_params)  # may list tools first (SEP-2243)
        if renew:
            await self._renew_if_lost()  # the server lost the session: a new one first (once per loss)
        if log_level is not None:  # 2025-11-25: the session's level first; 2026-07-28: this request's _meta
            await self._settle_level(log_level, self.protocol_version,  # type: ignore[attr-defined]
                                     self.server_capabilities)  # type: ignore[attr-defined]
            stamp_level(wire_params, log_level, self.protocol_version)
        session = self._live_client().session
        generation = self.session_generation
        if self._evidence.expecting(request_id):
            raise ValueError(f"request id {request_id!r} is already in flight on this connection")
        data: dict[str, Any] = {"method": method, "params": wire_params}
        opts: CallOptions = {"request_id": request_id}
        if on_progress is not None:
            opts["on_progress"] = on_progress
        # SDK internals (see module docstring): the same stamp ClientSession.send_request applies,
        # then the dispatcher's raw send, which returns the response's `result` dict unvalidated.
        session._stamp(data, opts)  # pyright: ignore[reportPrivateUsage]
        _per_request(data, opts, extensions)
        if param_headers:  # the SDK's stamp adds its own only for tools its ClientSession listed: none
            opts.setdefault("headers", {}).update(param_headers)
        dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage]
        budget = self.timeout_s if timeout_s is None else timeout_s
        self._evidence.expect(request_id)
        self._in_flight += 1
        open_call = self._open_calls[id_key(request_id)] = OpenCall(method, on_server_request, budget, on_log=on_log)
        sending = SENDING.set(open_call)  # what this call's POST stream carries is related to it (_route)
        try:
            with anyio.fail_after(budget) as open_call.scope:
                raw = await dispatcher.send_raw_request(method, data.get("params"), opts)
        except TimeoutError:
            raise McpCallError(TIMEOUT, f"{method}: no response within {budget:g}s") from None
        except MCPError as exc:
            seen = self._evidence.take(request_id)
            error = classify(exc, seen, method)
            if error.code in (SESSION_LOST, TRANSPORT_ERROR):  # a new session next, or a broken connection
                error = await self._session_failure(error, seen, generation, method, probe=probe)
            raise error from None
        except ValueError:
            raise  # our caller reused an id still in flight
        except Exception as exc:  # the transport or dispatcher failed underneath us
            self._broken = True
            raise McpCallError(TRANSPORT_ERROR, f"{method}: {type(exc).__name__}: {exc}") from None
        finally:
            SENDING.reset(sending)
            self._in_flight -= 1
            self._last_activity = time.monotonic()
            self._evidence.take(request_id)
            self._open_calls.pop(id_key(request_id), None)
        if not isinstance(raw, dict):  # pragma: no cover - the SDK's JSONRPCResponse guarantees a dict
            raise McpCallError(TRANSPORT_ERROR, f"{method}: result is not a JSON object")
        return raw


#: event-loop turns :func:`end_reading` waits for the dispatcher's read loop to finish
_END_READING_TURNS = 20


async def end_reading(session: Any) -> bool:
    """End the SDK session's read loop as at the end of its stream, before the session exits.

    ``ClientSession.__aexit__`` cancels its task group, dispatcher included; an anyio task that ends
    by cancellation stays in a reference cycle (its task group's done callback keeps the
    ``CancelledError`` whose traceback holds that callback's frame), and with it everything the
    dispatcher reaches: the session, its transport, its socket, this connection. Measured: ~173
    objects and ~35 KiB per closed connection, freed only by a full collection, and the bulk of
    what the young collections of a worker releasing sessions had to free. Closing the read
    stream's receiving end makes the loop stop as at EOF (the SDK's own "receive end closed under
    us" path: waiting requests fail with ``CONNECTION_CLOSED``, as on any close), so the task ends
    normally and the session is freed by reference counting. Waits at most
    :data:`_END_READING_TURNS` loop turns; returns whether the loop ended (``False``: the session
    exits as before, by cancellation). SDK internals (see the module docstring); never raises.
    """
    dispatcher = getattr(session, "_dispatcher", None)
    stream = getattr(dispatcher, "_read_stream", None)
    if stream is None or not hasattr(stream, "close") or not hasattr(dispatcher, "_tg"):
        return False
    try:
        stream.close()
    except Exception:  # noqa: BLE001 -- the session's own exit cleans up as before
        return False
    for _ in range(_END_READING_TURNS):
        await asyncio.sleep(0)
        if dispatcher._tg is None:  # pyright: ignore[reportPrivateUsage] -- its run() reached its finally
            await asyncio.sleep(0)  # its last (shielded) yield, then the task returns
            await asyncio.sleep(0)
            return True
    return False


def let_go(session: Any) -> None:
    """After the SDK session exited: drop what it holds. The session and its dispatcher hold each
    other (the dispatcher's hooks are the session's bound methods, the session's request stamp a
    closure over another), so once closed they would wait for a full collection, holding this
    connection's callbacks and, through them, the connection. Called only once the session has
    exited (nothing reads it afterwards: :attr:`McpConnection._client` is cleared first)."""
    try:
        vars(getattr(session, "_dispatcher", None) or object()).clear()
        vars(session).clear()
    except TypeError:  # no __dict__ (another SDK build): left to the collector, as before
        pass


def leaf_exception(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
