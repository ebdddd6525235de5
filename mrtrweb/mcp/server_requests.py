"""Requests a 2025-11-25 server sends us (``elicitation/create``, ``sampling/createMessage``,
``roots/list``): a request **related to a call** is handed to that call's handler (a round of the
call); one that is **not** is answered at session level, by policy.

Related means: it came on that call's own response stream (the SSE stream of the call's POST,
2025-11-25 basic/transports "Sending Messages to the Server" 5-6), or -- only for
``elicitation/create`` and ``sampling/createMessage`` -- it came on the standalone GET stream while
exactly one call that takes server requests is open on the connection (servers do ask a call's
question there; see :meth:`ServerRequestRouting._only_call_asking`). Anything else -- ``roots/list``
on the standalone GET stream (transports "Listening for Messages from the Server": "SHOULD be
unrelated to any concurrently-running JSON-RPC request"; servers ask it after ``initialized``), the
``initialize`` POST's stream, an elicitation with no call or several calls open -- is
session-level: ``roots/list`` gets the server's configured roots through
``session_roots`` where the connection declared ``roots`` (a tenant admin allowed them), else an
error; ``elicitation/create`` and ``sampling/createMessage`` are refused (a person is not asked for
what no operation of theirs asked). Each session-level answer is logged with the method and the
server's origin (and, for roots, how many were sent), never with values; at most one line per
connection, method and outcome every :data:`LOG_EVERY_S` seconds (the next says how many were held back).

How the stream is known (``mcp==2.3``, pinned by ``tests/mcp/test_session_requests.py``): the client
transport hands inbound messages to the dispatcher without metadata, but the SDK carries the
sender's ``contextvars`` along every hop, for its own middleware and tracing:

* ``StreamableHTTPTransport.post_writer`` starts each request's POST task in the context of the
  task that wrote the request (``write_stream_reader.last_context``), i.e. :meth:`send`'s;
* every message read from that POST's SSE stream is put on the read stream from that task
  (``ContextSendStream.send`` snapshots ``contextvars.copy_context()``);
* ``JSONRPCDispatcher._spawn(..., sender_ctx=...)`` runs the request's handler in that snapshot.

So :data:`SENDING`, set by ``send`` to its :class:`OpenCall` while it writes the request, is what
the handler of a request from that POST's stream sees. The standalone GET stream is started from
the ``notifications/initialized`` write, in the connection's owner task, where :data:`SENDING` is
``None`` (the owner resets it); so is the ``initialize`` POST. Never a guess from timing.

:class:`ServerRequestRouting` is a mixin of :class:`~mrtrweb.mcp.connection.McpConnection`; it uses
the connection's ``declare``, ``origin``, ``session_roots`` and ``_open_calls`` (``{id key: OpenCall}``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.client.session import ClientRequestContext
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from pydantic import TypeAdapter, ValidationError

from .loglimit import LogLimiter

__all__ = ["OUTSIDE_A_CALL", "ROOTS_NOT_ALLOWED", "SENDING", "OpenCall", "RootsProvider", "ServerRequestHandler",
           "ServerRequestRouting"]

logger = logging.getLogger("mrtrweb.mcp.connection")

#: at most one line per connection, method and outcome of a session-level request every this many seconds
LOG_EVERY_S: Final = 10.0


def session_log() -> LogLimiter:
    """A connection's limiter of session-level request lines (see :data:`LOG_EVERY_S`)."""
    return LogLimiter(logger, LOG_EVERY_S)

#: ``async (method, params) -> result | ErrorData``: answers a request the server sent on a call's
#: response stream (2025-11-25 ``elicitation/create``, ``sampling/createMessage``, ``roots/list``).
#: ``params`` are the request's params as JSON; the result is the JSON result object (an
#: ``ElicitResult``, ``CreateMessageResult`` or ``ListRootsResult``) or an ``ErrorData`` to refuse.
ServerRequestHandler = Callable[[str, dict[str, Any]], Awaitable["dict[str, Any] | types.ErrorData"]]

