"""The sandbox origin MCP Apps run on (``MRTRWEB["APPS_SANDBOX_ORIGIN"]``, docs/apps.md).

* :func:`origin_problem` -- why a configured value cannot be the sandbox origin (the start-up check
  ``mrtrweb.E060``), or None;
* :func:`sandbox_origin` -- the configured origin (normalised), or None when apps are not hosted;
* :func:`addressed_to_sandbox` -- whether a request's scheme and ``Host`` are the sandbox origin's
  (the sandbox proxy page answers only those; every other page refuses them).

Cookies ignore ports: a sandbox on another port of the site's host would receive the site's
cookies, so its host name must differ from the site's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from .. import conf

__all__ = ["addressed_to_sandbox", "origin_problem", "sandbox_origin"]

_BARE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")


def _normal(origin: str) -> str:
    parts = urlsplit(origin.strip())
    default = {"http": 80, "https": 443}[parts.scheme]
    port = f":{parts.port}" if parts.port not in (None, default) else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


def origin_problem(value: Any, site_origins: Iterable[str] = ()) -> str | None:
    """Why ``value`` cannot be the sandbox origin, or None when it can (``None`` itself: apps off).

    ``site_origins``: the site's own origins (``CSRF_TRUSTED_ORIGINS``); the sandbox's host name
    must be none of theirs."""
    if value is None:
        return None
    if not isinstance(value, str) or not _BARE.match(value.strip().rstrip("/")):
        return "must be a bare http(s) origin such as https://apps-sandbox.example.com (no path)"
    try:
        origin = _normal(value.rstrip("/"))
    except (ValueError, KeyError):
        return "must be a bare http(s) origin such as https://apps-sandbox.example.com (no path)"
    host = urlsplit(origin).hostname
    for site in site_origins:
        try:
            site_host = urlsplit(str(site).replace("*.", "")).hostname
        except ValueError:
            continue
        if site_host and site_host == host:
            return (f"its host {host} is the site's own ({site}); apps would share the site's cookies "
                    "- use another host name")
    return None


def sandbox_origin() -> str | None:
    """The configured sandbox origin, normalised (``scheme://host[:port]``, default port dropped), or
    None when unset or unusable (the start-up check reports it)."""
    value = conf.get("APPS_SANDBOX_ORIGIN")
    if origin_problem(value) is not None or not value:
        return None
    return _normal(value.rstrip("/"))


def addressed_to_sandbox(scheme: str, host: str) -> bool:
    """Whether a request with ``scheme`` and ``Host`` header ``host`` is addressed to the sandbox
    origin (False when no sandbox is configured)."""
    origin = sandbox_origin()
    if origin is None or not host:
        return False
    try:
        return _normal(f"{scheme}://{host}") == origin
    except (ValueError, KeyError):
        return False
