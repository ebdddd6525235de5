"""The deployer's URL policy of the servers tenant admins and people add (``MRTRWEB["SERVER_URL_POLICY"]``).

Public API (lane of issue 29; the pages, the probe and the connections use only this):

* :class:`UrlRefused` -- the refusal: ``.code`` one of :data:`CODES` (``too_long``, ``url``,
  ``scheme``, ``userinfo``, ``http``, ``dns``, ``address``), ``.reason`` an English sentence for
  logs, ``.detail`` what it names; :func:`message` gives the translated sentence a person reads.
* :func:`current` -- the deployed :class:`~mrtrweb.mcp.url_policy.UrlPolicy` (settings read per
  call; ``ImproperlyConfigured`` for a wrong shape, which start-up already refuses: ``mrtrweb.E050``).
* ``async`` :func:`acheck` ``(url) -> list[str]`` -- check ``url`` (resolving its host through the
  one resolver seam, :func:`mrtrweb.mcp.outbound.resolve_host`); the addresses checked, the first
  the one a connection would use. Raises :class:`UrlRefused`.
* :func:`check` ``(url) -> list[str]`` -- the same, synchronous (a Django form's ``clean``; not
  from a running event loop's thread: use :func:`acheck` there).
* :func:`validate_url` -- a Django field validator: ``ValidationError`` with the translated
  :func:`message` and code ``"url_policy_<code>"`` (e.g. ``url_policy_address``).
* :func:`for_server` ``(server) -> UrlPolicy | None`` -- the policy a connection of ``server``
  must hold (``None`` when ``server.url_policy`` is off: a superuser's server, unrestricted).

The rules (:mod:`mrtrweb.mcp.url_policy`): ``https`` to public addresses only, by the outbound
guard's rules (private, loopback, link-local, shared, reserved; IPv4-mapped, NAT64 and 6to4 forms
judged by the IPv4 address they carry); the deployer allows hosts (``allow_hosts``) or networks
(``allow_networks``) for on-premises servers, plain ``http`` only to ``allow_http_hosts``, and
bounds a URL's length (``max_url_chars``, default 500). A connection of a server saved under the
policy is checked again and pinned to the checked address (:func:`mrtrweb.servers.connections.connection_for`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.utils.translation import gettext

from .. import conf
from ..mcp.url_policy import CODES, UrlPolicy, UrlRefused

__all__ = ["CODES", "UrlPolicy", "UrlRefused", "acheck", "check", "current", "for_server", "message", "validate_url"]


def current() -> UrlPolicy:
    """The deployed URL policy (``MRTRWEB["SERVER_URL_POLICY"]``, read now)."""
    return conf.server_url_policy()


def for_server(server: Any) -> UrlPolicy | None:
    """The policy every connection of ``server`` must hold, or ``None`` (``url_policy`` off)."""
    return current() if getattr(server, "url_policy", False) else None


async def acheck(url: Any) -> list[str]:
    """Check ``url`` under :func:`current`; the addresses it resolves to (first: the one used).

    Raises:
        UrlRefused: the policy refuses it (``.code`` one of :data:`CODES`).
    """
    return await current().resolve(url)


def check(url: Any) -> list[str]:
    """:func:`acheck`, synchronous (a form's validation). Raises :class:`UrlRefused`.

    Called on a thread running an event loop (a form validated inside an async view without
    ``sync_to_async``), the check runs on a worker thread and blocks that loop for the resolution
    (at most ``OUTBOUND_TIMEOUT_S``): async code should await :func:`acheck` instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return async_to_sync(acheck)(url)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="url-policy") as worker:
        return worker.submit(lambda: asyncio.run(acheck(url))).result()


def message(exc: UrlRefused) -> str:
    """The sentence a person reads for ``exc`` (translated; names the host, never a secret)."""
    detail = exc.detail
    if exc.code == "too_long":
        return gettext("The URL is longer than %(max)s characters.") % {"max": detail.get("max", "?")}
    if exc.code == "scheme":
        return gettext("Only https URLs are allowed (this one starts with %(scheme)s:).") % {
            "scheme": detail.get("scheme") or "?"}
    if exc.code == "userinfo":
        return gettext("A URL with a user name or password in it (user:password@) is not allowed: "
                       "give credentials in the authorization settings instead.")
    if exc.code == "http":
        return gettext("Plain http is not allowed to %(host)s: use https (this deployment allows http only to "
                       "hosts it names).") % {"host": detail.get("host", "?")}
    if exc.code == "dns":
        return gettext("The host name %(host)s does not resolve.") % {"host": detail.get("host", "?")}
    if exc.code == "address" and detail.get("literal"):
        return gettext("%(host)s is a private, loopback, link-local or reserved address this deployment does not "
                       "allow servers at.") % {"host": detail.get("host", "?")}
    if exc.code == "address":
        return gettext("%(host)s resolves to %(address)s, a private, loopback, link-local or reserved address "
                       "this deployment does not allow servers at.") % {
            "host": detail.get("host", "?"), "address": detail.get("address", "?")}
    return gettext("This is not a usable URL.")


def validate_url(value: Any) -> None:
    """Django validator: ``ValidationError`` (code ``url_policy_<code>``) unless the policy allows ``value``."""
    try:
        check(value)
    except UrlRefused as exc:
        raise ValidationError(message(exc), code=f"url_policy_{exc.code}") from None