#: ``async () -> {"roots": [{"uri": "file://...", "name"?: str}, ...]} | ErrorData``: the roots a
#: session-level ``roots/list`` gets (the server's configured roots, or an error when they are no
#: longer allowed). Never reads or opens a file.
RootsProvider = Callable[[], Awaitable["dict[str, Any] | types.ErrorData"]]

#: the :class:`OpenCall` whose request the current task is writing (see the module doc)
SENDING: contextvars.ContextVar[OpenCall | None] = contextvars.ContextVar("mrtrweb_mcp_sending", default=None)

#: why a session-level ``roots/list`` is refused where roots were not declared (not allowed)
ROOTS_NOT_ALLOWED: Final = "roots are not allowed for this server"
#: why a session-level ``elicitation/create`` / ``sampling/createMessage`` is refused
OUTSIDE_A_CALL: Final = ("it is not related to any call of ours (it did not come on a call's response stream, and "
                         "not one call was open), and a person is not asked for what none of their operations asked")

_SAMPLING_RESULT: TypeAdapter[Any] = TypeAdapter(types.CreateMessageResult | types.CreateMessageResultWithTools)


@dataclasses.dataclass(eq=False)
class OpenCall:
    """A request sent by :meth:`mrtrweb.mcp.connection.McpConnection.send` and not answered yet (see :meth:`ServerRequestRouting._route`)."""

    method: str
    handler: ServerRequestHandler | None
    budget: float
    scope: anyio.CancelScope | None = None
    holding: int = 0  # server requests of this call being answered right now (its timeout is paused)
    on_log: Any = None  # the call's LogCallback (mrtrweb.mcp.server_log), or None


def _refused(method: str, why: str) -> types.ErrorData:
    return types.ErrorData(code=INVALID_REQUEST, message=f"{method} refused by the client: {why}")


