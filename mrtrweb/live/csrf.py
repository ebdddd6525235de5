"""The CSRF token of the forms in a panel pushed over the WebSocket (:mod:`.consumers`).

May import: Django. Nothing of the product.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.middleware.csrf import get_token


def form_token(secret: str) -> str:
    """The CSRF token for a pushed panel's forms: the tab's CSRF cookie (the unmasked secret Django
    keeps there) masked as a page's ``{% csrf_token %}`` is (:func:`django.middleware.csrf.get_token`:
    a fresh mask per push, so the secret never travels as itself in a frame); ``""`` when the socket
    brought no cookie of that shape (the form then fails its CSRF check, as a page without one would)."""
    if not isinstance(secret, str) or len(secret) != 32 or not secret.isalnum():
        return ""
    holder = HttpRequest()
    holder.META["CSRF_COOKIE"] = secret
    return get_token(holder)
