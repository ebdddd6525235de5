"""The WebSocket's origin check: the full origin (scheme, host, port), as Django's CSRF check does.

Channels' ``AllowedHostsOriginValidator`` compares the ``Origin`` header's *host* with
``ALLOWED_HOSTS`` only, so a page served from another port (or over plain http) of the same host
could open ``/ws/mrtrweb/`` in the person's browser -- cookies do not depend on the port -- and read
every pushed card. :class:`SameOriginValidator` accepts a WebSocket only when its ``Origin`` is
exactly the site's own origin as this very request sees it, or one of ``CSRF_TRUSTED_ORIGINS``:

* the site's own origin is ``(scheme, host, port)`` with the host from the ``Host`` header
  (``X-Forwarded-Host`` when ``USE_X_FORWARDED_HOST``), which must pass ``ALLOWED_HOSTS`` as for
  an HTTP request, and the scheme ``https`` when the connection is ``wss`` or when
  ``SECURE_PROXY_SSL_HEADER`` says so (the same rule as ``HttpRequest.is_secure()``), else ``http``;
* ``CSRF_TRUSTED_ORIGINS`` entries match exactly (scheme, host, port), or ``scheme://*.domain``
  any subdomain with that scheme (and port, when the entry names one), as Django's CSRF check;
* a missing, ``null``, repeated or malformed ``Origin`` is refused; the header must be exactly
  an origin as browsers serialize it (:func:`parse_header_origin`: ``scheme://host[:port]``,
  lower case, no default port, no leading zero in the port, nothing around it: no whitespace,
  path, ``?``, ``#`` or credentials).

A refused connection is closed before it is accepted (the handshake fails with HTTP 403) and the
reason is logged (``mrtrweb.live.origin``, the origin's first 200 characters, escaped by ``%r``).

Being the outermost layer of the WebSocket stack, it also keeps a service outage met before the
consumer runs -- the session or the user looked up by ``AuthMiddlewareStack`` while the database
(or a cache holding sessions) is down -- from raising out of the ASGI application: the handshake
is refused (close code 1011, HTTP 403), one WARNING line is logged, no traceback; the page
reconnects later. (The consumer handles the outages it meets itself: :mod:`mrtrweb.live.consumers`.)

Usage (``asgi.py``; also for an embedding portal)::

    "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
"""

from __future__ import annotations

import ipaddress
import logging
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import is_same_domain, split_domain_port, validate_host

from ..runtime import outage

logger = logging.getLogger("mrtrweb.origin")

Scope = MutableMapping[str, Any]
#: ``(scheme, host, port)``: scheme ``http``/``https``, host lower-case, port an int
Origin = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}


#: ``scheme://host[:port]``, nothing else: a host name (ASCII, as browsers send IDN hosts in
#: punycode) or a bracketed IPv6 address; a port of 1-5 digits without a leading zero
_ORIGIN_RE = re.compile(r"(?P<scheme>[A-Za-z]+)://(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])"
                        r"(?::(?P<port>[1-9][0-9]{0,4}))?", re.ASCII)


def parse_origin(text: str) -> Origin | None:
    """``"https://Example.com:8443"`` -> ``("https", "example.com", 8443)``; the default port when
    none is given. None for anything that is not exactly an http(s) origin: ``null``, whitespace
    around it, a path (even ``/``), a ``?`` or ``#`` (even empty), credentials, no host, a port
    that is empty, has a leading zero or is above 65535. Scheme and host are case-insensitive
    (``CSRF_TRUSTED_ORIGINS`` entries); the ``Origin`` header is checked by
    :func:`parse_header_origin`, stricter."""
    match = _ORIGIN_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    scheme, host, port = match["scheme"].lower(), match["host"].lower(), match["port"]
    if scheme not in _DEFAULT_PORTS or (port is not None and int(port) > 65535):
        return None
    if host.startswith("["):
        try:  # "[::1]" -> "::1" (as urlsplit gives it), in its compressed form, as browsers send it
            host = ipaddress.IPv6Address(host[1:-1]).compressed
        except ValueError:
            return None
    return scheme, host, int(port) if port is not None else _DEFAULT_PORTS[scheme]


def serialize_origin(origin: Origin) -> str:
    """``("https", "example.com", 443)`` -> ``"https://example.com"``: the form browsers send."""
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" if port == _DEFAULT_PORTS[scheme] else f"{scheme}://{host}:{port}"