class ServerRequestRouting:
    """The server-request half of a connection (see the module doc)."""

    declare: frozenset[str]
    origin: str
    session_roots: RootsProvider | None
    _open_calls: dict[Any, OpenCall]
    _session_log: LogLimiter  # session_log(), made with the connection

    def _route_undeclared(self, session: Any) -> None:
        """Route undeclared sampling/roots requests to the call too, once the capabilities are sent.

        The SDK answers a request for an undeclared capability itself ("not supported"), unseen by
        the product; after negotiation (the capabilities already went out: at ``initialize``, or
        fixed in the 2026-07-28 stamp), our handlers replace its defaults so that such a request
        reaches the call's handler (refused and recorded there) or, outside a call, is refused at
        session level. SDK internals:
        ``ClientSession._sampling_callback`` / ``_list_roots_callback`` (``mcp==2.3``).
        """
        if "sampling" not in self.declare:
            session._sampling_callback = self._on_server_sampling  # pyright: ignore[reportPrivateUsage]
        if "roots" not in self.declare:
            session._list_roots_callback = self._on_server_list_roots  # pyright: ignore[reportPrivateUsage]

    async def _route(self, method: str, params: dict[str, Any]) -> dict[str, Any] | types.ErrorData:
        """Answer a server-to-client request: a round of the call whose response stream it came on,
        else at session level (:meth:`_answer_session_level`). See the module doc for how the stream
        is known.

        A request on a call's stream is refused (``-32600``) when that call was sent without
        ``on_server_request`` or has already ended. While the call's handler runs (a person may be
        deciding), the call's timeout is paused; it restarts in full after. Returns the JSON result
        or an ``ErrorData``; a failing handler gives ``-32603``, never an exception into the SDK.
        """
        call = SENDING.get()
        if call is None and method != "roots/list":
            call = self._only_call_asking(method)
        if call is None:
            return await self._answer_session_level(method, params)
        if call not in self._open_calls.values():
            why = "the call it came with has ended"
        elif call.handler is None:
            why = "the call it came with does not take server requests"
        else:
            why = ""
        if why:
            logger.info("server request %s from %s refused: %s", method, self.origin, why)
            return _refused(method, why)
        assert call.handler is not None
        call.holding += 1
        if call.scope is not None:
            call.scope.deadline = math.inf
        try:
            return await call.handler(method, params)
        except Exception:  # noqa: BLE001 - a handler bug must not kill the connection
            logger.exception("handler of server request %s failed", method)
            return types.ErrorData(code=INTERNAL_ERROR, message=f"{method}: the client failed to handle it")
        finally:
            call.holding -= 1
            if call.scope is not None and not call.holding:
                call.scope.deadline = anyio.current_time() + call.budget

    def _only_call_asking(self, method: str) -> OpenCall | None:
        """An ``elicitation/create`` / ``sampling/createMessage`` that came on the standalone stream
        while **exactly one** call that takes server requests is open on this connection: that
        call's (many servers ask a call's question there, e.g. the TypeScript SDK's
        ``server.elicitInput`` without ``relatedRequestId``, and the conformance suite's
        ``elicitation-sep1034-client-defaults``; an operation's legacy call has a connection of its
        own). With none or several open, ``None``: refused at session level, never guessed.
        ``roots/list`` never comes here: aside from a call's stream it is the session's."""
        calls = [c for c in self._open_calls.values() if c.handler is not None]
        if len(calls) != 1:
            return None
        logger.info("server request %s from %s came on the standalone stream while one call is open: a round of "
                    "that call", method, self.origin)
        return calls[0]

    async def _answer_session_level(self, method: str, params: dict[str, Any]) -> dict[str, Any] | types.ErrorData:
        """A request related to no call: ``roots/list`` gets ``session_roots()`` where ``roots`` was
        declared (else ``-32600`` :data:`ROOTS_NOT_ALLOWED`); anything else is refused (``-32600``
        :data:`OUTSIDE_A_CALL`). Logged with the method and the server's origin only."""
        if method == "roots/list" and "roots" in self.declare and self.session_roots is not None:
            try:
                out = await self.session_roots()
            except Exception:  # noqa: BLE001 - a provider bug must not kill the connection
                logger.exception("roots of session-level roots/list from %s not read", self.origin)
                return types.ErrorData(code=INTERNAL_ERROR, message="roots/list: the client failed to read its roots")
            if isinstance(out, dict):
                count = len(out["roots"]) if isinstance(out.get("roots"), list) else 0
                self._session_log.info("roots answered", "session-level roots/list from %s answered with "
                                  "%d configured root(s)", self.origin, count)
            else:
                self._session_log.info("roots refused", "session-level roots/list from %s refused: %s",
                                  self.origin, out.message)
            return out
        why = ROOTS_NOT_ALLOWED if method == "roots/list" else OUTSIDE_A_CALL
        self._session_log.info(f"{method} refused", "session-level %s from %s refused: %s", method,
                          self.origin, why)
        return _refused(method, why)

    async def _route_typed(self, method: str, params: Any, model: Any) -> Any:
        out = await self._route(method, params.model_dump(by_alias=True, mode="json", exclude_none=True)
                                if params is not None else {})
        if isinstance(out, types.ErrorData):
            return out
        try:
            return model.validate_python(out) if isinstance(model, TypeAdapter) else model.model_validate(out)
        except ValidationError:
            logger.warning("handler of server request %s returned an invalid %s", method, getattr(model, "__name__", model))
            return types.ErrorData(code=INTERNAL_ERROR, message=f"{method}: the client built an invalid result")

    async def _on_server_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        # Installing it also makes the SDK advertise the elicitation capability (form + url).
        return await self._route_typed("elicitation/create", params, types.ElicitResult)

    async def _on_server_sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        return await self._route_typed("sampling/createMessage", params, _SAMPLING_RESULT)

    async def _on_server_list_roots(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        return await self._route_typed("roots/list", None, types.ListRootsResult)

