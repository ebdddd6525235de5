"""The gate's per-field messages, in the person's language.

The gate (:mod:`mrtrweb.gate`, framework-free) judges an answer against the server's schema and says
what is wrong in English, its stable wording (``mrtrweb.gate.content._message``: "Enter at least 3
characters.", "Enter an email address (name@domain.example)."), which tests, the headless client
and logs read as is. The card shows those messages through :func:`field_message`: each of them is
listed here (``gettext_noop``, so ``makemessages`` finds it), the ones with a number as a template
whose number is kept; a format's description (:data:`mrtrweb.gate.formats.DESCRIPTIONS`) is
translated where it appears. A message that is none of these is shown as it is.
"""

from __future__ import annotations

import re
from typing import Final

from django.utils.translation import get_language, gettext, gettext_noop

#: the gate's whole messages (mrtrweb.gate.content._message, PATTERN_MESSAGE)
WHOLE: Final = (
    gettext_noop("Enter text."), gettext_noop("Enter a number."), gettext_noop("Enter a whole number."),
    gettext_noop("Choose yes or no."), gettext_noop("Choose from the list."), gettext_noop("Wrong type."),
    gettext_noop("This field is required."), gettext_noop("Enter a value in the requested pattern."),
    gettext_noop("Choose one of the offered options."), gettext_noop("Choose each option once."),
    gettext_noop("The answer has a field that was not asked for."), gettext_noop("This value is not accepted."),
)
#: the gate's messages with a bound in them: ``%(n)s`` is the number the gate wrote
WITH_NUMBER: Final = (
    gettext_noop("Enter at least %(n)s characters."), gettext_noop("Enter at most %(n)s characters."),
    gettext_noop("Enter a value of at least %(n)s."), gettext_noop("Enter a value of at most %(n)s."),
    gettext_noop("Enter a value greater than %(n)s."), gettext_noop("Enter a value less than %(n)s."),
    gettext_noop("Enter a multiple of %(n)s."), gettext_noop("Choose at least %(n)s."),
    gettext_noop("Choose at most %(n)s."),
)
#: a format error: ``%(format)s`` is one of the descriptions below
ENTER_FORMAT: Final = gettext_noop("Enter %(format)s.")
#: mrtrweb.gate.formats.DESCRIPTIONS, and their short form in a field's help (mrtrweb.consent.fieldhints)
FORMAT_DESCRIPTIONS: Final = (
    gettext_noop("an email address (name@domain.example)"), gettext_noop("an email address, name@domain.example"),
    gettext_noop("an absolute URI (for example https://example.com/path)"),
    gettext_noop("an absolute URI, for example https://example.com/path"),
    gettext_noop("a calendar date (YYYY-MM-DD)"), gettext_noop("a calendar date, YYYY-MM-DD"),
    gettext_noop("a date and time (YYYY-MM-DDTHH:MM:SSZ)"), gettext_noop("a date and time, YYYY-MM-DDTHH:MM:SSZ"),
    gettext_noop("a time (HH:MM:SSZ)"), gettext_noop("a time, HH:MM:SSZ"),
    gettext_noop("a UUID"), gettext_noop("an IPv4 address"), gettext_noop("an IPv6 address"),
    gettext_noop("a host name"), gettext_noop("a valid value"),
)

_NUMBER = r"(?P<n>-?[0-9][0-9.eE+-]*)"
_NUMBERED = tuple((template, re.compile(re.escape(template).replace(re.escape("%(n)s"), _NUMBER)))
                  for template in WITH_NUMBER)
_FORMAT = re.compile(r"Enter (?P<format>.+)\.", re.DOTALL)


def _english() -> bool:
    return (get_language() or "en").split("-")[0] == "en"


def format_description(text: str) -> str:
    """A format's description (``"a calendar date, YYYY-MM-DD"``) in the active language."""
    return text if _english() or text not in FORMAT_DESCRIPTIONS else gettext(text)


def field_message(message: str) -> str:
    """One of the gate's per-field messages in the active language (others unchanged)."""
    if not isinstance(message, str) or _english():
        return message
    if message in WHOLE:
        return gettext(message)
    for template, pattern in _NUMBERED:
        m = pattern.fullmatch(message)
        if m is not None:
            return gettext(template) % {"n": m.group("n")}
    m = _FORMAT.fullmatch(message)
    if m is not None and m.group("format") in FORMAT_DESCRIPTIONS:
        return gettext(ENTER_FORMAT) % {"format": gettext(m.group("format"))}
    return message

