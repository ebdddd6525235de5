"""The product's MCP client: Streamable HTTP through the ``mcp`` SDK (``mcp==2.3.*``).

One concern per module:

``errors``
    :class:`McpCallError` and its stable codes, :func:`origin_of`.
``connection``
    :class:`McpConnection`: one negotiated connection; requests under the product's own ids, raw
    results back (the MRTR gate judges exactly what the server put on the wire).
``session_renewal``
    a 2025-11-25 session the server lost (HTTP 404): a new session, once per loss.
``pool``
    :class:`ConnectionPool`: one connection per ``(user, server)`` on one event loop.
``evidence``
    what the HTTP layer saw of each request (tells a server's JSON-RPC error from one the SDK made
    up), and the response size bound.
``listing``
    listing pages checked item by item, off the event loop (the connection's ``list_*``).
``param_headers``
    ``Mcp-Param-*`` headers mirrored from ``x-mcp-header`` tool arguments (SEP-2243), per connection.
``server_requests``
    requests a 2025-11-25 server sends during an open call, routed to that call's handler.
``protocol``
    the protocol setting per server (automatic or one version pinned) and its check.
``server_log``
    a server's ``notifications/message`` to the call it came with; the log level asked (``_meta`` at
    2026-07-28, ``logging/setLevel`` at 2025-11-25).
``list_changed``
    a server's ``notifications/*/list_changed`` (and 2026-07-28 ``subscriptions/listen``) to a callback.
``resource_watch``
    the resources pages follow: ``resources/subscribe`` (2025-11-25) or ``subscriptions/listen``
    (2026-07-28), ``notifications/resources/updated`` to the watching pages' listeners.
``outbound``
    the one outbound guard for every URL fetched for authorization.
``url_policy``
    the deployer's URL policy of servers people add (issue 29): checked on save and at every
    connection, the connection pinned to the checked address.
``auth``
    OAuth 2.1 to MCP servers, split in two phases for a web app, and the other auth modes.
``tls``
    the process's one TLS client context.
"""

from .connection import CLIENT_INFO, DECLARABLE, McpConnection, ProgressCallback, ServerRequestHandler
from .errors import (AUTHORIZATION_FAILED, AUTHORIZATION_REQUIRED, INSUFFICIENT_SCOPE, INVALID_RESULT, JSONRPC_ERROR,
                     SESSION_LOST, TIMEOUT, TRANSPORT_ERROR, McpCallError, origin_of)
from .evidence import MAX_RESPONSE_BYTES, ResponseTooLarge
from .listing import MAX_LISTED_ITEMS
from .param_headers import INVALID_X_MCP_HEADER, InvalidToolHeaders
from .pool import ConnectionPool
from .tls import tls_client_context

__all__ = [
    "AUTHORIZATION_FAILED", "AUTHORIZATION_REQUIRED", "CLIENT_INFO", "DECLARABLE", "INSUFFICIENT_SCOPE",
    "INVALID_RESULT", "INVALID_X_MCP_HEADER", "JSONRPC_ERROR", "MAX_LISTED_ITEMS", "MAX_RESPONSE_BYTES", "SESSION_LOST",
    "TIMEOUT", "TRANSPORT_ERROR", "ConnectionPool", "InvalidToolHeaders", "McpCallError", "McpConnection",
    "ProgressCallback", "ResponseTooLarge", "ServerRequestHandler", "origin_of", "tls_client_context",
]
