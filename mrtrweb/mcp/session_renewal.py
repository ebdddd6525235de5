"""A 2025-11-25 session the server lost: a new session, once per loss (a mixin of
:class:`~mrtrweb.mcp.connection.McpConnection`; it uses the connection's ``origin``, ``timeout_s``,
``protocol_version``, ``_broken``, ``_start``, ``_stop_owner`` and ``_send``).

The rule (MCP 2025-11-25, Transports, "Session Management"): a server that terminated a session --
or restarted and lost it -- MUST answer HTTP 404 to requests carrying its ``Mcp-Session-Id``; a
client receiving that 404 MUST start a new session with a new ``InitializeRequest`` without a
session id. :func:`~.evidence.classify` names that 404 ``session_lost``. Then:

* The session is marked lost (by its generation, :attr:`session_generation`). The **next request**
  on the connection first opens a new session (:meth:`_renew_if_lost`: the SDK client is closed
  and a new one negotiates -- one ``initialize``), so the connection the pool hands out stays
  valid and nothing waits for the pool's idle rule. Requests failing together on one lost session
  open one new session; a request failing on the new session marks that one lost (its own
  failure) and is not retried: once per failure, never a loop.
* A listing (``tools/list``, ...) only reads: it is listed again once, from its first page, on the
  new session (:meth:`~.listing.Listings._listing`).
* Any other request (``tools/call``, ``prompts/get``, ``resources/read``, ``tasks/*``, a request
  sent again after a URL-mode round) is **not sent again**: the caller gets ``session_lost``. By
  the spec a 404 for the session means the server did not process the request, but the client
  cannot verify that (a gateway, a server answering 404 after acting), and what a call means may
  depend on what the lost session held; so the person decides, told that it may or may not have
  run (:mod:`mrtrweb.operations.messages`).
* A request whose response stream broke before its response came (the server went away with the
  request in flight) is followed by one ``ping`` on the same session (:meth:`_probe_session`): a
  404 to it means the server came back without the session, and the request fails with
  ``session_lost`` (it may or may not have run); otherwise it stays ``transport_error`` and the
  connection is broken (the pool replaces it).
* A request that got no HTTP response at all (a keep-alive connection the restarted server had
  closed: the SDK's sender dies with it) stays ``transport_error`` -- nothing says whether it was
  read -- and the session is marked lost as well: the next request opens a new one, and a listing
  is listed again once on it (as for a 404). A server that does not answer at all then costs a
  listing two connection attempts (each within the connection's timeout), never more.
* A 404 on the SDK's standalone GET stream renews nothing (a server answering 404 to every GET
  would turn that into a loop); the next request finds out.

2026-07-28 connections have no session: none of this applies to them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Final

from .errors import SESSION_LOST, McpCallError
from .evidence import HttpSeen
from .param_headers import is_modern

__all__ = ["PROBE_TIMEOUT_S", "SessionRenewal", "session_lost_in_flight"]

logger = logging.getLogger("mrtrweb.mcp")

#: seconds the ``ping`` after a broken response stream may take (at most the connection's timeout)
PROBE_TIMEOUT_S: Final = 5.0


def session_lost_in_flight(method: str) -> McpCallError:
    """The error of a request whose response stream broke while its session was found lost."""
    return McpCallError(SESSION_LOST, f"{method}: the response stream broke before the response, and the session "
                                      "was found lost (the server was restarted)", http_status=404)


class SessionRenewal:
    """The session-renewal half of a connection (see the module doc)."""

    origin: str
    timeout_s: float
    protocol_version: str | None
    _broken: bool

    def _init_renewal(self) -> None:
        self.session_generation = 0  # +1 each time a lost session is replaced
        self._lost_generation = -1
        self._renewing = asyncio.Lock()
        self._closing = False

    @property
    def _session_is_lost(self) -> bool:
        return self._lost_generation >= self.session_generation

    def _note_lost(self, generation: int) -> None:
        """The server answered 404 to a request sent on session ``generation``."""
        self._lost_generation = max(self._lost_generation, generation)

    @property
    def _renewal_pending(self) -> bool:
        """A lost session waits for, or is in, its renewal (the connection still counts as open)."""
        return not self._closing and (self._session_is_lost or self._renewing.locked())

    async def _renew_if_lost(self) -> None:
        """Open a new session if the current one is lost (once per loss; concurrent callers wait for
        the one renewal). Raises as :meth:`McpConnection.open` when the new session cannot be
        opened (the connection is then broken: the pool replaces it)."""
        if not self._renewal_pending:
            return
        async with self._renewing:
            if not self._session_is_lost or self._closing:
                return
            logger.info("the session with MCP server %s is lost (HTTP 404 to it, or its connection broke without "
                        "a response): opening a new session", self.origin)
            await self._stop_owner()  # type: ignore[attr-defined]
            self.session_generation += 1
            try:
                await self._start()  # type: ignore[attr-defined]
            except BaseException:
                self._broken = True
                raise

    @property
    def _session_based(self) -> bool:
        """Whether the connection speaks a protocol with sessions (2025-11-25 and older)."""
        version = self.protocol_version
        return version is not None and not is_modern(version)

    async def _session_failure(self, error: McpCallError, seen: HttpSeen | None, generation: int, method: str, *,
                               probe: bool) -> McpCallError:
        """What a ``session_lost`` or ``transport_error`` of a request sent on session ``generation``
        leaves: the error to raise, and the session marked lost (a new one at the next request) or
        the connection broken (the pool replaces it). See the module doc."""
        if error.code == SESSION_LOST:
            self._note_lost(generation)
        elif self._lost_generation >= generation or generation < self.session_generation:
            # its session was found lost while it was out (another request's 404), and closed
            error = session_lost_in_flight(method)
        elif probe and seen is not None and await self._probe_session(generation):
            error = session_lost_in_flight(method)
        elif probe and seen is None and self._session_based and generation == self.session_generation:
            # no HTTP response at all: the SDK's sender died with the request (a stale keep-alive
            # connection to a server that restarted): its session cannot go on; a new one next
            self._note_lost(generation)
        else:
            self._broken = True
        return error

    async def _probe_session(self, generation: int) -> bool:
        """Whether session ``generation`` is lost: already known, or one ``ping`` on it answered 404
        (after a request's response stream broke; see the module doc). Never raises McpCallError."""
        if self._lost_generation >= generation:
            return True
        if generation != self.session_generation or not self._session_based:
            return False
        try:
            await self._send("ping", {}, f"mrtrweb-session-probe-{uuid.uuid4()}",  # type: ignore[attr-defined]
                             timeout_s=min(PROBE_TIMEOUT_S, self.timeout_s), renew=False, probe=False)
        except McpCallError:
            pass
        return self._lost_generation >= generation

    async def _close_renewal(self) -> None:
        """No renewal after this (``close``); waits for one in progress, whose new session close ends."""
        self._closing = True
        async with self._renewing:
            pass

