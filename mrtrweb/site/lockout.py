"""The page a locked-out sign-in gets (django-axes ``AXES_LOCKOUT_CALLABLE``)."""

from __future__ import annotations

import math

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string


def locked_out(request: HttpRequest, *_ignored) -> HttpResponse:
    """HTTP 429: the sign-in page saying that this user name cannot sign in from this address for
    now, and for how long (``AXES_COOLOFF_TIME``, whole minutes, at least 1), with ``Retry-After``
    in seconds. Called by axes with ``(request, original_response, credentials)`` -- or, from its
    async middleware, ``(request, credentials)``: neither is used (nothing typed is shown)."""
    cooloff = settings.AXES_COOLOFF_TIME
    seconds = max(1, math.ceil(cooloff.total_seconds())) if cooloff else 0
    body = render_to_string("registration/locked_out.html",
                            {"minutes": max(1, math.ceil(seconds / 60)) if seconds else 0}, request=request)
    response = HttpResponse(body, status=429)
    if seconds:
        response["Retry-After"] = str(seconds)
    return response
