"""``{% load mrtrweb_time %}``: every time the app shows, one way.

``{{ value|when }}`` renders an aware datetime as ``<time class="when" datetime="…Z">`` holding
its UTC value written out with the zone named (``2026-12-02 04:22:43 UTC``, also its ``title``);
``mrtrweb/times.js`` then rewrites the text into the viewer's own zone, still naming the zone
(``2026-12-02 05:22:43 CET``), and keeps the UTC value in ``title``. Without script the UTC text
stands, which is still unambiguous. ``{{ value|when:"time" }}`` shows the clock time only
(``04:22:43 UTC``), for a deadline within the hour. ``None`` or ``""`` renders nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()

#: the server-side texts (UTC); times.js writes the viewer's zone in the same shape
FORMATS = {"datetime": "%Y-%m-%d %H:%M:%S", "time": "%H:%M:%S"}


def utc_text(value: dt.datetime, style: str = "datetime") -> str:
    """``value`` in UTC as text naming the zone: ``2026-12-02 04:22:43 UTC``."""
    return value.astimezone(dt.timezone.utc).strftime(FORMATS.get(style, FORMATS["datetime"])) + " UTC"


@register.filter
def when(value: Any, style: str = "datetime") -> Any:
    """``value`` (an aware datetime) as a ``<time>`` element the viewer's zone script rewrites."""
    if value in (None, ""):
        return ""
    if not isinstance(value, dt.datetime):
        return value
    if value.tzinfo is None:  # a naive value is UTC here (USE_TZ): never guess a local zone
        value = value.replace(tzinfo=dt.timezone.utc)
    style = style if style in FORMATS else "datetime"
    utc = value.astimezone(dt.timezone.utc)
    iso = utc.isoformat(timespec="seconds").replace("+00:00", "Z")
    return format_html('<time class="when" datetime="{}" title="{}" data-when="{}">{}</time>',
                       iso, utc_text(utc), style, utc_text(utc, style))
