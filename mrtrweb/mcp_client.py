"""The product's MCP connection adapter: Streamable HTTP through the ``mcp`` SDK (``mcp==2.3.*``).

:class:`McpConnection` connects with ``mode="auto"`` (``server/discover`` at 2026-07-28, falling back
to the legacy ``initialize`` handshake) and sends single JSON-RPC requests whose **id the product
chooses** and whose **raw result object** comes back untouched, so the MRTR gate
(:mod:`mrtrweb.gate`) judges exactly what the server put on the wire::

    async with McpConnection("https://mcp.example/mcp") as conn:
        raw = await conn.send("tools/call", {"name": "deploy", "arguments": {...}}, "3f1c...-uuid")
        # raw == {"resultType": "input_required", "inputRequests": {...}, "requestState": "..."}
        final = await conn.send("tools/call", {..., "inputResponses": {...}, "requestState": "..."},
                                "9a7e...-uuid")

:class:`ConnectionPool` keeps one connection per ``(user, server)`` on one event loop.

SDK internals used (all in :meth:`McpConnection.send`, pinned by ``tests/test_mcp_client.py``):
``ClientSession._stamp`` (adds the negotiated protocol's ``_meta`` and ``Mcp-*`` headers) and
``ClientSession._dispatcher.send_raw_request`` with ``CallOptions["request_id"]`` (sends under our
id and returns the raw result dict). The SDK itself does the same in
``mcp.client.subscriptions.listen``. The public ``send_request`` cannot be used: it mints its own
id and validates the result with pydantic (raising ``ValidationError`` on malformed results,
losing the raw dict).

Server-to-client requests (2025-11-25 servers): an ``elicitation/create``, ``sampling/createMessage``
or ``roots/list`` the server sends while a call is open goes to that call's ``on_server_request``
handler (``send(..., on_server_request=...)``), matched as the only call in flight on the
connection; anything else is refused with a JSON-RPC error (see :meth:`McpConnection._route`).

Error model: every failure surfaces as :class:`McpCallError` with a stable ``code``:
``transport_error`` (connect/HTTP/network failure, unusable response body, closed connection),
``jsonrpc_error`` (the server answered with a JSON-RPC error; ``rpc_code``/``rpc_message``/
``rpc_data`` keep it), ``timeout``, and ``invalid_result`` (only from the ``list_*`` helpers: the
listing did not parse).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import math
import ssl
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from pydantic import TypeAdapter, ValidationError

from mrtrweb import __version__

__all__ = [
    "INVALID_RESULT",
    "JSONRPC_ERROR",
    "TIMEOUT",
    "TRANSPORT_ERROR",
    "ConnectionPool",
    "McpCallError",
    "McpConnection",
    "ProgressCallback",
    "ServerRequestHandler",
    "origin_of",
]

logger = logging.getLogger(__name__)

TRANSPORT_ERROR: Final = "transport_error"
JSONRPC_ERROR: Final = "jsonrpc_error"
TIMEOUT: Final = "timeout"
INVALID_RESULT: Final = "invalid_result"

#: ``async (progress, total, message) -> None``; ``progress``/``total`` are the server's numbers.
ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]

#: ``async (method, params) -> result | ErrorData``: answers a request the server sent while a call
#: was open (2025-11-25 ``elicitation/create``, ``sampling/createMessage``, ``roots/list``).
#: ``params`` are the request's params as JSON; the result is the JSON result object (an
#: ``ElicitResult``, ``CreateMessageResult`` or ``ListRootsResult``) or an ``ErrorData`` to refuse.
ServerRequestHandler = Callable[[str, dict[str, Any]], Awaitable["dict[str, Any] | types.ErrorData"]]

CLIENT_INFO = types.Implementation(name="mrtrweb", version=__version__)
_LIST_PAGE_CAP = 100  # a paginator that never ends cannot hang a listing
#: a listing (all its pages) of more items than this is refused as ``invalid_result``
MAX_LISTED_ITEMS: Final = 50_000
#: the most bytes of one HTTP response body to a request the client POSTs (a JSON body or the SSE
#: stream of one request); a larger one fails the request with ``transport_error`` ("the response is
#: larger than N bytes"). It bounds the memory of a response and the SDK's parse of it, which runs
#: on the event loop (about 60-160 ms per MB, holding the GIL): the product's own checks of a
#: listing or a result run off the loop, item by item. 8 MiB keeps that parse near half a second
#: (and a stored result is at most ``MAX_STORED_RESULT_BYTES`` anyway).
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
#: the most bytes of a JSON body the HTTP evidence hook parses to tell a JSON-RPC error apart
_EVIDENCE_PARSE_BYTES: Final = 1024 * 1024
_CLOSE_GRACE_S = 5.0  # how long close() lets the SDK unwind before cancelling it
#: the deprecated client capabilities a connection may declare (``McpConnection(declare=...)``)
DECLARABLE: Final = frozenset({"sampling", "roots"})
_SAMPLING_RESULT: TypeAdapter[Any] = TypeAdapter(types.CreateMessageResult | types.CreateMessageResultWithTools)


class McpCallError(Exception):
    """A call (or connect) failed. ``code`` is one of the stable codes below; ``message`` is for logs.

    Attributes:
        code: ``transport_error``, ``jsonrpc_error``, ``timeout`` or ``invalid_result``.
        message: human-readable detail (may contain server text: escape before display).
        rpc_code: the JSON-RPC error code (``jsonrpc_error`` only).
        rpc_message: the JSON-RPC error message (``jsonrpc_error`` only).
        rpc_data: the JSON-RPC error ``data`` member, if any (``jsonrpc_error`` only).
        http_status: the HTTP status of the response, when one was seen and it was not 2xx.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        rpc_code: int | None = None,
        rpc_message: str | None = None,
        rpc_data: Any = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.rpc_code = rpc_code
        self.rpc_message = rpc_message
        self.rpc_data = rpc_data
        self.http_status = http_status


