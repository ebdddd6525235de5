"""The one outbound guard: every URL fetched for OAuth discovery, registration, tokens and
revocation goes through it (MCP authorization, "Security Considerations"; the URLs are chosen by
the MCP server, i.e. by an attacker).

Rules (:func:`check_url`, enforced again per request by :class:`GuardedTransport`):

* ``https`` only; plain ``http`` only to a loopback address and only when
  ``OutboundPolicy.allow_http_loopback`` (development and tests); ``file:``, ``ftp:``, ``gopher:``
  and every other scheme are refused;
* no userinfo; the host must resolve, and **every** address it resolves to must be public: no
  private (RFC 1918, ULA), loopback, link-local (cloud metadata ``169.254.169.254``), shared
  (CGNAT), multicast, reserved or unspecified address, IPv4-mapped / NAT64 IPv6 addresses judged
  by the IPv4 address they carry, unless the host is in ``OutboundPolicy.allow_hosts`` (an admin's
  allow-list), or every address is loopback and ``allow_http_loopback`` is set;
* bounded: ``timeout_s`` for the whole request (resolution, connect, headers and body),
  ``max_bytes`` per response body -- counted after its ``Content-Encoding`` is decoded (here, in
  pieces of about 1 MiB: a gzip or deflate body of kilobytes inflating to gigabytes stops at the
  bound; so does :data:`~mrtrweb.mcp.evidence.MAX_RESPONSE_BYTES` of an MCP connection's answers);
* no redirect is followed by the guard; the SDK's ``RedirectAwareAuth`` follows same-origin
  redirects only and hands any other one to the flow as a failed response (a redirect to another
  host is therefore never fetched, and each followed one is checked again here).

DNS rebinding: the transport connects to the very address it checked (the request goes to the
IP literal, with the original ``Host`` header and, for https, the original name as SNI and for
certificate verification: httpcore's ``sni_hostname`` extension), so a second, different answer
of the resolver cannot redirect the connection to a private address.

Requests to the MCP server's own configured endpoint origin (``mcp_origin``: chosen by a tenant
admin, not by the server) are not checked by the address rules, unless the server was added under
the deployer's URL policy (``mcp_policy``, a :class:`~mrtrweb.mcp.url_policy.UrlPolicy`): then the
origin is checked by that policy once per transport (one per MCP connection) at its first request,
and every request to it goes to the address that was checked (pinned like the others; a refusal is
a :class:`~mrtrweb.mcp.url_policy.UrlRefused`, nothing sent); with ``bound_mcp`` (OAuth
discovery: the server chooses what its own well-known URLs answer) they are still bounded in time
and size like every other request. Without it (the MCP connection itself, whose event streams
last) they are left to the connection's own bounds.

Errors: :class:`OutboundRefused` (``reason``: a short stable text, no secret) -- callers map it to
``outbound_refused`` / ``authorization_failed``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

import anyio
import httpx2

from .errors import origin_of
from .tls import tls_client_context

#: how long an idle pooled connection is reused (seconds). Below the 5 s that common servers keep an
#: idle connection (uvicorn's and Node's defaults), so the client never sends on a connection the
#: server is closing at that moment: the request would fail with ``transport_error`` after it may have
#: left (httpx's default is the same 5 s: a race seen once in ci17, a person's answer lost). A retry
#: is never sent twice to make up for it (the gate's send-once guarantee), so the race is avoided.
KEEPALIVE_EXPIRY_S = 2.0


def http_transport() -> httpx2.AsyncHTTPTransport:
    """The inner HTTP transport of every outbound client: the shared TLS context and a pool whose
    idle connections expire after :data:`KEEPALIVE_EXPIRY_S`."""
    return httpx2.AsyncHTTPTransport(verify=tls_client_context(),
                                     limits=httpx2.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S))

if TYPE_CHECKING:
    from .url_policy import UrlPolicy

__all__ = ["NOT_GLOBAL_NETWORKS", "GuardedTransport", "OutboundPolicy", "OutboundRefused", "check_url",
           "effective_address", "guarded_client", "is_public_address", "resolve_checked", "resolve_host", "split_url"]

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: special-purpose networks (IANA registries) that are not globally reachable although some Python
#: versions' ``is_global`` says they are: the rule must not depend on the interpreter's patch level
NOT_GLOBAL_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24",  # IETF protocol assignments (a cloud's legacy metadata address 192.0.0.192 among them)
    "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
    "::/128", "::1/128", "100::/64", "100:0:0:1::/64", "2001::/23", "2001:db8::/32", "3fff::/20", "5f00::/16",
    "fc00::/7", "fe80::/10",
    "fec0::/10",  # deprecated site-local, still routed inside some networks
))


class OutboundRefused(Exception):
    """The guard refused a URL or a response; ``reason`` says why (safe to log and show)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class OutboundPolicy:
    """What the guard allows. ``mrtrweb.authz.service.outbound_policy()`` reads ``MRTRWEB["OUTBOUND_*"]``.

    ``allow_hosts``: lower-case host names or IP literals exempt from the address rules (never from
    the scheme rule). ``timeout_s``: seconds for one whole request. ``max_bytes``: bytes of one body.
    ``mcp_policy``: for a server added under the deployer's URL policy, that policy
    (:class:`~mrtrweb.mcp.url_policy.UrlPolicy`): a :class:`GuardedTransport` built with this policy
    checks the MCP origin by it and pins it (as its own ``mcp_policy`` argument), so the
    authorization flows of such a server (discovery, refresh, revocation) hold it too.
    """

    allow_http_loopback: bool = False
    allow_hosts: frozenset[str] = frozenset()
    timeout_s: float = 10.0
    max_bytes: int = 1024 * 1024
    mcp_policy: "UrlPolicy | None" = None


