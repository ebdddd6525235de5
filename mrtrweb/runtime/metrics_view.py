"""The ``metrics/`` endpoint (``/mcp/metrics/`` on the standalone site): the Prometheus exposition of
this worker (:mod:`mrtrweb.runtime.metrics`), behind a bearer token.

* ``MRTRWEB["METRICS_TOKEN"]`` unset (the default, None): 404 ``metrics_disabled`` -- the endpoint
  does not exist for anyone.
* Set: ``GET``/``HEAD`` with ``Authorization: Bearer <token>`` (compared in constant time) get
  200 and the exposition (OpenMetrics when the scraper's ``Accept`` asks for it, else the text
  format 0.0.4); a missing or wrong token gets 401 ``metrics_token_required`` /
  ``metrics_token_invalid`` with ``WWW-Authenticate: Bearer``; other methods 405.

Every answer is ``text/plain`` with ``Cache-Control: no-store``; the body of a refusal is its
stable reason and a newline. A failure while collecting is a 503 ``metrics_unavailable`` (logged
with the exception's class), never a 500. Sessions, CSRF and sign-in play no part: a scraper
has none.
"""

from __future__ import annotations

import hmac
import logging

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from .. import conf
from . import metrics

logger = logging.getLogger("mrtrweb.metrics")

_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _refusal(status: int, reason: str, **headers: str) -> HttpResponse:
    return HttpResponse(reason + "\n", status=status, content_type="text/plain; charset=utf-8",
                        headers={**_HEADERS, **headers})


def token_refusal(configured: object, header: str) -> tuple[int, str] | None:
    """Whether a scrape with ``Authorization: header`` may read the metrics when the configured
    token is ``configured``: None (yes) or ``(status, stable reason)``."""
    if not configured:
        return 404, "metrics_disabled"
    scheme, _, given = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return 401, "metrics_token_required"
    if not hmac.compare_digest(given.strip().encode("utf-8", "surrogatepass"),
                               str(configured).encode("utf-8", "surrogatepass")):
        return 401, "metrics_token_invalid"
    return None


@csrf_exempt
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve :func:`mrtrweb.runtime.metrics.exposition` to a scraper holding ``MRTRWEB["METRICS_TOKEN"]``
    (sync: the pending-rounds gauge is one database query)."""
    refused = token_refusal(conf.get("METRICS_TOKEN"), request.headers.get("Authorization", ""))
    if refused is not None:
        status, reason = refused
        extra = {"WWW-Authenticate": 'Bearer realm="mrtrweb-metrics"'} if status == 401 else {}
        return _refusal(status, reason, **extra)
    try:
        body, content_type = metrics.exposition(request.headers.get("Accept"))
    except Exception as exc:  # noqa: BLE001 -- never a 500 for a scrape
        logger.warning("metrics: exposition failed (%s)", exc.__class__.__name__)
        return _refusal(503, "metrics_unavailable")
    return HttpResponse(body, content_type=content_type, headers=_HEADERS)
