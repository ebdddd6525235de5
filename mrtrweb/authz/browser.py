"""What binds an authorization flow to one browser, and where a finished flow may lead.

:func:`session_digest`
    the ``PendingAuthorization.session_digest`` of a Django session key: ``hmac-sha256:<hex>``, the
    very digest :mod:`mrtrweb.authz.service` writes in ``start_connect`` and compares in
    ``finish_connect`` (its keyed HMAC under ``SECRET_KEY``). The session key itself is never
    stored with the flow. The Continue view (``oauth/go/<id>/``) compares it too, so a
    flow started in one browser session is continued and finished only there (issue 13, item 4:
    the callback CSRF).
:func:`safe_return_to`
    a ``return_to`` value kept only when it is a path of this site (no scheme, no host, no ``//``,
    no backslash, no control character): :func:`django.utils.http.url_has_allowed_host_and_scheme`
    plus a leading ``/``; anything else becomes ``default``.
"""

from __future__ import annotations

import hmac
from typing import Final

from django.utils.http import url_has_allowed_host_and_scheme

# the service's one keyed digest (state, session): no second scheme to drift from it
from .service import keyed_digest as _service_digest

__all__ = ["safe_return_to", "same_session", "session_digest"]

#: the longest ``return_to`` kept (the model's column is 1,000 characters)
MAX_RETURN_TO: Final = 1000


def session_digest(session_key: str) -> str:
    """``hmac-sha256:<64 hex>`` of ``session_key`` (keyed by ``SECRET_KEY``), as the service stores it.

    Raises:
        ValueError: ``session_key`` is empty (a flow needs a saved session).
    """
    if not session_key:
        raise ValueError("a browser session is needed to start or finish an authorization")
    return _service_digest("session", session_key)


def same_session(stored_digest: str, session_key: str | None) -> bool:
    """Whether ``stored_digest`` (a pending row's) is the digest of ``session_key`` (constant time)."""
    if not session_key or not stored_digest:
        return False
    return hmac.compare_digest(stored_digest.encode(), session_digest(session_key).encode())


def safe_return_to(value: object, *, host: str, default: str) -> str:
    """``value`` when it is a path of this site (see module doc), else ``default``.

    ``host``: the request's host (``request.get_host()``), the only host allowed -- and only
    because Django's check needs one: a value naming any host, even this one, is refused.
    """
    if not isinstance(value, str) or not value or len(value) > MAX_RETURN_TO:
        return default
    if not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return default
    if not url_has_allowed_host_and_scheme(value, allowed_hosts={host}, require_https=False):
        return default
    return value
