"""Fail closed, never a 500, when a backing service is down.

``FailClosedMiddleware`` turns every service outage an mrtrweb view (or an admin page, a sign-in)
raises -- a database error (PostgreSQL/SQLite unreachable), a binding store failure
(:class:`~mrtrweb.gate.StoreUnavailable`), a Redis error of the cache, an action refused with
:class:`~mrtrweb.runtime.outage.ServiceUnavailable` (see :func:`mrtrweb.runtime.outage.kind`) -- into a 503 page
with a clear message (``Retry-After: 5``), and logs the reason in one line, no traceback. Nothing
was sent to an MCP server in that case: every retry is built after the binding store and the audit
trail answered. Any other exception is left to Django.

:func:`server_error` is the same net for an outage raised outside a view, where no middleware's
``process_exception`` sees it (a session saved by ``SessionMiddleware`` on the way out while the
database is down): the standalone site uses it as ``handler500`` (:mod:`mrtrweb.site.urls`); a
portal may too (``handler500 = "mrtrweb.middleware.server_error"``). Anything that is no outage
gets Django's own 500 page, logged as Django logs it.
"""

from __future__ import annotations

import logging
import sys

from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils.deprecation import MiddlewareMixin
from django.utils.translation import pgettext_lazy

from .runtime import outage
from .text import stored_text

logger = logging.getLogger("mrtrweb.unavailable")

#: how the 503 page names a service :func:`mrtrweb.runtime.outage.kind` reports
_SHOWN = {"network": "service it needs"}
#: the services :func:`mrtrweb.runtime.outage.kind` names, as the 503 page's sentence names them (German
#: needs the article with the noun: "Die Datenbank ist ...")
_SHOWN_NAMES = {
    "database": pgettext_lazy("unreachable service", "database"),
    "round store": pgettext_lazy("unreachable service", "round store"),
    "cache": pgettext_lazy("unreachable service", "cache"),
    "session cache": pgettext_lazy("unreachable service", "session cache"),
    "channel layer": pgettext_lazy("unreachable service", "channel layer"),
    "service it needs": pgettext_lazy("unreachable service", "service it needs"),
}


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
    body = render_to_string("mrtrweb/unavailable.html", {"what": _SHOWN_NAMES.get(what, what),
                                                         "unavailable_message": stored_text.translated(message)})
    response = HttpResponse(body, status=503, headers={"Retry-After": "5", "Cache-Control": "no-store"})
    response._has_been_logged = True  # logged above in one line: no "Service Unavailable: ..." line too
    return response


def server_error(request, *args, **kwargs) -> HttpResponse:
    """``handler500``: the 503 page (one ERROR line, no traceback) when the uncaught exception
    being handled is an outage (:func:`mrtrweb.runtime.outage.kind`), else Django's default 500 view."""
    exc = sys.exc_info()[1]
    what = outage.kind(exc) if exc is not None else None
    if what is None:
        from django.views.defaults import server_error as default

        return default(request, *args, **kwargs)
    logger.error("%s unavailable while serving %s %s (outside the view): %s", what, request.method, request.path,
                 exc.__class__.__name__)
    return unavailable_response(_SHOWN.get(what, what), getattr(exc, "message", ""))


class SandboxOriginMiddleware(MiddlewareMixin):
    """On the MCP Apps sandbox origin (``MRTRWEB["APPS_SANDBOX_ORIGIN"]``, docs/apps.md) only the
    sandbox's own pages and the static files answer: every other path is a 404 there, so nothing of
    the site is ever served on the origin where apps run. Elsewhere it does nothing. (A
    ``process_request`` hook: it joins the site's one-hop batch, :mod:`mrtrweb.runtime.onehop`.)"""

    def process_request(self, request) -> HttpResponse | None:
        from django.conf import settings
        from django.urls import NoReverseMatch, reverse

        from .mcpapps.sandbox import addressed_to_sandbox

        if not addressed_to_sandbox(request.scheme, request.META.get("HTTP_HOST", "")):
            return None
        try:
            allowed = [reverse("mrtrweb:app-sandbox")]
        except NoReverseMatch:
            allowed = []
        static = getattr(settings, "STATIC_URL", None)
        if static and "://" not in static:
            allowed.append("/" + static.lstrip("/"))
        if any(request.path.startswith(prefix) for prefix in allowed):
            return None
        return HttpResponse("Not found on the sandbox origin.", status=404, content_type="text/plain")