def origin_of(url: str) -> str:
    """``scheme://host:port`` of an http(s) URL: lowercase scheme and host, default port explicit.

    >>> origin_of("HTTPS://MCP.Example.com/mcp")
    'https://mcp.example.com:443'
    >>> origin_of("http://[::1]:8080/x")
    'http://[::1]:8080'

    Userinfo, path, query and fragment are dropped.

    Raises:
        ValueError: not a string, not http/https, no host, or an invalid port.
    """
    if not isinstance(url, str):
        raise ValueError("URL must be a string")
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"unparseable URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError("URL scheme must be http or https")
    host = (parts.hostname or "").lower()
    if not host:
        raise ValueError("URL has no host")
    if port is None:
        port = 443 if scheme == "https" else 80
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


# --------------------------------------------------------------------------------------------
# HTTP evidence: tells a server's JSON-RPC error apart from one the SDK synthesized
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _HttpSeen:
    """The HTTP response that carried (or failed to carry) one request's answer.

    ``body`` classifies a JSON body: ``"error"`` (a JSON-RPC error object), ``"other"`` (anything
    else, including unparseable bytes), or ``None`` (not a JSON body: SSE, text, none).
    """

    status: int
    content_type: str
    body: str | None


def _id_key(request_id: str | int) -> tuple[str, str | int]:
    return (type(request_id).__name__, request_id)


