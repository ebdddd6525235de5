"""Keeping secrets out of the logs of the libraries mrtrweb drives.

The MCP SDK's Streamable HTTP client logs every JSON-RPC message it reads from an SSE stream at
DEBUG (``"SSE message: ..."``: results with their ``requestState``, the server's input requests)
and the MCP session id at INFO. The HTTP client under it (``httpx2``) logs every request URL at
INFO -- an authorization request's ``state``, a followed redirect's ``code`` -- and its transport
(``httpcore2``) every header at DEBUG (``Authorization: Bearer ...``, ``Location`` with the code).
A project that turns its root logger to DEBUG would then write ``requestState``, answers, tokens
and authorization codes to its logs. :func:`hold_sdk_wire_loggers` (called once from the app's
``ready()``) sets those loggers to WARNING unless the project gave them a level of its own (a
deliberate choice, e.g. while debugging a server on a laptop; it is logged as a warning).
"""

from __future__ import annotations

import logging

#: the SDK and HTTP client loggers that print message contents, session ids, URLs with OAuth
#: parameters or headers with tokens below WARNING
SDK_WIRE_LOGGERS = ("mcp.client.streamable_http", "mcp.client.sse", "httpx2", "httpcore2", "httpx", "httpcore")

logger = logging.getLogger("mrtrweb.logsafe")


def hold_sdk_wire_loggers() -> None:
    """Set each of :data:`SDK_WIRE_LOGGERS` to WARNING when the project left its level unset."""
    for name in SDK_WIRE_LOGGERS:
        wire = logging.getLogger(name)
        if wire.level == logging.NOTSET:
            wire.setLevel(logging.WARNING)
        elif wire.level < logging.WARNING:
            logger.warning("logger %s is set below WARNING by the project: it logs MCP messages "
                           "(requestState, answers), session ids, URLs with OAuth state or codes, or "
                           "headers with tokens", name)
