"""The deployer's URL policy of MCP endpoints tenant admins and people add (issue 29), framework-free.

A server added from the product's pages (``McpServer.url_policy``) may only point where
:class:`UrlPolicy` allows, judged when it is saved and again at **every connection**, and the
connection then goes to the address that was checked (:class:`~mrtrweb.mcp.outbound.GuardedTransport`
with ``mcp_policy``): a name re-pointed to a private address after the check reaches nothing.

Rules of :meth:`UrlPolicy.resolve` (each refusal a :class:`UrlRefused` with a stable ``code``):

``too_long``   the URL has more than ``max_url_chars`` characters (checked first, before parsing);
``url``        not a usable absolute URL (no host, a bad port, spaces or control characters);
``scheme``     a scheme other than ``https`` / ``http``;
``userinfo``   ``user:password@`` in the URL;
``http``       plain ``http`` to a host not in ``allow_http_hosts``;
``dns``        the host name does not resolve (in time), or to no IP address;
``address``    an address it resolves to (every one is judged) is not public -- private (RFC 1918,
               ULA), loopback, link-local, shared, multicast, reserved, unspecified, judged by the
               IPv4 address carried in IPv4-mapped, NAT64 and 6to4 forms
               (:func:`~mrtrweb.mcp.outbound.is_public_address`, the outbound guard's own rule) --
               and not inside ``allow_networks``, and the host is not in ``allow_hosts``.

``allow_hosts`` / ``allow_http_hosts`` entries are lower-case host names or IP literals; an entry
starting with ``.`` (``.corp.example``) stands for every name under that domain (not the domain
itself). The scheme and http rules hold for allowed hosts too.

Resolution goes through :func:`mrtrweb.mcp.outbound.resolve_host` (the one resolver seam).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Final

from . import outbound
from .outbound import OutboundRefused
from .texts import gettext_noop

__all__ = ["CODES", "DEFAULT_MAX_URL_CHARS", "REFUSED_AT_CONNECT", "UrlPolicy", "UrlRefused", "parse_policy",
           "refusal_in"]

#: the stable codes of :class:`UrlRefused`
CODES: Final = ("too_long", "url", "scheme", "userinfo", "http", "dns", "address")
#: what a person reads when a connection was refused by the policy (``McpCallError.shown_message``;
#: stored in English, a page translates it: mrtrweb.text.stored_text)
REFUSED_AT_CONNECT: Final = gettext_noop(
    "This deployment's URL policy does not allow the address this server's name points to now: nothing was "
    "sent to it.")
#: the default bound of a URL's length, characters
DEFAULT_MAX_URL_CHARS: Final = 500

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class UrlRefused(OutboundRefused):
    """The URL policy refused a URL. ``code``: one of :data:`CODES`; ``reason``: an English
    sentence saying why (no secret; safe to log; the pages translate by ``code``); ``detail``: what
    the sentence names (``{"max": int}``, ``{"scheme": str}``, ``{"host": str}``, ``{"host": str,
    "address": str}``; no secret -- userinfo is never kept)."""

    def __init__(self, code: str, reason: str, **detail: Any) -> None:
        super().__init__(reason)
        self.code = code
        self.detail = detail


def _host_in(host: str, entries: frozenset[str]) -> bool:
    if host in entries:
        return True
    return any(e.startswith(".") and host.endswith(e) and len(host) > len(e) for e in entries)


@dataclasses.dataclass(frozen=True)
class UrlPolicy:
    """Where added MCP servers may point (see the module doc).

    Attributes:
        allow_hosts: names / IP literals exempt from the address rule (``.domain`` for names under it).
        allow_networks: networks whose addresses pass the address rule (``10.0.0.0/8``, ``fd00::/8``).
        allow_http_hosts: names / IP literals to which plain ``http`` is allowed (their addresses are
            still judged: allow them by host or network too when they are private).
        max_url_chars: the longest URL accepted, characters.
        timeout_s: seconds one name resolution may take.
    """

    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[_Network, ...] = ()
    allow_http_hosts: frozenset[str] = frozenset()
    max_url_chars: int = DEFAULT_MAX_URL_CHARS
    timeout_s: float = 10.0

    def split(self, url: Any) -> tuple[str, str, int]:
        """``(scheme, host, port)`` of ``url`` after the rules that need no resolution.

        Raises:
            UrlRefused: ``too_long``, ``url``, ``scheme``, ``userinfo`` or ``http``.
        """
        if not isinstance(url, str) or not url.strip():
            raise UrlRefused("url", "not a usable URL")
        if len(url) > self.max_url_chars:
            raise UrlRefused("too_long", f"the URL is longer than {self.max_url_chars} characters",
                             max=self.max_url_chars)
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
            raise UrlRefused("url", "the URL holds spaces or control characters")
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError:
            raise UrlRefused("url", "not a usable URL (a bad host or port)") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise UrlRefused("scheme", f"the scheme {scheme[:20] or '(none)'}: is not allowed (https only)",
                             scheme=scheme[:20])
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            raise UrlRefused("userinfo", "URLs with user information (user:password@) are not allowed")
        host = (parts.hostname or "").lower().rstrip(".")
        if not host:
            raise UrlRefused("url", "the URL has no host")
        if scheme == "http" and not _host_in(host, self.allow_http_hosts):
            raise UrlRefused("http", f"plain http is not allowed to {host} (https only)", host=host)
        return scheme, host, port if port is not None else (443 if scheme == "https" else 80)

    def address_allowed(self, addr: _Address) -> bool:
        """Whether ``addr`` passes the address rule (public, or inside ``allow_networks``; an
        IPv4-mapped / NAT64 / 6to4 address is judged by the IPv4 address it carries too)."""
        if outbound.is_public_address(addr):
            return True
        effective = outbound.effective_address(addr)
        return any(a.version == n.version and a in n for n in self.allow_networks for a in {addr, effective})

    async def resolve(self, url: Any) -> list[str]:
        """Check ``url``; the addresses it may be connected to (first: the one to use), as text.

        Raises:
            UrlRefused: see the module doc (one of :data:`CODES`).
        """
        _scheme, host, port = self.split(url)
        try:
            literal: _Address | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            addrs: list[_Address] = [literal]
        else:
            try:
                addrs = list(await outbound.resolve_host(host, port, self.timeout_s))
            except OutboundRefused as exc:
                raise UrlRefused("dns", f"the host name {host} does not resolve"
                                 + (" in time" if "in time" in exc.reason else ""), host=host) from None
        if not _host_in(host, self.allow_hosts) and not (literal is not None and str(literal) in self.allow_hosts):
            for addr in addrs:
                if not self.address_allowed(addr):
                    what = f"{host} is" if literal is not None else f"{host} resolves to {addr},"
                    raise UrlRefused("address", f"{what} a private, loopback, link-local or reserved address this "
                                     "deployment does not allow", host=host, address=str(addr), literal=literal is not None)
        return [str(a) for a in addrs]


def refusal_in(exc: BaseException) -> UrlRefused | None:
    """The :class:`UrlRefused` inside ``exc`` (itself, its exception groups, causes and contexts;
    the SDK wraps what the transport raised), or ``None``."""
    stack, seen = [exc], 0
    while stack and seen < 64:
        current = stack.pop()
        seen += 1
        if isinstance(current, UrlRefused):
            return current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(link for link in (current.__cause__, current.__context__) if link is not None)
    return None


def _names(value: Any, what: str) -> frozenset[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{what} must be a list of host names")
    names = set()
    for v in value:
        name = v.strip().lower().rstrip(".") if not v.strip().startswith("[") else v.strip().strip("[]").lower()
        if any(c in name for c in "/:@ ") and not _is_ip(name):
            raise ValueError(f"{what}: {v!r} is not a host name or IP address (no scheme, port or path)")
        names.add(str(ipaddress.ip_address(name)) if _is_ip(name) else name)
    return frozenset(names)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def parse_policy(value: Any, *, timeout_s: float = 10.0) -> UrlPolicy:
    """A :class:`UrlPolicy` from the setting's dict (``MRTRWEB["SERVER_URL_POLICY"]``): keys
    ``allow_hosts``, ``allow_networks``, ``allow_http_hosts`` (lists of strings) and
    ``max_url_chars`` (a whole number from 20 to 4096), each optional.

    Raises:
        ValueError: an unknown key or a value of the wrong shape, said plainly (for the start-up check).
    """
    if not isinstance(value, Mapping):
        raise ValueError("must be a dict (allow_hosts, allow_networks, allow_http_hosts, max_url_chars)")
    unknown = sorted(set(value) - {"allow_hosts", "allow_networks", "allow_http_hosts", "max_url_chars"})
    if unknown:
        raise ValueError(f"has unknown keys {unknown} (known: allow_hosts, allow_networks, allow_http_hosts, "
                         "max_url_chars)")
    networks: list[_Network] = []
    raw_networks: Iterable[Any] = value.get("allow_networks", [])
    if not isinstance(raw_networks, (list, tuple)):
        raise ValueError("allow_networks must be a list of networks such as \"10.0.0.0/8\"")
    for n in raw_networks:
        try:
            networks.append(ipaddress.ip_network(str(n).strip(), strict=False))
        except ValueError:
            raise ValueError(f"allow_networks: {n!r} is not a network such as \"10.0.0.0/8\" or \"fd00::/8\"") from None
    limit = value.get("max_url_chars", DEFAULT_MAX_URL_CHARS)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 20 <= limit <= 4096:
        raise ValueError("max_url_chars must be a whole number from 20 to 4096")
    return UrlPolicy(allow_hosts=_names(value.get("allow_hosts", []), "allow_hosts"),
                     allow_networks=tuple(networks),
                     allow_http_hosts=_names(value.get("allow_http_hosts", []), "allow_http_hosts"),
                     max_url_chars=limit, timeout_s=float(timeout_s))
