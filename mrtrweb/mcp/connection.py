"""One MCP connection: Streamable HTTP through the ``mcp`` SDK (``mcp==2.3.*``).

:class:`McpConnection` connects with the protocol chosen for the server (``protocol=``, see
:data:`PROTOCOLS`: ``"auto"`` = ``server/discover`` at 2026-07-28, falling back to the legacy
``initialize`` handshake; or one version pinned) and sends single JSON-RPC requests whose **id the
product chooses** and whose **raw result object** comes back untouched, so the MRTR gate
(:mod:`mrtrweb.gate`) judges exactly what the server put on the wire::

    async with McpConnection("https://mcp.example/mcp") as conn:
        raw = await conn.send("tools/call", {"name": "deploy", "arguments": {...}}, "3f1c...-uuid")
        # raw == {"resultType": "input_required", "inputRequests": {...}, "requestState": "..."}
        final = await conn.send("tools/call", {..., "inputResponses": {...}, "requestState": "..."},
                                "9a7e...-uuid")

SDK internals used (all in :meth:`McpConnection.send`, :mod:`.sending`, pinned by ``tests/mcp/test_mcp_client.py``):
``ClientSession._stamp`` (adds the negotiated protocol's ``_meta`` and ``Mcp-*`` headers) and
``ClientSession._dispatcher.send_raw_request`` with ``CallOptions["request_id"]`` (sends under our
id and returns the raw result dict). The SDK itself does the same in
``mcp.client.subscriptions.listen``. The public ``send_request`` cannot be used: it mints its own
id and validates the result with pydantic (raising ``ValidationError`` on malformed results,
losing the raw dict).

Server-to-client requests (2025-11-25 servers): an ``elicitation/create``, ``sampling/createMessage``
or ``roots/list`` the server sends on a call's own response stream goes to that call's
``on_server_request`` handler (``send(..., on_server_request=...)``); one that is related to no
call (the standalone GET stream, the handshake) is answered at session level: ``roots/list`` with
``session_roots()`` where ``roots`` is declared, anything else refused with a JSON-RPC error (see
:mod:`mrtrweb.mcp.server_requests`).

Log messages (``notifications/message``) on a call's own response stream go to that call's
``on_log`` (``send(..., on_log=..., log_level=...)``, :mod:`mrtrweb.mcp.server_log`).

Change notifications (``notifications/{tools,prompts,resources}/list_changed``) go to the
connection's ``on_list_changed`` (:mod:`mrtrweb.mcp.list_changed`): on a 2025-11-25 connection as the
server sends them, on a 2026-07-28 one once :meth:`McpConnection.watch_listings` opened the
``subscriptions/listen`` stream that carries them.

Error model: every failure surfaces as :class:`McpCallError` with a stable ``code``:
``transport_error`` (connect/HTTP/network failure, unusable response body, closed connection),
``jsonrpc_error`` (the server answered with a JSON-RPC error; ``rpc_code``/``rpc_message``/
``rpc_data`` keep it), ``timeout``, ``invalid_result`` (only from the ``list_*`` helpers: the
listing did not parse), and ``invalid_x_mcp_header`` (a ``tools/call`` of a tool excluded from the
listing for its invalid ``x-mcp-header``, SEP-2243; nothing is sent).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import Any, Final

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT
from mcp.shared.exceptions import MCPError

from mrtrweb import __version__

from .reachability import reason_of
from .errors import TIMEOUT, TRANSPORT_ERROR, McpCallError, origin_of
from .outbound import GuardedTransport, OutboundPolicy, http_transport
from . import evidence
from .listing import Listings
from .list_changed import ListChangedCallback, ListingWatch
from .resource_watch import ResourceWatch
from .server_log import ServerLogging
from .param_headers import ToolHeaders
from .protocol import PROTOCOLS, SDK_MODE, ProtocolMismatch, ProtocolRefused, settle_protocol
from .sending import ProgressCallback, Sending, end_reading, leaf_exception, let_go
from .server_requests import SENDING, OpenCall, RootsProvider, ServerRequestHandler, ServerRequestRouting, session_log
from .session_renewal import SessionRenewal
from .url_policy import REFUSED_AT_CONNECT, UNREADABLE, UrlPolicy, refusal_in

__all__ = ["CLIENT_INFO", "DECLARABLE", "PROTOCOLS", "McpConnection", "ProgressCallback", "ProtocolMismatch",
           "ServerRequestHandler"]

logger = logging.getLogger(__name__)


CLIENT_INFO = types.Implementation(name="mrtrweb", version=__version__)
_CLOSE_GRACE_S = 5.0  # how long close() lets the SDK unwind before cancelling it
#: the MCP Apps extension (SEP-1865): its identifier and the mime type of an app's HTML
APPS_EXTENSION: Final = "io.modelcontextprotocol/ui"
APPS_MIME_TYPE: Final = "text/html;profile=mcp-app"
#: the optional client capabilities a connection may declare (``McpConnection(declare=...)``): the
#: deprecated ``sampling`` and ``roots``, and ``apps`` (the extension :data:`APPS_EXTENSION`, declared
#: as ``{"mimeTypes": [APPS_MIME_TYPE]}`` in the capabilities' ``extensions``: at ``initialize`` on
#: 2025-11-25, in each request's client capabilities on 2026-07-28 -- the SDK's ``Client(extensions=)``)
DECLARABLE: Final = frozenset({"sampling", "roots", "apps"})


class McpConnection(Sending, SessionRenewal, ServerRequestRouting, Listings, ServerLogging, ListingWatch, ResourceWatch):
    """One Streamable HTTP connection to an MCP server, negotiated as ``protocol`` says.

    The SDK ``Client`` is entered and exited inside a dedicated owner task (anyio task groups
    must be entered and exited by the same task), so :meth:`open`, :meth:`send` and
    :meth:`close` may each be called from any task of the event loop the connection was opened
    on. Requests may run concurrently.

    Args:
        url: the Streamable HTTP endpoint (``http``/``https``).
        timeout_s: seconds allowed for :meth:`open` (connect + negotiation) and, by default,
            for each request.
        declare: the optional client capabilities to declare to this server: ``"sampling"``,
            ``"roots"`` (deprecated), ``"apps"`` (MCP Apps), where a tenant admin allowed them. ``elicitation`` (form + url) is always
            declared. A server's request for an undeclared one still reaches the call's
            ``on_server_request`` (to be refused and recorded there), see :meth:`_route`.
        session_roots: answers a ``roots/list`` related to no call (sent on the standalone stream
            or during the handshake) where ``roots`` is declared; without it, or without ``roots``
            declared, such a request is refused (:mod:`mrtrweb.mcp.server_requests`).
        auth: the ``httpx2.Auth`` of the server's auth mode (:mod:`mrtrweb.mcp.auth`), or ``None``.
            A ``401`` / ``403`` the server answers (on :meth:`open` or on a request) raises
            ``authorization_required`` / ``insufficient_scope`` / ``authorization_failed`` with the
            ``WWW-Authenticate`` parameters in ``McpCallError.challenge``.
        outbound: the outbound guard's policy for every request the auth makes to another origin
            than the server's own (token refresh, discovery); default: the guard's strict defaults.
        protocol: one of :data:`PROTOCOLS` (``McpServer.protocol``). A pinned version the server does
            not speak makes :meth:`open` raise :class:`ProtocolMismatch` (``transport_error``) saying
            what the server answered.
        url_policy: the deployer's URL policy (:class:`~mrtrweb.mcp.url_policy.UrlPolicy`) of a
            server added under it: the endpoint's origin is checked by it when the connection
            opens (and when a lost session is replaced) and every request goes to the address
            checked then (no DNS rebinding). A refusal makes :meth:`open` raise
            ``transport_error`` with ``reason="policy"``, nothing sent. ``None``: not checked.
        on_list_changed: ``async (kind) -> None`` with ``kind`` ``"tools"``, ``"prompts"`` or
            ``"resources"``, on each change notification the server sends (see the module doc);
            called on the connection's loop, its failures logged, never raised.

    Raises:
        ValueError: ``timeout_s`` not positive, ``declare`` names another capability, or
            ``protocol`` is not one of :data:`PROTOCOLS`.
    """

    def __init__(self, url: str, *, timeout_s: float = 30.0, declare: Collection[str] = (),
                 auth: httpx2.Auth | None = None, outbound: OutboundPolicy | None = None,
                 protocol: str = "auto", on_list_changed: ListChangedCallback | None = None,
                 session_roots: RootsProvider | None = None, url_policy: UrlPolicy | None = None) -> None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        if not set(declare) <= DECLARABLE:
            raise ValueError(f"declare may only name {sorted(DECLARABLE)}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {list(PROTOCOLS)}")
        self.declare = frozenset(declare)
        self.session_roots = session_roots
        self.protocol = protocol
        self.on_list_changed = on_list_changed
        self.url = url
        self.origin = origin_of(url)
        self.timeout_s = float(timeout_s)
        self.auth = auth
        self.outbound = outbound or OutboundPolicy()
        self.url_policy = url_policy
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._evidence = evidence.HttpEvidence()
        self._failure: str | None = None
        self._broken = False
        self._in_flight = 0
        self._last_activity = time.monotonic()
        self._open_calls: dict[tuple[str, str | int], OpenCall] = {}
        self._watch: asyncio.Task[None] | None = None
        self._lc_pending: dict[str, int] = {}
        self._lc_last: dict[str, float] = {}
        self._lc_tasks: set[asyncio.Task[None]] = set()
        self._init_resource_watch()  # resources pages follow (mcp.resource_watch)
        self._session_log = session_log()
        self._tool_headers = ToolHeaders()  # Mcp-Param-* headers from this connection's tools listing
        self._prelisting = asyncio.Lock()
        self._tools_kept: tuple[int, list[dict[str, Any]]] | None = None  # (session generation, tools): tools_known()
        self._listening: object | None = None  # a token while a listen stream for tool changes is acknowledged
        self._last_version: str | None = None
        self._init_server_log()  # notifications/message to the call they belong to (mcp.server_log)
        self._init_renewal()  # a 2025-11-25 session the server lost is replaced (mcp.session_renewal)

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and negotiate. Returns once the connection is usable.

        Raises:
            McpCallError: ``transport_error`` (refused, HTTP failure, negotiation failed, a pinned
                protocol version the server does not speak), ``timeout``
                (not connected within ``timeout_s``), ``authorization_required`` (HTTP 401),
                ``insufficient_scope`` / ``authorization_failed`` (a Bearer 403).
            RuntimeError: already opened.
        """
        if self._owner is not None:
            raise RuntimeError("McpConnection.open() was already called")
        await self._start()

    async def _start(self) -> None:
        """Start the owner task and wait until it negotiated (:meth:`open`; a new session after a
        lost one, :mod:`.session_renewal`). Raises as :meth:`open`."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._owner = loop.create_task(self._own(ready), name=f"mcp-connection {self.origin}")
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.shield(ready)
        except TimeoutError:
            await self._abort_owner()
            raise McpCallError(TIMEOUT, f"not connected to {self.origin} within {self.timeout_s:g}s",
                               reason="timeout") from None
        except McpCallError:
            await self._abort_owner()  # the owner task is already unwinding; wait for it
            raise
        except BaseException:
            await self._abort_owner()  # our caller was cancelled mid-connect
            raise
        self._last_activity = time.monotonic()
        self._last_version = self.protocol_version

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """Owner task: hold ``async with Client(...)`` open until :meth:`close` sets the stop event."""
        assert self._stop is not None
        # The standalone GET stream and the handshake run in this task's context: nothing there is
        # related to a call, even if open() was awaited inside one (see server_requests).
        SENDING.set(None)
        timeout = httpx2.Timeout(self.timeout_s, read=max(self.timeout_s, MCP_DEFAULT_SSE_READ_TIMEOUT))
        # what the SDK's create_mcp_http_client builds (it only sets the timeout), with the shared TLS context
        # Requests to another origin than the server's own (an auth's refresh or discovery) pass the guard.
        # With a URL policy, the endpoint's own origin is checked by it and pinned to the checked address.
        transport = GuardedTransport(self.outbound, mcp_origin=self.origin, mcp_policy=self.url_policy,
                                     inner=http_transport())
        http = httpx2.AsyncClient(timeout=timeout, transport=transport, auth=self.auth)
        http.event_hooks["response"].append(evidence.bound_response)
        http.event_hooks["response"].append(self._evidence.on_response)
        try:
            async with http:
                # Server-to-client requests (2025-11-25): see _route. Installing a
                # callback is what makes the SDK declare the capability, so sampling/roots only as asked.
                callbacks: dict[str, Any] = {"elicitation_callback": self._on_server_elicitation}
                if "sampling" in self.declare:
                    callbacks["sampling_callback"] = self._on_server_sampling
                if "roots" in self.declare:
                    callbacks["list_roots_callback"] = self._on_server_list_roots
                client = Client(
                    # one bound for an answer, JSON or one SSE event (evidence.MAX_RESPONSE_BYTES)
                    streamable_http_client(self.url, http_client=http, max_sse_event_size=evidence.MAX_RESPONSE_BYTES),
                    mode=SDK_MODE[self.protocol],
                    cache=None,  # never a cached listing: a page shows what the server lists now
                    client_info=CLIENT_INFO,
                    message_handler=self._on_message,
                    extensions=([advertise(APPS_EXTENSION, {"mimeTypes": [APPS_MIME_TYPE]})]
                                if "apps" in self.declare else None),
                    **callbacks,
                )
                async with client:
                    await settle_protocol(client.session, self.protocol, self.origin)
                    self._route_undeclared(client.session)
                    self._client = client
                    if not ready.done():
                        ready.set_result(None)
                    await self._stop.wait()
                    await end_reading(session := client.session)  # ends normally, freed by refcount (.sending)
                self._client = None
                let_go(session)
        except BaseException as exc:  # noqa: BLE001 - the owner task must report, never crash the loop
            cancelled = isinstance(exc, asyncio.CancelledError)
            leaf = leaf_exception(exc)
            self._failure = f"{type(leaf).__name__}: {leaf}"
            challenge = self._evidence.last_challenge
            auth_error = challenge.error("connect") if challenge is not None else None
            if not ready.done():
                if cancelled:
                    ready.cancel()
                elif auth_error is not None:
                    ready.set_exception(auth_error)
                elif isinstance(leaf, ProtocolRefused):
                    ready.set_exception(ProtocolMismatch(str(leaf), self.protocol))
                elif (refused := refusal_in(exc)) is not None:
                    error = McpCallError(TRANSPORT_ERROR, f"the URL policy refused {self.origin}: {refused.reason}",
                                         reason="policy")
                    # the product's words: nothing was sent
                    error.shown_message = UNREADABLE if refused.code == "setting" else REFUSED_AT_CONNECT
                    ready.set_exception(error)
                else:
                    reason, status = reason_of(leaf, self._evidence.last_status, self._evidence.last_content_type)
                    why = (f"negotiation with {self.origin} failed: {leaf.error.message}" if isinstance(leaf, MCPError)
                           else f"cannot connect to {self.origin}: {self._failure}")
                    ready.set_exception(McpCallError(TRANSPORT_ERROR, why, reason=reason, http_status=status))
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
        await self._close_renewal()
        await self._stop_watching()
        await self._stop_resource_watch()
        await self._stop_owner()

    async def _stop_owner(self) -> None:
        """Let the owner task close the SDK client (up to :data:`_CLOSE_GRACE_S`), then cancel it."""
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
        """Whether the connection is open and has not reported a transport failure (a 2025-11-25
        session the server lost counts as open: the next request opens a new one)."""
        if self._renewal_pending and not self._broken:
            return True
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
        if client is None:  # while a lost session is replaced: the version the connection spoke
            return self._last_version if self._renewal_pending else None
        return client.session.protocol_version

    @property
    def server_capabilities(self) -> dict[str, Any] | None:
        """The capabilities the server declared (``server/discover`` or ``initialize``), as JSON,
        or ``None`` when not open."""
        client = self._client
        caps = client.session.server_capabilities if client is not None else None
        return caps.model_dump(by_alias=True, mode="json", exclude_none=True) if caps is not None else None

    @property
    def server_info(self) -> dict[str, Any] | None:
        """The server's ``serverInfo`` (``Implementation``: ``name``, ``version``, ``title``,
        ``websiteUrl``, ``icons``) as JSON, or ``None`` when not open or not told."""
        client = self._client
        info = getattr(client.session, "server_info", None) if client is not None else None
        return info.model_dump(by_alias=True, mode="json", exclude_none=True) if info is not None else None

    @property
    def instructions(self) -> str | None:
        """The server's ``instructions`` (a hint for its users and models), or ``None``."""
        client = self._client
        text = getattr(client.session, "instructions", None) if client is not None else None
        return text if isinstance(text, str) else None

    @property
    def in_flight(self) -> int:
        """Number of requests currently awaiting their response."""
        return self._in_flight

    def idle_for(self) -> float:
        """Seconds since the last request finished (0 while a request is in flight or a page
        follows a resource: :mod:`.resource_watch`)."""
        return 0.0 if self._in_flight or self.watching_resources() else time.monotonic() - self._last_activity

    def _live_client(self) -> Client:
        """The SDK client while the owner task holds it open (a ``_broken`` one is still usable)."""
        client, owner = self._client, self._owner
        if client is None or owner is None or owner.done() or (self._stop is not None and self._stop.is_set()):
            why = f" ({self._failure})" if self._failure else ""
            raise McpCallError(TRANSPORT_ERROR, f"connection to {self.origin} is not open{why}")
        return client