class _HttpEvidence:
    """An httpx2 response hook recording, per expected request id, the HTTP response that answered it.

    The SDK turns HTTP and body-level failures into JSON-RPC errors it synthesizes
    (``MCPError``), indistinguishable by code from errors a server sends (``-32000`` is both the
    SDK's "connection closed" and a common server error code). This hook supplies the missing
    evidence: whether an HTTP response arrived for the request, its status, and, for a JSON body,
    whether that body really is a JSON-RPC error. (The body is read here once; httpx2 caches it
    and the SDK's own ``aread()`` gets the same bytes.)
    """

    def __init__(self) -> None:
        self._expected: dict[tuple[str, str | int], _HttpSeen | None] = {}

    def expecting(self, request_id: str | int) -> bool:
        return _id_key(request_id) in self._expected

    def expect(self, request_id: str | int) -> None:
        self._expected[_id_key(request_id)] = None

    def take(self, request_id: str | int) -> _HttpSeen | None:
        return self._expected.pop(_id_key(request_id), None)

    async def on_response(self, response: httpx2.Response) -> None:
        if not self._expected or response.request.method != "POST":
            return
        try:
            sent = json.loads(response.request.content)
        except (ValueError, httpx2.RequestNotRead):
            return
        if not isinstance(sent, dict) or "method" not in sent:
            return
        request_id = sent.get("id")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return
        key = _id_key(request_id)
        if key not in self._expected:
            return
        content_type = response.headers.get("content-type", "").lower()
        body: str | None = None
        if content_type.startswith("application/json"):
            body = "other"
            try:
                await response.aread()
            except ResponseTooLarge:
                body = "too_large"
            except Exception:  # noqa: BLE001 - the SDK reports an unreadable body itself
                pass
            else:
                # a JSON-RPC error is small: a body of megabytes (a result) is not parsed on the loop again
                if len(response.content) <= _EVIDENCE_PARSE_BYTES:
                    with contextlib.suppress(Exception):
                        parsed = json.loads(response.content)
                        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) and "result" not in parsed:
                            body = "error"
        self._expected[key] = _HttpSeen(response.status_code, content_type, body)


class ResponseTooLarge(httpx2.StreamError):
    """A response body went past :data:`MAX_RESPONSE_BYTES` (reading it stopped there)."""


