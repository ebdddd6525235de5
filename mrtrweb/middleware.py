"""Fail closed, never a 500, when a backing service is down.

``FailClosedMiddleware`` turns a database error (PostgreSQL/SQLite unreachable) or a binding
store failure (:class:`~mrtrweb.gate.StoreUnavailable`) raised by an mrtrweb view into a 503 page
with a clear message, and logs the reason. Nothing was sent to an MCP server in that case: every
retry is built after the binding store and the audit trail answered.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.template.loader import render_to_string
from django.http import HttpResponse
from django.utils.deprecation import MiddlewareMixin

from .gate import StoreUnavailable

logger = logging.getLogger("mrtrweb.unavailable")


class FailClosedMiddleware(MiddlewareMixin):
    def process_exception(self, request, exception):
        if isinstance(exception, StoreUnavailable):
            what = "round store"
        elif isinstance(exception, DatabaseError):
            what = "database"
        else:
            return None
        logger.error("%s unavailable while serving %s %s: %s", what, request.method, request.path,
                     exception.__class__.__name__)
        body = render_to_string("mrtrweb/unavailable.html", {"what": what})
        return HttpResponse(body, status=503, headers={"Retry-After": "5"})
