"""The site's URLs plus views that fail on purpose, for tests/views/test_error_pages.py (the site's own
error handlers and templates, rendered as in production: DEBUG off)."""

from django.core.exceptions import BadRequest, PermissionDenied
from django.urls import path

from mrtrweb.site.urls import handler500, urlpatterns as site_urlpatterns  # noqa: F401 -- the site's handler


def _bad_request(request):
    raise BadRequest("a malformed request")


def _forbidden(request):
    raise PermissionDenied("internal detail that is never shown")


def _broken(request):
    raise RuntimeError("internal detail that is never shown")


urlpatterns = [
    path("boom/400/", _bad_request),
    path("boom/403/", _forbidden),
    path("boom/500/", _broken),
    *site_urlpatterns,
]