class _BoundedStream(httpx2.AsyncByteStream):
    """A response body that stops with :class:`ResponseTooLarge` past ``limit`` bytes."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def __aiter__(self) -> Any:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise ResponseTooLarge(f"the response is larger than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _bound_response(response: httpx2.Response) -> None:
    """httpx2 response hook (the first): the body of each POST's response is bounded by
    :data:`MAX_RESPONSE_BYTES` (:class:`_BoundedStream`), before anything reads it.

    Only POSTs: a request's answer (a JSON body, or the SSE stream of that one request). The
    long-lived GET stream of server notifications is left as the SDK reads it."""
    if response.request.method == "POST":
        response.stream = _BoundedStream(response.stream, MAX_RESPONSE_BYTES)


def _sse_synthesized(error: types.ErrorData) -> bool:
    """Whether ``error`` is one the SDK's transport made up while reading an SSE response.

    Matched on the SDK's own message texts (``mcp/client/streamable_http.py``, ``mcp==2.3``): an
    unparseable SSE event, or a stream that ended or failed without a response. Only consulted
    for SSE bodies, which the HTTP evidence cannot inspect.
    """
    if error.code == PARSE_ERROR and error.message.startswith("Failed to parse SSE"):
        return True
    return error.code == CONNECTION_CLOSED and (
        error.message == "Connection closed" or error.message.startswith("SSE stream")
    )


def _classify(exc: MCPError, seen: _HttpSeen | None, method: str) -> McpCallError:
    """Map an SDK ``MCPError`` for one request to our stable codes, using the HTTP evidence."""
    error = exc.error
    ok = seen is not None and 200 <= seen.status < 300
    sse = ok and seen is not None and seen.status != 202 and seen.content_type.startswith("text/event-stream")
    server_said = seen is not None and (seen.body == "error" or (sse and not _sse_synthesized(error)))
    if server_said:
        assert seen is not None
        return McpCallError(
            JSONRPC_ERROR,
            f"{method}: JSON-RPC error {error.code}: {error.message}",
            rpc_code=error.code,
            rpc_message=error.message,
            rpc_data=error.data,
            http_status=None if ok else seen.status,
        )
    if seen is None:
        # No HTTP response answered this request: network failure or the connection closed.
        return McpCallError(TRANSPORT_ERROR, f"{method}: no response ({error.message})")
    if not ok:
        return McpCallError(TRANSPORT_ERROR, f"{method}: HTTP {seen.status}", http_status=seen.status)
    if seen.body == "too_large":
        return McpCallError(TRANSPORT_ERROR, f"{method}: the response is larger than {MAX_RESPONSE_BYTES} bytes")
    return McpCallError(
        TRANSPORT_ERROR,
        f"{method}: unusable HTTP {seen.status} response ({seen.content_type or 'no content type'}): {error.message}",
    )


def _leaf_exception(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@dataclasses.dataclass
class _OpenCall:
    """A request sent by :meth:`McpConnection.send` and not answered yet (see :meth:`McpConnection._route`)."""

    method: str
    handler: ServerRequestHandler | None
    budget: float
    scope: anyio.CancelScope | None = None
    holding: int = 0  # server requests of this call being answered right now (its timeout is paused)


# --------------------------------------------------------------------------------------------
# The connection
# --------------------------------------------------------------------------------------------


@functools.cache
def tls_client_context() -> ssl.SSLContext:
    """The TLS client context every :class:`McpConnection` of this process shares.

    It is httpx2's default (``httpx2.create_ssl_context()``: certificate and host name verified,
    the CA bundle httpx2 uses, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured as httpx2 honours
    them), built once. An httpx2 client left to build its own context loads the CA bundle each
    time: about 25 ms of CPU and 0.8 MiB per connection, i.e. per user and server, measured in
    ``docs/benchmarks`` (pending capacity). Sharing one ``ssl.SSLContext`` between clients is
    what the ``ssl`` module designs it for; nothing per user lives in it.
    """
    return httpx2.create_ssl_context()


class McpConnection:
    """One Streamable HTTP connection to an MCP server, negotiated with ``mode="auto"``.

    The SDK ``Client`` is entered and exited inside a dedicated owner task (anyio task groups
    must be entered and exited by the same task), so :meth:`open`, :meth:`send` and
    :meth:`close` may each be called from any task of the event loop the connection was opened
    on. Requests may run concurrently.

    Args:
        url: the Streamable HTTP endpoint (``http``/``https``).
        timeout_s: seconds allowed for :meth:`open` (connect + negotiation) and, by default,
            for each request.
        declare: the deprecated client capabilities to declare to this server: ``"sampling"``,
            ``"roots"`` (where a tenant admin allowed them). ``elicitation`` (form + url) is always
            declared. A server's request for an undeclared one still reaches the call's
            ``on_server_request`` (to be refused and recorded there), see :meth:`_route`.
    """

    def __init__(self, url: str, *, timeout_s: float = 30.0, declare: Collection[str] = ()) -> None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        if not set(declare) <= DECLARABLE:
            raise ValueError(f"declare may only name {sorted(DECLARABLE)}")
        self.declare = frozenset(declare)
        self.url = url
        self.origin = origin_of(url)
        self.timeout_s = float(timeout_s)
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._evidence = _HttpEvidence()
        self._failure: str | None = None
        self._broken = False
        self._in_flight = 0
        self._last_activity = time.monotonic()
        self._open_calls: dict[tuple[str, str | int], _OpenCall] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and negotiate. Returns once the connection is usable.

        Raises:
            McpCallError: ``transport_error`` (refused, HTTP failure, negotiation failed) or
                ``timeout`` (not connected within ``timeout_s``).
            RuntimeError: already opened.
        """
        if self._owner is not None:
            raise RuntimeError("McpConnection.open() was already called")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._owner = loop.create_task(self._own(ready), name=f"mcp-connection {self.origin}")
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.shield(ready)
        except TimeoutError:
            await self._abort_owner()
            raise McpCallError(TIMEOUT, f"not connected to {self.origin} within {self.timeout_s:g}s") from None
        except McpCallError:
            await self._abort_owner()  # the owner task is already unwinding; wait for it
            raise
        except BaseException:
            await self._abort_owner()  # our caller was cancelled mid-connect
            raise
        self._last_activity = time.monotonic()

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """Owner task: hold ``async with Client(...)`` open until :meth:`close` sets the stop event."""
        assert self._stop is not None
        timeout = httpx2.Timeout(self.timeout_s, read=max(self.timeout_s, MCP_DEFAULT_SSE_READ_TIMEOUT))
        # what the SDK's create_mcp_http_client builds (it only sets the timeout), with the shared TLS context
        http = httpx2.AsyncClient(timeout=timeout, verify=tls_client_context())
        http.event_hooks["response"].append(_bound_response)
        http.event_hooks["response"].append(self._evidence.on_response)
        try:
            async with http:
                # Server-to-client requests on an open call (2025-11-25): see _route. Installing a
                # callback is what makes the SDK declare the capability, so sampling/roots only as asked.
                callbacks: dict[str, Any] = {"elicitation_callback": self._on_server_elicitation}
                if "sampling" in self.declare:
                    callbacks["sampling_callback"] = self._on_server_sampling
                if "roots" in self.declare:
                    callbacks["list_roots_callback"] = self._on_server_list_roots
                client = Client(
                    streamable_http_client(self.url, http_client=http),
                    mode="auto",
                    cache=None,
                    client_info=CLIENT_INFO,
                    **callbacks,
                )
                async with client:
                    self._route_undeclared(client.session)
                    self._client = client
                    if not ready.done():
                        ready.set_result(None)
                    await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - the owner task must report, never crash the loop
            cancelled = isinstance(exc, asyncio.CancelledError)
            leaf = _leaf_exception(exc)
            self._failure = f"{type(leaf).__name__}: {leaf}"
            if not ready.done():
                if cancelled:
                    ready.cancel()
                elif isinstance(leaf, MCPError):
                    ready.set_exception(
                        McpCallError(TRANSPORT_ERROR, f"negotiation with {self.origin} failed: {leaf.error.message}")
                    )
                else:
                    why = f"cannot connect to {self.origin}: {self._failure}"
                    ready.set_exception(McpCallError(TRANSPORT_ERROR, why))
            elif not (cancelled or self._stop.is_set()):
                logger.info("MCP connection to %s lost: %s", self.origin, self._failure)
            if cancelled and not self._stop.is_set():
                raise  # cancelled from outside (e.g. loop shutdown), not by close()
        finally:
            self._client = None

    async def _abort_owner(self) -> None:
        owner = self._owner
        if owner is None or owner.done():
            return
        if self._stop is not None:
            self._stop.set()
        owner.cancel()
        await asyncio.wait([owner])  # never raises the owner's outcome; our own cancellation propagates

    async def close(self) -> None:
        """Close the connection (idempotent; callable from any task of the loop). Never raises
        for connection problems; in-flight requests fail with ``transport_error``."""
        owner = self._owner
        if owner is None or owner.done():
            self._client = None
            return
        assert self._stop is not None
        self._stop.set()
        _done, pending = await asyncio.wait([owner], timeout=_CLOSE_GRACE_S)
        if pending:
            await self._abort_owner()

    async def __aenter__(self) -> McpConnection:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- state -------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """Whether the connection is open and has not reported a transport failure."""
        return (
            self._client is not None
            and self._owner is not None
            and not self._owner.done()
            and not (self._stop is not None and self._stop.is_set())
            and not self._broken
        )

    @property
    def protocol_version(self) -> str | None:
        """The negotiated protocol version (e.g. ``"2026-07-28"``), or ``None`` when not open."""
        client = self._client
        return client.session.protocol_version if client is not None else None

    @property
    def server_capabilities(self) -> dict[str, Any] | None:
        """The capabilities the server declared (``server/discover`` or ``initialize``), as JSON,
        or ``None`` when not open."""
        client = self._client
        caps = client.session.server_capabilities if client is not None else None
        return caps.model_dump(by_alias=True, mode="json", exclude_none=True) if caps is not None else None

    @property
    def in_flight(self) -> int:
        """Number of requests currently awaiting their response."""
        return self._in_flight

    def idle_for(self) -> float:
        """Seconds since the last request finished (0 while a request is in flight)."""
        return 0.0 if self._in_flight else time.monotonic() - self._last_activity

    def _live_client(self) -> Client:
        """The SDK client while the owner task holds it open (a ``_broken`` one is still usable)."""
        client, owner = self._client, self._owner
        if client is None or owner is None or owner.done() or (self._stop is not None and self._stop.is_set()):
            why = f" ({self._failure})" if self._failure else ""
            raise McpCallError(TRANSPORT_ERROR, f"connection to {self.origin} is not open{why}")
        return client

    # -- requests ------------------------------------------------------------------------------

    async def send(
        self,
        method: str,
        params: Mapping[str, Any],
        request_id: str | int,
        *,
        on_progress: ProgressCallback | None = None,
        timeout_s: float | None = None,
        on_server_request: ServerRequestHandler | None = None,
    ) -> dict[str, Any]:
        """Send one JSON-RPC request under exactly ``request_id``; return the raw ``result`` object.

        ``params`` reach the wire as given (copied; never mutated), plus what the SDK stamps
        for the negotiated protocol: at 2026-07-28 the ``_meta`` keys
        ``io.modelcontextprotocol/protocolVersion``/``clientInfo``/``clientCapabilities`` (and
        ``progressToken`` when ``on_progress`` is given). The result is the JSON object as decoded
        from the wire, with no pydantic validation: malformed MRTR results come back as they are.

        Args:
            method: e.g. ``"tools/call"``, ``"prompts/get"``, ``"resources/read"``.
            params: the request params (a JSON object).
            request_id: the wire id; must not collide with a request in flight on this
                connection. Use strings that do not parse as integers (UUIDs): the SDK's own ids
                are integers and ``"7"`` correlates like ``7``.
            on_progress: ``async (progress, total, message)`` for ``notifications/progress``.
            timeout_s: overrides the connection's ``timeout_s`` for this request.
            on_server_request: answers the requests the server sends while this call is open
                (2025-11-25 servers: ``elicitation/create``, ``sampling/createMessage``,
                ``roots/list``); while it runs, this call's timeout is paused. Without it such
                requests are refused. See :meth:`_route` for how a request is matched to a call.

        Raises:
            McpCallError: ``transport_error``, ``jsonrpc_error`` or ``timeout``.
            ValueError: ``request_id`` is not a str/int, or is already in flight here.
            TypeError: ``params`` is not a mapping or not JSON-serializable.
        """
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
        session = self._live_client().session
        if self._evidence.expecting(request_id):
            raise ValueError(f"request id {request_id!r} is already in flight on this connection")
        data: dict[str, Any] = {"method": method, "params": wire_params}
        opts: CallOptions = {"request_id": request_id}
        if on_progress is not None:
            opts["on_progress"] = on_progress
        # SDK internals (see module docstring): the same stamp ClientSession.send_request applies,
        # then the dispatcher's raw send, which returns the response's `result` dict unvalidated.
        session._stamp(data, opts)  # pyright: ignore[reportPrivateUsage]
        dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage]
        budget = self.timeout_s if timeout_s is None else timeout_s
        self._evidence.expect(request_id)
        self._in_flight += 1
        open_call = self._open_calls[_id_key(request_id)] = _OpenCall(method, on_server_request, budget)
        try:
            with anyio.fail_after(budget) as open_call.scope:
                raw = await dispatcher.send_raw_request(method, data.get("params"), opts)
        except TimeoutError:
            raise McpCallError(TIMEOUT, f"{method}: no response within {budget:g}s") from None
        except MCPError as exc:
            error = _classify(exc, self._evidence.take(request_id), method)
            if error.code == TRANSPORT_ERROR:
                self._broken = True
            raise error from None
        except ValueError:
            raise  # our caller reused an id still in flight
        except Exception as exc:  # the transport or dispatcher failed underneath us
            self._broken = True
            raise McpCallError(TRANSPORT_ERROR, f"{method}: {type(exc).__name__}: {exc}") from None
        finally:
            self._in_flight -= 1
            self._last_activity = time.monotonic()
            self._evidence.take(request_id)
            self._open_calls.pop(_id_key(request_id), None)
        if not isinstance(raw, dict):  # pragma: no cover - the SDK's JSONRPCResponse guarantees a dict
            raise McpCallError(TRANSPORT_ERROR, f"{method}: result is not a JSON object")
        return raw

    # -- requests from the server during an open call (2025-11-25) -------------------------------

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

    async def _listing(self, method: str, field: str, model: Any) -> list[dict[str, Any]]:
        """Walk a paginated listing; return its items as JSON dicts, each checked against ``model``.

        Each page comes back raw (:meth:`send`: no validation on the event loop) and is checked
        item by item in a worker thread (:func:`_check_page`): a listing of many thousands of
        items never holds the event loop for the whole check. At most :data:`MAX_LISTED_ITEMS`
        items in all are accepted; a longer listing is ``invalid_result``."""
        self._live_client()
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(self.timeout_s):
                for _ in range(_LIST_PAGE_CAP):
                    raw = await self.send(method, {"cursor": cursor} if cursor else {},
                                          f"mrtrweb-list-{uuid.uuid4()}", timeout_s=self.timeout_s)
                    page, cursor = await asyncio.to_thread(_check_page, raw, field, model,
                                                           MAX_LISTED_ITEMS - len(items))
                    items.extend(page)
                    if not cursor:
                        break
        except TimeoutError:
            raise McpCallError(TIMEOUT, f"{method}: no response within {self.timeout_s:g}s") from None
        except _ListingRefused as exc:
            raise McpCallError(INVALID_RESULT, f"{method}: {exc}") from None
        return items

    async def list_tools(self) -> list[dict[str, Any]]:
        """All tools as raw dicts (``name``, ``description``, ``inputSchema``, ...), all pages.

        Raises:
            McpCallError: ``transport_error``, ``jsonrpc_error``, ``timeout`` or ``invalid_result``.
        """
        return await self._listing("tools/list", "tools", types.Tool)

    async def list_prompts(self) -> list[dict[str, Any]]:
        """All prompts as raw dicts (``name``, ``description``, ``arguments``, ...), all pages.

        Raises:
            McpCallError: as :meth:`list_tools`.
        """
        return await self._listing("prompts/list", "prompts", types.Prompt)

    async def list_resources(self) -> list[dict[str, Any]]:
        """All resources as raw dicts (``uri``, ``name``, ...), all pages.

        Raises:
            McpCallError: as :meth:`list_tools`.
        """
        return await self._listing("resources/list", "resources", types.Resource)

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        """All resource templates as raw dicts (``uriTemplate``, ``name``, ...), all pages.

        Raises:
            McpCallError: as :meth:`list_tools`.
        """
        return await self._listing("resources/templates/list", "resourceTemplates", types.ResourceTemplate)


