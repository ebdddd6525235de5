"""Requests a 2025-11-25 server sends while one of our calls is open (``elicitation/create``,
``sampling/createMessage``, ``roots/list``), routed to the handler of the call they belong to.

:class:`ServerRequestRouting` is a mixin of :class:`~mrtrweb.mcp.connection.McpConnection`; it uses
the connection's ``declare``, ``origin`` and ``_open_calls`` (``{id key: OpenCall}``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientRequestContext
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from pydantic import TypeAdapter, ValidationError

__all__ = ["OpenCall", "ServerRequestHandler", "ServerRequestRouting"]

logger = logging.getLogger("mrtrweb.mcp.connection")

#: ``async (method, params) -> result | ErrorData``: answers a request the server sent while a call
#: was open (2025-11-25 ``elicitation/create``, ``sampling/createMessage``, ``roots/list``).
#: ``params`` are the request's params as JSON; the result is the JSON result object (an
#: ``ElicitResult``, ``CreateMessageResult`` or ``ListRootsResult``) or an ``ErrorData`` to refuse.
ServerRequestHandler = Callable[[str, dict[str, Any]], Awaitable["dict[str, Any] | types.ErrorData"]]

_SAMPLING_RESULT: TypeAdapter[Any] = TypeAdapter(types.CreateMessageResult | types.CreateMessageResultWithTools)


@dataclasses.dataclass
class OpenCall:
    """A request sent by :meth:`mrtrweb.mcp.connection.McpConnection.send` and not answered yet (see :meth:`ServerRequestRouting._route`)."""

    method: str
    handler: ServerRequestHandler | None
    budget: float
    scope: anyio.CancelScope | None = None
    holding: int = 0  # server requests of this call being answered right now (its timeout is paused)




class ServerRequestRouting:
    """The server-request half of a connection (see the module doc)."""

    declare: frozenset[str]
    origin: str
    _open_calls: dict[Any, OpenCall]

    def _route_undeclared(self, session: Any) -> None:
        """Route undeclared sampling/roots requests to the call too, once the capabilities are sent.

        The SDK answers a request for an undeclared capability itself ("not supported"), unseen by
        the product; after negotiation (the capabilities already went out: at ``initialize``, or
        fixed in the 2026-07-28 stamp), our handlers replace its defaults so that such a request
        reaches the call's handler and is refused and recorded there. SDK internals:
        ``ClientSession._sampling_callback`` / ``_list_roots_callback`` (``mcp==2.3``).
        """
        if "sampling" not in self.declare:
            session._sampling_callback = self._on_server_sampling  # pyright: ignore[reportPrivateUsage]
        if "roots" not in self.declare:
            session._list_roots_callback = self._on_server_list_roots  # pyright: ignore[reportPrivateUsage]

    async def _route(self, method: str, params: dict[str, Any]) -> dict[str, Any] | types.ErrorData:
        """Hand a server-to-client request to the handler of the call it belongs to.

        The SDK does not tell which of our requests a server request relates to (the Streamable
        HTTP transport drops the stream it came on), so the rule is: it belongs to **the only call
        in flight** on this connection. With no call, several calls, or a call sent without
        ``on_server_request``, it is refused with an error rather than guessed. While the handler
        runs (a person may be deciding), the call's timeout is paused; it restarts in full after.
        """
        calls = list(self._open_calls.values())
        if len(calls) != 1 or calls[0].handler is None:
            why = ("no call is in flight" if not calls else
                   "several calls are in flight, so it cannot be told which one it belongs to" if len(calls) > 1 else
                   "the call in flight does not take server requests")
            logger.info("server request %s from %s refused: %s", method, self.origin, why)
            return types.ErrorData(code=INVALID_REQUEST, message=f"{method} refused by the client: {why}")
        call = calls[0]
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