def effective_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address that really is contacted: the IPv4 one inside an IPv4-mapped, NAT64 (``64:ff9b::/96``)
    or 6to4 (``2002::/16``) IPv6 address; any other address itself."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
        if addr in _NAT64:
            return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if addr.sixtofour is not None:
            return addr.sixtofour
    return addr


def is_public_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``addr`` (judged by :func:`effective_address`) is a public unicast address: not
    private (RFC 1918, ULA), loopback, link-local, shared (CGNAT), multicast, reserved or unspecified,
    nor in any other special-purpose network that is not globally reachable (``192.0.0.0/24``,
    documentation, benchmarking, site-local ``fec0::/10``...: :data:`NOT_GLOBAL_NETWORKS`, whatever the
    Python version's ``is_global`` says)."""
    a = effective_address(addr)
    return a.is_global and not (a.is_private or a.is_loopback or a.is_link_local or a.is_multicast
                                or a.is_reserved or a.is_unspecified
                                or any(a.version == n.version and a in n for n in NOT_GLOBAL_NETWORKS))


def split_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, or :class:`OutboundRefused` for anything not plainly http(s)."""
    if not isinstance(url, str) or not url or len(url) > 4096:
        raise OutboundRefused("not a usable URL")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise OutboundRefused("the URL holds spaces or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        raise OutboundRefused("not a usable URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise OutboundRefused(f"the scheme {scheme or '(none)'}: is not allowed (https only)")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise OutboundRefused("URLs with user information are not allowed")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise OutboundRefused("the URL has no host")
    return scheme, host, port if port is not None else (443 if scheme == "https" else 80)


async def resolve_checked(url: str, policy: OutboundPolicy) -> list[str]:
    """Check ``url`` and return the addresses it may be connected to (first: the one to use).

    Raises:
        OutboundRefused: see the module rules; the reason names the rule, never a secret.
    """
    scheme, host, port = split_url(url)
    try:
        literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    addrs = [literal] if literal is not None else await resolve_host(host, port, policy.timeout_s)
    allowed_host = host in policy.allow_hosts or (literal is not None and str(literal) in policy.allow_hosts)
    loopback = all(effective_address(a).is_loopback for a in addrs)
    if scheme == "http" and not (loopback and policy.allow_http_loopback):
        raise OutboundRefused("plain http is not allowed (https only)")
    if not allowed_host and not (loopback and policy.allow_http_loopback):
        if not all(is_public_address(a) for a in addrs):
            raise OutboundRefused("the host resolves to a private, loopback, link-local or reserved address")
    return [str(a) for a in addrs]


async def resolve_host(host: str, port: int, timeout_s: float) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses ``host`` resolves to (system resolver, within ``timeout_s`` seconds), in the
    resolver's order. The one resolution seam of the guard and of the URL policy
    (:mod:`.url_policy`): tests replace this module attribute to re-point a name.

    Raises:
        OutboundRefused: the name does not resolve (in time), or to no IP address.
    """
    try:
        with anyio.fail_after(timeout_s):
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise OutboundRefused("the host name did not resolve in time") from None
    except (OSError, UnicodeError):
        raise OutboundRefused("the host name does not resolve") from None
    addrs: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for info in infos:
        try:
            addrs.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    if not addrs:
        raise OutboundRefused("the host name does not resolve")
    return addrs


async def check_url(url: str, policy: OutboundPolicy) -> None:
    """Raise :class:`OutboundRefused` unless ``url`` may be fetched (resolves the host; async)."""
    await resolve_checked(url, policy)


class _BoundedBody(httpx2.AsyncByteStream):
    """A response body that stops with :class:`OutboundRefused` past ``limit`` bytes or ``deadline``."""

    def __init__(self, inner: Any, limit: int, deadline: float) -> None:
        self._inner, self._limit, self._deadline = inner, limit, deadline

    async def __aiter__(self) -> Any:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise OutboundRefused(f"the response is larger than {self._limit} bytes")
            if time.monotonic() > self._deadline:
                raise OutboundRefused("the response took too long")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Inflated(httpx2.AsyncByteStream):
    """A compressed response body decoded here, in pieces of at most about 1 MiB (httpx2's own
    bounded decoders), so that every size bound after the transport counts the bytes the product
    gets -- not the few kilobytes on the wire of a body that inflates to gigabytes."""

    def __init__(self, raw: Any, content_encoding: str) -> None:
        self._raw = httpx2.Response(200, headers={"Content-Encoding": content_encoding}, stream=raw)

    async def __aiter__(self) -> Any:
        async for chunk in self._raw.aiter_bytes():
            yield chunk

    async def aclose(self) -> None:
        await self._raw.aclose()


def _inflated_here(response: httpx2.Response) -> httpx2.Response:
    """``response`` with a ``Content-Encoding`` body decoded by :class:`_Inflated` (the header and
    ``Content-Length`` removed, so nothing decodes it again); any other response as it is."""
    coding = response.headers.get("content-encoding", "")
    if coding.strip().lower() in ("", "identity"):
        return response
    response.stream = _Inflated(response.stream, coding)
    del response.headers["content-encoding"]
    if "content-length" in response.headers:
        del response.headers["content-length"]
    return response


class GuardedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport applying :func:`resolve_checked` to every request it sends (see module doc).

    Requests whose origin is ``mcp_origin`` go straight to ``inner`` (bounded by
    ``policy.timeout_s`` and ``policy.max_bytes`` when ``bound_mcp`` is set) -- with ``mcp_policy``,
    to the address :meth:`UrlPolicy.resolve` checked for that origin at the first of them (then
    :attr:`mcp_address`). Others are sent to the checked IP literal (DNS pinning) and bounded by
    ``policy.timeout_s`` and ``policy.max_bytes``.
    """

    def __init__(self, policy: OutboundPolicy, *, mcp_origin: str | None = None,
                 inner: httpx2.AsyncBaseTransport | None = None, bound_mcp: bool = False,
                 mcp_policy: "UrlPolicy | None" = None) -> None:
        self.policy = policy
        self.mcp_origin = mcp_origin
        #: ``mcp_origin`` as :func:`origin_of` spells a request's (an internationalized host in its IDNA
        #: form): what :meth:`_is_mcp` compares, so a request to the server's own origin is always known as such
        self._mcp_key = _canonical(mcp_origin) if mcp_origin is not None else None
        self.bound_mcp = bound_mcp
        self.mcp_policy = mcp_policy if mcp_policy is not None else policy.mcp_policy
        #: with ``mcp_policy``: the address of ``mcp_origin`` checked at the first request, else None
        self.mcp_address: str | None = None
        self._pin_lock = anyio.Lock()
        self._inner = inner or http_transport()

    async def _mcp_pin(self) -> str:
        """The checked address of ``mcp_origin`` (checked once, at the first request). Raises UrlRefused.

        Once checked, the address is set for the transport's life (nothing ever resets it): later
        requests take it without the lock, which only keeps concurrent first requests to one check."""
        address = self.mcp_address
        if address is not None:
            return address
        async with self._pin_lock:
            if self.mcp_address is None:
                assert self.mcp_policy is not None and self.mcp_origin is not None
                self.mcp_address = (await self.mcp_policy.resolve(self.mcp_origin))[0]
            return self.mcp_address

    def _is_mcp(self, request: httpx2.Request) -> bool:
        if self._mcp_key is None:
            return False
        try:
            return origin_of(str(request.url)) == self._mcp_key
        except ValueError:
            return False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        mcp = self._is_mcp(request)
        if mcp and self.mcp_policy is not None:
            request = _pinned(request, await self._mcp_pin())  # the deployer's policy: checked, pinned
        if mcp and not self.bound_mcp:
            return _inflated_here(await self._inner.handle_async_request(request))
        deadline = time.monotonic() + self.policy.timeout_s
        if mcp:
            pinned = request  # the admin's own choice (or the policy's pin): no address rules, the same bounds
        else:
            addrs = await resolve_checked(str(request.url), self.policy)
            pinned = _pinned(request, addrs[0])
        try:
            with anyio.fail_after(max(deadline - time.monotonic(), 0.001)):
                response = await self._inner.handle_async_request(pinned)
        except TimeoutError:
            raise OutboundRefused("no response in time") from None
        except httpx2.TransportError as exc:
            raise OutboundRefused(f"the request failed ({type(exc).__name__})") from None
        response = _inflated_here(response)  # the bounds count inflated bytes, not the wire's
        response.stream = _BoundedBody(response.stream, self.policy.max_bytes, deadline)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _canonical(origin: str) -> str:
    """``origin`` as :func:`origin_of` spells it; ``origin`` itself when it is not one."""
    try:
        return origin_of(origin)
    except ValueError:
        return origin


def _pinned(request: httpx2.Request, address: str) -> httpx2.Request:
    """``request`` sent to ``address`` with its original ``Host`` and TLS server name."""
    host = request.url.host
    if host.strip("[]") == address:
        return request
    extensions = dict(request.extensions)
    if request.url.scheme == "https":
        extensions["sni_hostname"] = host
    headers = request.headers.copy()
    headers.setdefault("Host", request.url.netloc.decode("ascii"))
    return httpx2.Request(request.method, request.url.copy_with(host=address), headers=headers,
                          stream=request.stream, extensions=extensions)


def guarded_client(policy: OutboundPolicy, *, mcp_origin: str | None = None, bound_mcp: bool = False,
                   mcp_policy: "UrlPolicy | None" = None, **kwargs: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` whose transport applies the guard to every request (see module doc).

    ``kwargs`` go to ``httpx2.AsyncClient`` (``auth``, ``headers``, ``event_hooks``, ``timeout``...);
    ``transport`` (an inner transport) is wrapped by the guard; ``bound_mcp``, ``mcp_policy``: see
    :class:`GuardedTransport`. Redirects are not followed unless
    ``follow_redirects=True`` is passed; each followed one is a new request the guard checks again.
    """
    kwargs.setdefault("timeout", httpx2.Timeout(policy.timeout_s))
    kwargs.setdefault("follow_redirects", False)
    inner = kwargs.pop("transport", None)
    return httpx2.AsyncClient(transport=GuardedTransport(policy, mcp_origin=mcp_origin, inner=inner,
                                                         bound_mcp=bound_mcp, mcp_policy=mcp_policy), **kwargs)
