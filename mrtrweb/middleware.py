"""Fail closed, never a 500, when a backing service is down.

``FailClosedMiddleware`` turns every service outage an mrtrweb view (or an admin page, a sign-in)
raises -- a database error (PostgreSQL/SQLite unreachable), a binding store failure
(:class:`~mrtrweb.gate.StoreUnavailable`), a Redis error of the cache, an action refused with
:class:`~mrtrweb.outage.ServiceUnavailable` (see :func:`mrtrweb.outage.kind`) -- into a 503 page
with a clear message (``Retry-After: 5``), and logs the reason in one line, no traceback. Nothing
was sent to an MCP server in that case: every retry is built after the binding store and the audit
trail answered. Any other exception is left to Django.
"""

from __future__ import annotations

import logging

from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils.deprecation import MiddlewareMixin

from . import outage

logger = logging.getLogger("mrtrweb.unavailable")

#: how the 503 page names a service :func:`mrtrweb.outage.kind` reports
_SHOWN = {"network": "service it needs"}


class FailClosedMiddleware(MiddlewareMixin):
    def process_exception(self, request, exception):
        what = outage.kind(exception)
        if what is None:
            return None
        logger.error("%s unavailable while serving %s %s: %s", what, request.method, request.path,
                     exception.__class__.__name__)
        return unavailable_response(_SHOWN.get(what, what), getattr(exception, "message", ""))


def unavailable_response(what: str, message: str = "") -> HttpResponse:
    """The 503 page (``mrtrweb/unavailable.html``): ``message`` when given, else the standard text
    naming ``what`` ("The database is unreachable right now. Nothing was sent..."). The caller logs
    the reason; Django's request log does not repeat it."""
    body = render_to_string("mrtrweb/unavailable.html", {"what": what, "message": message})
    response = HttpResponse(body, status=503, headers={"Retry-After": "5", "Cache-Control": "no-store"})
    response._has_been_logged = True  # logged above in one line: no "Service Unavailable: ..." line too
    return response
