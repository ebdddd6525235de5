"""Why a server could not be reached, in stable words (issue 28, item 6): the server page says
"connection refused", "the name does not resolve", "TLS failed", "timed out", "HTTP 404 at this
path", "not an MCP endpoint", never only "could not be reached".

:func:`reason_of` classifies the exception that ended a connect (the leaf of the SDK's exception
groups) with what the HTTP layer saw last (:class:`mrtrweb.mcp.evidence.HttpEvidence`):

* ``refused`` -- nothing listens on that host and port (``ConnectionRefusedError``);
* ``dns`` -- the host name does not resolve (``socket.gaierror``);
* ``tls`` -- the TLS handshake or the certificate failed (``ssl.SSLError``);
* ``timeout`` -- no answer in time (a connect or read timeout);
* ``http_status`` -- an HTTP error status answered at the URL (the status is returned too: a
  404 usually means a wrong path);
* ``not_mcp`` -- a 2xx answer that is neither JSON nor an event stream (a web page, say);
* ``policy`` -- the deployer's URL policy refused the endpoint at connect time (a server added
  under it whose name now resolves to an address the policy does not allow; nothing was sent);
* ``unreachable`` -- anything else.

No Django here; the words a person reads are the views' (:mod:`mrtrweb.views.servers`).
"""

from __future__ import annotations

import socket
import ssl

from mcp.shared.exceptions import MCPError

REASONS = ("refused", "dns", "tls", "timeout", "http_status", "not_mcp", "policy", "unreachable")


def _chain(exc: BaseException, limit: int = 12) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < limit and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def reason_of(exc: BaseException, last_status: int | None = None,
              last_content_type: str = "") -> tuple[str, int | None]:
    """``(reason, http_status)`` of a failed connect (see the module docstring); ``http_status``
    only for ``http_status``."""
    if isinstance(exc, MCPError):
        if "content type" in (exc.error.message or "").lower():
            return "not_mcp", None
        if last_status is not None and last_status >= 400:
            return "http_status", last_status
        return "unreachable", None
    for link in _chain(exc):
        if isinstance(link, ConnectionRefusedError):
            return "refused", None
        if isinstance(link, socket.gaierror):
            return "dns", None
        if isinstance(link, ssl.SSLError):
            return "tls", None
        if isinstance(link, TimeoutError) or "timeout" in type(link).__name__.lower():
            return "timeout", None
    names = " ".join(type(link).__name__ for link in _chain(exc))
    text = " ".join(str(link) for link in _chain(exc)).lower()
    if "connecterror" in names.lower() and ("refused" in text or "errno 111" in text):
        return "refused", None
    if "name or service not known" in text or "nodename nor servname" in text or "temporary failure in name" in text:
        return "dns", None
    if "certificate" in text or "ssl" in text:
        return "tls", None
    if last_status is not None and last_status >= 400:
        return "http_status", last_status
    return "unreachable", None
