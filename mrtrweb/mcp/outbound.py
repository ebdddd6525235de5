"""The one outbound guard: every URL fetched for OAuth discovery, registration, tokens and
revocation goes through it (MCP authorization, "Security Considerations"; the URLs are chosen by
the MCP server, i.e. by an attacker).

Rules (:func:`check_url`, enforced again per request by :class:`GuardedTransport`):

* ``https`` only; plain ``http`` only to a loopback address and only when
  ``OutboundPolicy.allow_http_loopback`` (development and tests);
* no userinfo; the host must resolve, and **every** address it resolves to must be public: no
  private (RFC 1918, ULA), loopback, link-local (cloud metadata ``169.254.169.254``), multicast,
  reserved or unspecified address, unless the host is in ``OutboundPolicy.allow_hosts``
  (an admin's allow-list), or it is loopback with ``allow_http_loopback``;
* bounded: ``timeout_s`` per request, ``max_bytes`` per response body;
* no redirects followed to another host (the SDK's ``RedirectAwareAuth`` follows same-origin
  redirects only; the guard refuses the rest).

Requests to the MCP server's own configured endpoint origin (``mcp_origin``: chosen by a tenant
admin, not by the server) are not checked by the address rules.

Errors: :class:`OutboundRefused` (``reason``: a short stable text, no secret) -- callers map it to
``authorization_failed``.
"""

from __future__ import annotations

import dataclasses

__all__ = ["OutboundPolicy", "OutboundRefused", "check_url", "guarded_client"]


class OutboundRefused(Exception):
    """The guard refused a URL or a response; ``reason`` says why (safe to log and show)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class OutboundPolicy:
    """What the guard allows. ``from_settings()`` reads ``MRTRWEB["OUTBOUND_*"]`` (in the Django layer)."""

    allow_http_loopback: bool = False
    allow_hosts: frozenset[str] = frozenset()
    timeout_s: float = 10.0
    max_bytes: int = 1024 * 1024


def check_url(url: str, policy: OutboundPolicy) -> None:
    """Raise :class:`OutboundRefused` unless ``url`` may be fetched (resolves the host)."""
    raise NotImplementedError


def guarded_client(policy: OutboundPolicy, *, mcp_origin: str | None = None, **kwargs):
    """An ``httpx2.AsyncClient`` whose transport applies the guard to every request (see module doc)."""
    raise NotImplementedError
