"""The Content-Security-Policy of an app's document, built from its resource's ``_meta.ui.csp``.

Shape read (``McpUiResourceCsp``)::

    {"connectDomains": [...], "resourceDomains": [...], "frameDomains": [...], "baseUriDomains": [...]}

Nothing declared gives the specification's restrictive default (no network, no nested frames,
inline script and style only). Each declared domain must be a bare origin: ``https://host[:port]``
(``wss://`` too for ``connectDomains``), the host a DNS name or a public IP address. Refused, with
the reason in :attr:`CspPolicy.refused`: ``*`` and any wildcard, other schemes (``data:``,
``javascript:``, ``blob:``, ``http:``...), paths, queries, credentials, quotes/semicolons/spaces
(directive injection), ``localhost`` and ``*.localhost``/``.local``/``.internal`` names, private,
loopback, link-local and other non-global IP addresses (an IPv6 one also by the IPv4 address it
carries: mapped, NAT64, 6to4, Teredo), a host ending in a number that is not a dotted-quad address
(the URL standard reads ``127.1`` or ``0x7f.0.0.1`` as IPv4), the site's and the sandbox's own hosts
(``build(..., own=...)``), more than :data:`MAX_DOMAINS` per list.
A DNS name is not resolved here (the browser resolves it); the network a name reaches is the
deployer's to fence.

Permissions (``_meta.ui.permissions``: ``camera``, ``microphone``, ``geolocation``,
``clipboardWrite``) are granted only where declared *and* in the admin's ``allowed`` set.
Never raises on any JSON.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = ["MAX_DOMAINS", "PERMISSIONS", "CspPolicy", "allow_attribute", "build", "checked_origin"]

#: at most this many domains per list; the rest are refused
MAX_DOMAINS: Final = 20
#: the permissions the specification names, and the Permissions-Policy feature of each
PERMISSIONS: Final = {"camera": "camera", "microphone": "microphone", "geolocation": "geolocation",
                      "clipboardWrite": "clipboard-write"}
_LISTS: Final = ("connectDomains", "resourceDomains", "frameDomains", "baseUriDomains")
_HOST = re.compile(r"^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_ORIGIN = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<host>\[[0-9a-f:.]+\]|[^/:?#@\[\]]+)(?::(?P<port>[0-9]{1,5}))?/?$")
_LOCAL_SUFFIXES: Final = (".localhost", ".local", ".internal", ".home.arpa", ".lan")
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")


def checked_origin(value: Any, schemes: Collection[str] = ("https",)) -> tuple[str | None, str]:
    """``(origin, "")`` for an acceptable declared domain (lower case, no trailing slash), else
    ``(None, reason)``."""
    if not isinstance(value, str):
        return None, "not a string"
    text = value.strip().lower()
    if not text or len(text) > 300:
        return None, "empty or too long"
    if "*" in text:
        return None, "wildcards are not allowed"
    if any(c in text for c in "'\";, \t\r\n\\"):
        return None, "quotes, separators or spaces are not allowed"
    match = _ORIGIN.match(text)
    if match is None:
        return None, "not a bare origin (scheme://host[:port])"
    scheme, host, port = match["scheme"], match["host"], match["port"]
    if scheme not in schemes:
        return None, f"scheme {scheme}: is not allowed here"
    if port is not None and not 0 < int(port) < 65536:
        return None, "bad port"
    bare = host[1:-1] if host.startswith("[") else host
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        address = None
    if address is not None:
        if not _global(address):
            return None, "a private, loopback or reserved address"
    elif _NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]):
        # the URL standard reads a host ending in a number as IPv4 (127.1, 0x7f.0.0.1, 0177.0.0.1)
        return None, "an IPv4 address not written as a.b.c.d"
    elif not _HOST.match(host) or host == "localhost" or host.endswith(_LOCAL_SUFFIXES) or "." not in host:
        return None, "not a public host name"
    return f"{scheme}://{host}" + (f":{int(port)}" if port else ""), ""


def _global(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is global, an IPv6 one also by the IPv4 address it carries (mapped,
    NAT64 ``64:ff9b::/96``, 6to4, Teredo)."""
    if not address.is_global:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        carried = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
        if address in _NAT64:
            carried.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        return all(v4 is None or v4.is_global for v4 in carried)
    return True


@dataclass(frozen=True)
class CspPolicy:
    """The built policy: ``header`` (the ``Content-Security-Policy`` value), the domains accepted
    per list (what the person is shown before the app loads), and ``refused``:
    ``[(list name, the value as sent (truncated), reason)]``."""

    header: str
    domains: dict[str, tuple[str, ...]] = field(default_factory=dict)
    refused: tuple[tuple[str, str, str], ...] = ()

    @property
    def outside_domains(self) -> tuple[str, ...]:
        """Every accepted domain, once, in order."""
        return tuple(dict.fromkeys(d for values in self.domains.values() for d in values))


def build(csp: Any, own: Collection[str | None] = ()) -> CspPolicy:
    """The policy for a resource whose ``_meta.ui.csp`` is ``csp`` (any JSON; not a mapping:
    nothing declared). ``own``: the site's and the sandbox's origins; a declared domain on one of
    their hosts (any scheme or port) is refused -- the app would send the site requests from the
    person's browser, with its same-site cookies where the two share a registrable domain."""
    declared = csp if isinstance(csp, Mapping) else {}
    own_hosts = {(urlsplit(o).hostname or "").lower() for o in own if o} - {""}
    accepted: dict[str, tuple[str, ...]] = {}
    refused: list[tuple[str, str, str]] = []
    for name in _LISTS:
        raw = declared.get(name)
        values = raw if isinstance(raw, list) else ([] if raw is None else [raw])
        ok: list[str] = []
        for i, value in enumerate(values):
            if i >= MAX_DOMAINS:
                refused.append((name, str(value)[:80], f"more than {MAX_DOMAINS} domains"))
                continue
            origin, why = checked_origin(value, ("https", "wss") if name == "connectDomains" else ("https",))
            if origin is not None and urlsplit(origin).hostname in own_hosts:
                origin, why = None, "the site's or the sandbox's own host"
            if origin is None:
                refused.append((name, str(value)[:80], why))
            elif origin not in ok:
                ok.append(origin)
        accepted[name] = tuple(ok)
    res = " ".join(accepted["resourceDomains"])
    extra = (" " + res) if res else ""
    directives = [
        "default-src 'none'",
        f"script-src 'self' 'unsafe-inline'{extra}",
        f"style-src 'self' 'unsafe-inline'{extra}",
        f"img-src 'self' data:{extra}",
        f"media-src 'self' data:{extra}",
        f"font-src 'self'{extra}",
        "connect-src " + (" ".join(accepted["connectDomains"]) or "'none'"),
        "frame-src " + (" ".join(accepted["frameDomains"]) or "'none'"),
        "base-uri " + (" ".join(accepted["baseUriDomains"]) or "'self'"),
        "object-src 'none'",
        "form-action 'none'",
    ]
    return CspPolicy("; ".join(directives), accepted, tuple(refused))


def allow_attribute(permissions: Any, allowed: Collection[str] = ()) -> str:
    """The inner iframe's ``allow`` attribute: the features of the permissions both declared in
    ``_meta.ui.permissions`` (a mapping of name to ``{}``) and in ``allowed`` (the admin's), in a
    stable order; "" for none."""
    declared = permissions if isinstance(permissions, Mapping) else {}
    return "; ".join(PERMISSIONS[name] for name in PERMISSIONS if name in declared and name in allowed)
