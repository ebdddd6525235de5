"""Template filters that show server text as text (see :mod:`mrtrweb.text.display`).

``{% load mrtrweb_display %}``, then:

* ``{{ value|shown }}`` -- one-line text (names, titles, codes, URLs): control, bidi and invisible
  characters made visible as ``⟨U+202E⟩``, newlines and tabs included;
* ``{{ value|shown_text }}`` -- multi-line text (descriptions, messages, results): the same, with
  newline and tab kept;
* ``{{ url|href }}`` -- the URL-mode URL as a link target, its invisible characters percent-encoded;
* ``{{ url|ascii_url }}`` -- the URL-mode URL's ASCII form for its address line (IDNA host, the
  rest percent-encoded): nothing in it can be reordered by right-to-left letters.
* ``{{ op|status_label }}`` -- an operation's status as its person reads it ("Stopped by you").
* ``{{ message|translated|shown }}`` -- one of the product's stored English messages (an
  operation's outcome, a refusal) in the page's language (:mod:`mrtrweb.text.stored_text`); other text
  (the server's) unchanged.
* ``{{ name|label }}`` -- a name or title cut to :data:`mrtrweb.text.results.MAX_LABEL_CHARS` characters
  (a cut one says how many were left out): use after ``shown``.

Both leave HTML escaping to autoescape (and keep a value that is already escaped, a
``SafeString``, safe: the markers hold no HTML special character). A non-string is returned as it
is.
"""

from __future__ import annotations

from typing import Any

from django import template

from ..text import display, results, stored_text
from ..consent import outcomes

register = template.Library()


@register.filter
def status_label(op: Any, own: bool = True) -> str:
    """An operation's status as its person reads it (:func:`mrtrweb.consent.outcomes.status_label`:
    "Stopped by you" for their own Stop); ``own`` False: read by someone else."""
    return outcomes.status_label(op, own=bool(own))


@register.filter(is_safe=True)
def shown(value: Any) -> Any:
    return display.shown(value)


@register.filter(is_safe=True)
def shown_text(value: Any) -> Any:
    return display.shown_text(value)


@register.filter(is_safe=True)
def href(value: Any) -> Any:
    return display.href(value)


@register.filter(is_safe=True)
def ascii_url(value: Any) -> Any:
    return display.ascii_url(value)


@register.filter(is_safe=True)
def label(value: Any) -> Any:
    return results.shown_text(value, results.MAX_LABEL_CHARS)


@register.filter
def translated(value: Any) -> Any:
    return stored_text.translated(value)