class _ListingRefused(Exception):
    """A listing page that is not a listing (or holds too many items); the message names why."""


def _check_page(raw: Any, field: str, model: Any, room: int) -> tuple[list[dict[str, Any]], str | None]:
    """One raw listing page: its items (each validated by ``model``, as JSON dicts) and its next cursor.

    Runs in a worker thread: item by item, so the event loop gets its turn between items.
    ``room``: how many more items the listing may hold."""
    listed = raw.get(field) if isinstance(raw, dict) else None
    if not isinstance(listed, list):
        raise _ListingRefused(f"malformed result (no {field} list)")
    if len(listed) > room:
        raise _ListingRefused(f"the server lists more than {MAX_LISTED_ITEMS} items")
    cursor = raw.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise _ListingRefused("malformed result (nextCursor is not a string)")
    items: list[dict[str, Any]] = []
    errors = 0
    for item in listed:
        try:
            items.append(model.model_validate(item).model_dump(by_alias=True, mode="json", exclude_none=True))
        except ValidationError as exc:
            errors += exc.error_count()
    if errors:
        raise _ListingRefused(f"malformed result ({errors} errors)")
    return items, cursor or None


# --------------------------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Slot:
    url: str
    connection: McpConnection
    declare: frozenset[str] = frozenset()