def parse_header_origin(text: str) -> Origin | None:
    """An ``Origin`` header's origin, or None unless ``text`` is exactly the serialization a
    browser sends (RFC 6454 section 6.1: lower-case scheme and host, no default port)."""
    origin = parse_origin(text)
    return origin if origin is not None and serialize_origin(origin) == text else None


def _header_values(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope.get("headers", []) if key.lower() == name]


def _is_secure(scope: Scope) -> bool:
    """``HttpRequest.is_secure()`` for a WebSocket scope: ``SECURE_PROXY_SSL_HEADER`` decides when
    its header is present, else the connection's own scheme (``wss``)."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, secure_value = proxy
        name = header.removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1")
        values = _header_values(scope, name)
        if values:
            return ",".join(values).split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") in ("wss", "https")


def own_origin(scope: Scope) -> Origin | None:
    """The site's origin as this connection sees it, or None when its host is missing or not in
    ``ALLOWED_HOSTS`` (the same host validation as ``HttpRequest.get_host()``)."""
    hosts = []
    if getattr(settings, "USE_X_FORWARDED_HOST", False):
        hosts = _header_values(scope, b"x-forwarded-host")
    hosts = hosts or _header_values(scope, b"host")
    if len(hosts) != 1:
        return None
    domain, port = split_domain_port(hosts[0].strip())
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed):
        return None
    scheme = "https" if _is_secure(scope) else "http"
    try:
        number = int(port) if port else _DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return scheme, domain.removeprefix("[").removesuffix("]"), number  # "[::1]" -> "::1", as urlsplit


def trusted(origin: Origin, entries: Iterable[str]) -> bool:
    """Whether ``origin`` is one of ``entries`` (``CSRF_TRUSTED_ORIGINS`` syntax: exact origins, or
    ``scheme://*.domain[:port]`` for a domain's subdomains)."""
    scheme, host, port = origin
    for entry in entries:
        if "*" in entry:
            parts = urllib.parse.urlsplit(entry.strip())
            if parts.scheme.lower() != scheme or not parts.netloc.startswith("*"):
                continue
            pattern_host, pattern_port = split_domain_port(parts.netloc.removeprefix("*").lower())
            if pattern_port and str(port) != pattern_port:
                continue
            if not pattern_port and port != _DEFAULT_PORTS[scheme]:
                continue
            if pattern_host.startswith(".") and is_same_domain(host, pattern_host):
                return True
        elif parse_origin(entry) == origin:
            return True
    return False


def refusal(scope: Scope, extra_trusted: Iterable[str] = ()) -> str:
    """Why the WebSocket of ``scope`` must be refused (a short sentence), or ``""`` to accept it."""
    values = _header_values(scope, b"origin")
    if not values:
        return "no Origin header"
    if len(values) > 1:
        return "more than one Origin header"
    origin = parse_header_origin(values[0])
    if origin is None:
        return f"malformed Origin {values[0][:200]!r}"
    if origin == own_origin(scope):
        return ""
    if trusted(origin, [*getattr(settings, "CSRF_TRUSTED_ORIGINS", []), *extra_trusted]):
        return ""
    return f"Origin {values[0][:200]!r} is neither this site's origin nor a trusted one"


class SameOriginValidator:
    """ASGI middleware: a WebSocket is accepted only from the site's own full origin or a
    ``CSRF_TRUSTED_ORIGINS`` origin (see the module's docstring); others scopes pass unchanged.

    Args:
        application: the ASGI application behind it.
        trusted_origins: origins accepted besides ``CSRF_TRUSTED_ORIGINS`` (same syntax).
    """

    def __init__(self, application: Callable[..., Awaitable[None]], trusted_origins: Iterable[str] = ()) -> None:
        self.application = application
        self.trusted_origins = tuple(trusted_origins)

    async def __call__(self, scope: Scope, receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[None]]) -> None:
        if scope.get("type") == "websocket":
            why = refusal(scope, self.trusted_origins)
            if why:
                logger.warning("websocket %s refused: %s", scope.get("path", ""), why)
                return await WebsocketDenier()(scope, receive, send)
        try:
            return await self.application(scope, receive, send)
        except Exception as exc:
            what = outage.kind(exc, redis="session cache")
            if what is None or scope.get("type") != "websocket":
                raise
            logger.warning("websocket %s refused: the %s is unavailable (%s); the page reconnects",
                           scope.get("path", ""), what, exc.__class__.__name__)
            try:
                await send({"type": "websocket.close", "code": 1011})
            except Exception as close_exc:  # noqa: BLE001 -- the connection is gone either way
                logger.debug("websocket: close after an outage failed (%s)", close_exc.__class__.__name__)
