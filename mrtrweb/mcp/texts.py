"""Marking this package's person-facing English texts for translation without Django.

:func:`gettext_noop` has the name of Django's, so ``makemessages`` finds the texts marked with it,
and returns them unchanged: ``mrtrweb.mcp`` stays free of Django (tests/mcp/test_outbound.py) and
stores its English wording; pages translate it when they show it (:mod:`mrtrweb.text.stored_text`).
"""

from __future__ import annotations


def gettext_noop(message: str) -> str:
    """``message`` as it is, marked for ``makemessages``."""
    return message
