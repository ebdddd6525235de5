"""HTTP evidence and response bounds: what the HTTP layer saw, to classify the SDK's errors.

The SDK turns HTTP failures into JSON-RPC errors it synthesizes; :class:`HttpEvidence` records,
per request id, the HTTP response that answered it, and :func:`classify` maps an SDK
``MCPError`` to a stable :class:`~mrtrweb.mcp.errors.McpCallError` with that evidence.
:func:`bound_response` bounds each POST's response body by :data:`MAX_RESPONSE_BYTES`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
from typing import Any, Final

import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, PARSE_ERROR

from .errors import (AUTHORIZATION_FAILED, AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE, JSONRPC_ERROR, SESSION_LOST,
                     TRANSPORT_ERROR, McpCallError)

#: the most bytes of one HTTP response body to a request the client POSTs (a JSON body or the SSE
#: stream of one request); a larger one fails the request with ``transport_error`` ("the response is
#: larger than N bytes"). It bounds the memory of a response and the SDK's parse of it, which runs
#: on the event loop (about 60-160 ms per MB, holding the GIL): the product's own checks of a
#: listing or a result run off the loop, item by item. 8 MiB keeps that parse near half a second
#: (and a stored result is at most ``MAX_STORED_RESULT_BYTES`` anyway). It is also the SDK's limit of
#: one SSE event (:mod:`.connection`; the SDK's own default, 1 MiB, broke a larger answer as a stream).
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
#: the most bytes of a JSON body the HTTP evidence hook parses to tell a JSON-RPC error apart
_EVIDENCE_PARSE_BYTES: Final = 1024 * 1024


#: the ``WWW-Authenticate`` Bearer parameters kept from a 401/403 (RFC 6750 section 3, RFC 9728 section 5.1)
_CHALLENGE_FIELDS: Final = ("error", "error_description", "scope", "resource_metadata")
_CHALLENGE_MAX: Final = 2000


def parse_challenge(header: str | None) -> dict[str, str]:
    """The Bearer parameters of a ``WWW-Authenticate`` header: ``{"error", "error_description",
    "scope", "resource_metadata"}`` (only those present; quoted or token values; each bounded to
    2,000 characters). Anything unparseable is left out; never raises."""
    out: dict[str, str] = {}
    if not header or not isinstance(header, str):
        return out
    for name in _CHALLENGE_FIELDS:
        match = re.search(rf'(?:^|[\s,]){name}\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))', header[:16384], re.IGNORECASE)
        if match:
            value = match.group(1) if match.group(1) is not None else match.group(2)
            out[name] = re.sub(r'\\(.)', r'\1', value)[:_CHALLENGE_MAX]
    return out


@dataclasses.dataclass(frozen=True)
class AuthChallenge:
    """A ``401`` or ``403`` the MCP server answered with: ``status`` and the parsed ``WWW-Authenticate``
    Bearer parameters (``params``; see :func:`parse_challenge`); ``bearer``: whether the header named
    the Bearer scheme at all."""

    status: int
    params: dict[str, str]
    bearer: bool

    @classmethod
    def of(cls, response: httpx2.Response) -> AuthChallenge:
        header = response.headers.get("www-authenticate")
        return cls(response.status_code, parse_challenge(header), bool(header) and "bearer" in header.lower())

    def error(self, method: str) -> McpCallError | None:
        """The stable error of this challenge, or ``None`` (a 403 that is no Bearer challenge)."""
        if self.status == 401:
            return McpCallError(AUTHORIZATION_REQUIRED, f"{method}: HTTP 401: the server requires authorization",
                                http_status=401, challenge=self.params)
        if self.status == 403 and self.params.get("error") == "insufficient_scope":
            return McpCallError(INSUFFICIENT_SCOPE, f"{method}: HTTP 403: the server requires more scope",
                                http_status=403, challenge=self.params)
        if self.status == 403 and self.bearer:
            return McpCallError(AUTHORIZATION_FAILED, f"{method}: HTTP 403: the server refused the credentials",
                                http_status=403, challenge=self.params)
        return None


@dataclasses.dataclass(frozen=True)
class HttpSeen:
    """The HTTP response that carried (or failed to carry) one request's answer.

    :attr:`body` classifies a JSON body: ``"error"`` (a JSON-RPC error object), ``"other"`` (anything
    else, including unparseable bytes), ``"too_large"``, or ``None`` (not a JSON body: SSE, text,
    none). ``session``: whether the request carried an ``Mcp-Session-Id`` (a 2025-11-25 session).

    A JSON body of at most :data:`_EVIDENCE_PARSE_BYTES` is kept (``json_body``, never in the repr) and
    judged only when :attr:`body` is asked, i.e. only when the SDK raised for the request
    (:func:`classify`): the answer the SDK returns is not parsed on the loop a second time.
    """

    status: int
    content_type: str
    read: str | None  # "json" (judged on demand from ``json_body``), "other", "too_large" or None
    challenge: AuthChallenge | None = None
    session: bool = False
    json_body: bytes | None = dataclasses.field(default=None, repr=False, compare=False)

    @functools.cached_property
    def body(self) -> str | None:
        """``"error"``, ``"other"``, ``"too_large"`` or ``None`` (see the class doc); judged once."""
        if self.read != "json":
            return self.read
        with contextlib.suppress(Exception):
            parsed = json.loads(self.json_body or b"")
            if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) and "result" not in parsed:
                return "error"
        return "other"


def id_key(request_id: str | int) -> tuple[str, str | int]:
    return (type(request_id).__name__, request_id)


class HttpEvidence:
    """An httpx2 response hook recording, per expected request id, the HTTP response that answered it.

    The SDK turns HTTP and body-level failures into JSON-RPC errors it synthesizes
    (``MCPError``), indistinguishable by code from errors a server sends (``-32000`` is both the
    SDK's "connection closed" and a common server error code). This hook supplies the missing
    evidence: whether an HTTP response arrived for the request, its status, and, for a JSON body,
    whether that body really is a JSON-RPC error. (The body is read here once; httpx2 caches it
    and the SDK's own ``aread()`` gets the same bytes.)
    """

    def __init__(self) -> None:
        self._expected: dict[tuple[str, str | int], HttpSeen | None] = {}
        #: the latest 401/403 of any request (the SDK's own negotiation requests included)
        self.last_challenge: AuthChallenge | None = None
        #: the latest response's status and content type (any request): why a connect failed
        #: (:func:`mrtrweb.mcp.reachability.reason_of`)
        self.last_status: int | None = None
        self.last_content_type: str = ""

    def expecting(self, request_id: str | int) -> bool:
        return id_key(request_id) in self._expected

    def expect(self, request_id: str | int) -> None:
        self._expected[id_key(request_id)] = None

    def take(self, request_id: str | int) -> HttpSeen | None:
        return self._expected.pop(id_key(request_id), None)

    async def on_response(self, response: httpx2.Response) -> None:
        content_type = response.headers.get("content-type", "").lower()
        self.last_status = response.status_code
        self.last_content_type = content_type.split(";", 1)[0].strip()[:100]
        challenge = AuthChallenge.of(response) if response.status_code in (401, 403) else None
        if challenge is not None:
            self.last_challenge = challenge
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
        key = id_key(request_id)
        if key not in self._expected:
            return
        read: str | None = None
        content: bytes | None = None
        if content_type.startswith("application/json"):
            read = "other"
            try:
                await response.aread()
            except ResponseTooLarge:
                read = "too_large"
            except Exception:  # noqa: BLE001 - the SDK reports an unreadable body itself
                pass
            else:
                # a JSON-RPC error is small: a body of megabytes (a result) is never judged (HttpSeen.body)
                if len(response.content) <= _EVIDENCE_PARSE_BYTES:
                    read, content = "json", response.content
        session = bool(response.request.headers.get("mcp-session-id"))
        self._expected[key] = HttpSeen(response.status_code, content_type, read, challenge, session, content)


class ResponseTooLarge(httpx2.StreamError):
    """A response body went past :data:`MAX_RESPONSE_BYTES` (reading it stopped there)."""


class BoundedStream(httpx2.AsyncByteStream):
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


async def bound_response(response: httpx2.Response) -> None:
    """httpx2 response hook (the first): the body of each POST's response is bounded by
    :data:`MAX_RESPONSE_BYTES` (:class:`BoundedStream`), before anything reads it.

    Only POSTs: a request's answer (a JSON body, or the SSE stream of that one request). The
    long-lived GET stream of server notifications is left as the SDK reads it."""
    if response.request.method == "POST":
        response.stream = BoundedStream(response.stream, MAX_RESPONSE_BYTES)


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


def classify(exc: MCPError, seen: HttpSeen | None, method: str) -> McpCallError:
    """Map an SDK ``MCPError`` for one request to our stable codes, using the HTTP evidence.

    A ``401`` is ``authorization_required``, a ``403`` with ``error="insufficient_scope"`` is
    ``insufficient_scope``, another Bearer ``403`` is ``authorization_failed`` (MCP authorization,
    "Error handling" and "Scope challenge handling"), whatever body came with them; never
    ``transport_error``. A ``404`` to a request that carried an ``Mcp-Session-Id`` is
    ``session_lost`` (2025-11-25 transports, "Session Management": the server answers so to a
    session it terminated or does not know, e.g. after a restart), whatever body came with it."""
    error = exc.error
    if seen is not None and seen.challenge is not None:
        auth_error = seen.challenge.error(method)
        if auth_error is not None:
            return auth_error
    if seen is not None and seen.status == 404 and seen.session:
        return McpCallError(SESSION_LOST, f"{method}: HTTP 404: the server does not know this session "
                            "(it was restarted or ended the session)", http_status=404)
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
    return McpCallError(  # the server accepted the request: it may have run (``reached``)
        TRANSPORT_ERROR,
        f"{method}: unusable HTTP {seen.status} response ({seen.content_type or 'no content type'}): {error.message}",
        reached=True,
    )

