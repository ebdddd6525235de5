"""The stable error model of the MCP client: :class:`McpCallError` and its codes, and :func:`origin_of`.

Every failure of :mod:`mrtrweb.mcp` surfaces as :class:`McpCallError` with a ``code``:

``transport_error``
    connect/HTTP/network failure, unusable response body, closed connection.
``jsonrpc_error``
    the server answered with a JSON-RPC error (``rpc_code``/``rpc_message``/``rpc_data`` keep it).
``timeout``
    no answer in time.
``invalid_result``
    only from the listings: the listing did not parse.
``session_lost``
    a 2025-11-25 server answered HTTP 404 to a request carrying the connection's ``Mcp-Session-Id``:
    it no longer knows the session (restarted, or ended it). The connection opens a new session
    before its next request (:mod:`.session_renewal`); a listing is listed again once on it, any
    other request is not sent again.
``invalid_x_mcp_header``
    a ``tools/call`` of a tool whose listed ``inputSchema`` has an invalid ``x-mcp-header``
    (SEP-2243; :mod:`.param_headers`); nothing was sent.
``authorization_required`` / ``insufficient_scope`` / ``authorization_failed``
    the server answered ``401`` (no usable credentials for this person and server), ``403`` with
    ``error="insufficient_scope"`` (MCP authorization, "Scope challenge handling"), or the
    authorization server refused (its error text, cleaned, in ``message``).
"""

from __future__ import annotations

import functools
import urllib.parse
from typing import Any, Final

import httpx2

__all__ = ["AUTHORIZATION_FAILED", "AUTHORIZATION_REQUIRED", "INSUFFICIENT_SCOPE", "INVALID_RESULT",
           "JSONRPC_ERROR", "SESSION_LOST", "TIMEOUT", "TRANSPORT_ERROR", "McpCallError", "ascii_host", "origin_of"]

TRANSPORT_ERROR: Final = "transport_error"
JSONRPC_ERROR: Final = "jsonrpc_error"
TIMEOUT: Final = "timeout"
INVALID_RESULT: Final = "invalid_result"
AUTHORIZATION_REQUIRED: Final = "authorization_required"
INSUFFICIENT_SCOPE: Final = "insufficient_scope"
AUTHORIZATION_FAILED: Final = "authorization_failed"
SESSION_LOST: Final = "session_lost"


class McpCallError(Exception):
    """A call (or connect) failed. ``code`` is one of the stable codes below; ``message`` is for logs.

    Attributes:
        code: ``transport_error``, ``jsonrpc_error``, ``timeout``, ``invalid_result``,
            ``authorization_required``, ``insufficient_scope``, ``authorization_failed`` or
            ``session_lost``.
        message: human-readable detail (may contain server text: escape before display).
        rpc_code: the JSON-RPC error code (``jsonrpc_error`` only).
        rpc_message: the JSON-RPC error message (``jsonrpc_error`` only).
        rpc_data: the JSON-RPC error ``data`` member, if any (``jsonrpc_error`` only).
        http_status: the HTTP status of the response, when one was seen and it was not 2xx.
        reached: ``transport_error`` only: the server had accepted the request (a 2xx response)
            when its answer broke off or came unusable -- it may have run.
        reason: a connect that failed: why, one of :data:`mrtrweb.mcp.reachability.REASONS`
            (``refused``, ``dns``, ``tls``, ``timeout``, ``http_status``, ``not_mcp``, ``unreachable``), else None.
        challenge: for ``authorization_required`` / ``insufficient_scope`` / ``authorization_failed``
            from the MCP server: the ``WWW-Authenticate`` Bearer parameters it sent
            (``{"error": ..., "scope": ..., "resource_metadata": ..., "error_description": ...}``,
            only those present, each at most 2,000 characters), else ``{}``.
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
        challenge: dict[str, str] | None = None,
        reached: bool = False,
        reason: str | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.rpc_code = rpc_code
        self.rpc_message = rpc_message
        self.rpc_data = rpc_data
        self.http_status = http_status
        self.challenge = dict(challenge or {})
        self.reached = reached
        self.reason = reason

    @property
    def scope(self) -> str | None:
        """The scope the server challenged with (``WWW-Authenticate`` ``scope``), if any."""
        return self.challenge.get("scope")


def ascii_host(host: str) -> str:
    """``host`` (a name or IP literal, lower case) as httpx2 sends it: an internationalized name in
    its IDNA form (``bücher.example`` -> ``xn--bcher-kva.example``), so that an origin compared with
    a request's is one spelling; ``host`` itself when it is ASCII or has no IDNA form."""
    if host.isascii():
        return host
    try:
        return httpx2.URL(f"http://{host}/").raw_host.decode("ascii")
    except (httpx2.InvalidURL, UnicodeError, ValueError):
        return host


def origin_of(url: str) -> str:
    """``scheme://host:port`` of an http(s) URL: lowercase scheme and host (an internationalized
    name in its IDNA form, as a request sends it: :func:`ascii_host`), default port explicit.

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
    if len(url) <= _REMEMBERED_URL_CHARS:  # a round asks again and again for the same few URLs
        return _origin_remembered(url)
    return _origin(url)


#: the longest URL whose origin :func:`origin_of` remembers (:data:`_REMEMBERED_URLS` of them)
_REMEMBERED_URL_CHARS = 2048
_REMEMBERED_URLS = 1024


def _origin(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"unparseable URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError("URL scheme must be http or https")
    host = ascii_host((parts.hostname or "").lower())
    if not host:
        raise ValueError("URL has no host")
    if port is None:
        port = 443 if scheme == "https" else 80
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


#: :func:`_origin` remembered per URL (a pure function of the text; a refused URL is not remembered:
#: it raises again each time)
_origin_remembered = functools.lru_cache(maxsize=_REMEMBERED_URLS)(_origin)

