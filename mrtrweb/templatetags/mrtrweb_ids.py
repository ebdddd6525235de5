"""``{% load mrtrweb_ids %}``: long ids and digests shown short, the full value one hover or click away.

``{{ value|short_id }}`` renders ``<code title="full value">mrtr-1a2b3c4d…</code>`` and a copy
button (accessible name "Copy full value") that ``mrtrweb/copy.js`` reveals and wires to the
clipboard: a UUID never wraps one character per line across a table cell. The value is shown as
text (:func:`mrtrweb.text.display.shown`: control and bidi characters visible) and escaped.
"""

from __future__ import annotations

import re
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext

from ..text import display

register = template.Library()

#: hex digits kept of an id's or digest's hex part
KEEP = 8
#: a value this short is shown whole
SHORT_ENOUGH = 16
_HEX_TAIL = re.compile(r"^(.*?)([0-9a-fA-F][0-9a-fA-F-]{15,})$", re.S)

#: the button's icon: two overlapping squares drawn by app.css (no markup a page check could
#: mistake for injected SVG), a constant of this module
_COPY_ICON = mark_safe('<span class="copy-icon" aria-hidden="true"></span>')


def short_text(value: str) -> str:
    """``value`` cut to its kind and first hex digits: ``mrtr-1a2b3c4d…``, ``hmac-sha256:0123abcd…``,
    ``1a2b3c4d…`` for a UUID; a short value whole; anything else long to its first 12 characters."""
    if len(value) <= SHORT_ENOUGH:
        return value
    match = _HEX_TAIL.match(value)
    if match:
        prefix, tail = match.groups()
        return f"{prefix}{tail[:KEEP]}…"
    return value[:12] + "…"


@register.filter
def short_id(value: Any) -> Any:
    """An id or digest, short, with its full value in ``title`` and a copy button."""
    if value in (None, ""):
        return ""
    full = display.shown(str(value))
    short = short_text(full)
    if short == full:
        return format_html('<code class="id">{}</code>', full)
    label = gettext("Copy full value")
    return format_html('<span class="short-id"><code class="id" title="{}">{}</code>'
                       '<button type="button" class="copy" data-copy="{}" aria-label="{}" title="{}" '
                       'data-copied="{}" data-failed="{}" hidden>{}</button></span>',
                       full, short, full, label, label, gettext("Copied"), gettext("Could not copy"), _COPY_ICON)