class ConnectionPool:
    """One :class:`McpConnection` per ``(user_key, server_key)``, reused across that user's operations.

    A connection is never shared between users: the key includes the user. The pool belongs to
    the event loop of its first :meth:`get` and must only be used from that loop. Connections
    idle (no request in flight) for ``idle_s`` seconds are closed by a background sweeper.

    Args:
        idle_s: idle lifetime in seconds (default 300).
        timeout_s: passed to each :class:`McpConnection`.
        factory: builds a connection (tests); default ``McpConnection(url, timeout_s=timeout_s)``.
    """

    def __init__(
        self,
        *,
        idle_s: float = 300.0,
        timeout_s: float = 30.0,
        factory: Callable[[str], McpConnection] | None = None,
    ) -> None:
        if not idle_s > 0:
            raise ValueError("idle_s must be positive")
        self.idle_s = float(idle_s)
        self.timeout_s = float(timeout_s)
        self._factory = factory or (lambda url, **kw: McpConnection(url, timeout_s=self.timeout_s, **kw))
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("ConnectionPool used from a different event loop than the one it belongs to")

    async def get(self, user_key: str, server_key: str, url: str, *, declare: Collection[str] = ()) -> McpConnection:
        """The open connection for this user and server, opening (or reopening) it if needed.

        A connection whose URL differs from ``url`` (the server was re-configured), that declares
        other capabilities than ``declare`` (see :class:`McpConnection`) or that died is closed and
        replaced: callers that declare differently use different ``server_key`` values. Concurrent
        calls for one key open at most one connection.

        Raises:
            McpCallError: opening failed (``transport_error`` or ``timeout``).
            ValueError: ``url`` is not an http(s) URL.
            RuntimeError: the pool was closed, or is used from another event loop.
        """
        self._check_loop()
        if self._closed:
            raise RuntimeError("ConnectionPool is closed")
        key = (str(user_key), str(server_key))
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if self._closed:
                raise RuntimeError("ConnectionPool is closed")
            slot = self._slots.get(key)
            wanted = frozenset(declare)
            if slot is not None and slot.url == url and slot.declare == wanted and slot.connection.is_open:
                slot.connection._last_activity = time.monotonic()  # a hand-out counts as activity
                return slot.connection
            if slot is not None:
                del self._slots[key]
                await slot.connection.close()
            connection = self._factory(url, declare=wanted) if wanted else self._factory(url)
            await connection.open()
            self._slots[key] = _Slot(url, connection, wanted)
            self._ensure_sweeper()
            return connection

    async def close(self, user_key: str, server_key: str) -> None:
        """Close and forget the connection for this user and server, if any."""
        key = (str(user_key), str(server_key))
        slot = self._slots.pop(key, None)
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            del self._locks[key]  # short-lived keys (one per operation) must not pile up
        if slot is not None:
            await slot.connection.close()

    async def close_all(self) -> None:
        """Close every connection and stop the sweeper. The pool cannot be used afterwards."""
        self._closed = True
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            await asyncio.wait([sweeper])
        slots = list(self._slots.values())
        self._slots.clear()
        await asyncio.gather(*(slot.connection.close() for slot in slots), return_exceptions=True)

    async def sweep(self) -> int:
        """Close connections idle for ``idle_s`` or dead; return how many were closed."""
        stale = [
            key
            for key, slot in self._slots.items()
            if not slot.connection.is_open
            or (slot.connection.in_flight == 0 and slot.connection.idle_for() >= self.idle_s)
        ]
        closed = 0
        for key in stale:
            lock = self._locks.get(key)
            if lock is not None and lock.locked():
                continue  # a get() is (re)opening it right now
            slot = self._slots.pop(key, None)
            if slot is None:
                continue
            await slot.connection.close()
            self._locks.pop(key, None)
            closed += 1
        return closed

    def __len__(self) -> int:
        return len(self._slots)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="mcp-pool-sweeper")

    async def _sweep_forever(self) -> None:
        period = min(max(self.idle_s / 4, 0.05), 30.0)
        while self._slots:
            await asyncio.sleep(period)
            try:
                await self.sweep()
            except Exception:  # pragma: no cover - close() does not raise; keep sweeping regardless
                logger.exception("MCP connection pool sweep failed")
