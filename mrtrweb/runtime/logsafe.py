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

The ASGI server's access log is the other place: the authorization server sends the person's
browser back to ``oauth/callback/?code=...&state=...``, and uvicorn logs every request line
(logger ``uvicorn.access``). :class:`RedactOAuthQuery`, installed on that logger by the same call,
replaces the values of ``code``, ``state`` (and the other OAuth parameters below) in the logged
path with ``[redacted]``. Another ASGI server's access log (daphne's ``--access-log``, gunicorn's)
is outside Python logging: turn it off or filter it there (docs/deploy/authorization.md, "Logs").

What the SDK still logs at WARNING and above carries server text: ``"Unknown SSE event: <name>"``,
``"Unexpected content type: <value>"``, and ``logger.exception(...)`` on a message that fails
validation, whose traceback holds pydantic's ``input_value=...`` -- the server's bytes, which may
be a ``requestState``, an answer echoed back or a token a server leaks. :class:`ShieldSdkRecords`,
installed by the same call on every logger of the SDK's client (``mcp.client*``, ``mcp.shared*``), keeps such a line but makes it safe: the
traceback is replaced by the exception's type name, the message is cut to
:data:`MAX_SDK_MESSAGE_CHARS` characters with control characters (line breaks, ANSI escapes,
bidi controls) shown as ``\\uXXXX``, so a server can neither forge log lines nor fill them.
"""

from __future__ import annotations

import logging
import re
from typing import Any

#: the SDK and HTTP client loggers that print message contents, session ids, URLs with OAuth
#: parameters or headers with tokens below WARNING
SDK_WIRE_LOGGERS = ("mcp.client.streamable_http", "mcp.client.sse", "httpx2", "httpcore2", "httpx", "httpcore")

logger = logging.getLogger("mrtrweb.logsafe")

#: query parameters whose values never reach an access log line: an authorization response's
#: ``code`` and ``state`` (RFC 6749 section 4.1.2), a token or assertion some server may put there
REDACTED_PARAMS = ("code", "state", "access_token", "refresh_token", "id_token", "token", "client_secret",
                   "code_verifier", "assertion")
# a parameter in a query, or in a query carried percent-encoded inside another one (a ``next=``)
_PARAM = re.compile(r"(?i)((?:[?&;]|%3F|%26|%3B)(?:" + "|".join(REDACTED_PARAMS) + r")(?:=|%3D))"
                    r"(?:(?!%26|%3B)[^&;#\s])*")
#: the access loggers :class:`RedactOAuthQuery` is installed on
ACCESS_LOGGERS = ("uvicorn.access",)


def redact_query(text: str) -> str:
    """``text`` with the value of every :data:`REDACTED_PARAMS` query parameter replaced.

    >>> redact_query("/mcp/oauth/callback/?code=abc&state=xyz&iss=https%3A%2F%2Fas")
    '/mcp/oauth/callback/?code=[redacted]&state=[redacted]&iss=https%3A%2F%2Fas'
    """
    return _PARAM.sub(r"\1[redacted]", text) if "=" in text else text


class RedactOAuthQuery(logging.Filter):
    """A filter for access loggers: every string argument (uvicorn's is ``(client, method,
    path_with_query, http_version, status)``) and the message have OAuth parameters redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        args: Any = record.args
        if isinstance(args, tuple):
            record.args = tuple(redact_query(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict):
            record.args = {k: redact_query(v) if isinstance(v, str) else v for k, v in args.items()}
        if isinstance(record.msg, str):
            record.msg = redact_query(record.msg)
        return True


#: the longest message kept of an SDK log record (characters, after control characters are shown)
MAX_SDK_MESSAGE_CHARS = 240

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def _shown(text: str) -> str:
    """``text`` with every control, bidi or zero-width character as ``\\uXXXX``."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


#: the SDK's client-side loggers (the client and the dispatcher under it; not its server's)
SDK_CLIENT_PREFIXES = ("mcp.client", "mcp.shared")


class ShieldSdkRecords(logging.Filter):
    """A filter for the SDK's loggers (see the module doc): the record's formatted message, its
    control characters shown and cut at :data:`MAX_SDK_MESSAGE_CHARS`, with ``(<ExceptionType>)``
    in place of a traceback. Never drops a record; a record it cannot format keeps only its
    logger's name and level."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 -- a malformed record: nothing of it is trusted
            text = "(a log record that could not be formatted)"
        exc = record.exc_info
        kind = ""
        if exc and exc[0] is not None:
            kind = f" ({exc[0].__name__}; details withheld: they may hold the server's data)"
        text = _shown(text)
        if len(text) > MAX_SDK_MESSAGE_CHARS:
            text = text[:MAX_SDK_MESSAGE_CHARS] + f"... [{len(text) - MAX_SDK_MESSAGE_CHARS} more characters]"
        record.msg, record.args = text + kind, ()
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def shield_sdk_loggers() -> None:
    """Install :class:`ShieldSdkRecords` (once) on the ``mcp`` logger and every logger under
    :data:`SDK_CLIENT_PREFIXES` known now (a logger's filters apply to the records created at it, not its children's: each
    one gets its own). The SDK's modules are imported by then (:mod:`mrtrweb.mcp` imports them)."""
    names = {"mcp", *(n for n in list(logging.Logger.manager.loggerDict) if n.startswith(SDK_CLIENT_PREFIXES))}
    for name in sorted(names):
        target = logging.getLogger(name)
        if not any(isinstance(f, ShieldSdkRecords) for f in target.filters):
            target.addFilter(ShieldSdkRecords())


def hold_sdk_wire_loggers() -> None:
    """Set each of :data:`SDK_WIRE_LOGGERS` to WARNING when the project left its level unset,
    install :class:`RedactOAuthQuery` on each of :data:`ACCESS_LOGGERS` and
    :class:`ShieldSdkRecords` on the SDK's loggers (:func:`shield_sdk_loggers`; once)."""
    shield_sdk_loggers()
    for name in ACCESS_LOGGERS:
        access = logging.getLogger(name)
        if not any(isinstance(f, RedactOAuthQuery) for f in access.filters):
            access.addFilter(RedactOAuthQuery())
    for name in SDK_WIRE_LOGGERS:
        wire = logging.getLogger(name)
        if wire.level == logging.NOTSET:
            wire.setLevel(logging.WARNING)
        elif wire.level < logging.WARNING:
            logger.warning("logger %s is set below WARNING by the project: it logs MCP messages "
                           "(requestState, answers), session ids, URLs with OAuth state or codes, or "
                           "headers with tokens", name)
