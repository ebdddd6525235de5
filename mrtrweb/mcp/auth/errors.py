"""The errors of :mod:`mrtrweb.mcp.auth` and the cleaning of authorization-server text.

:class:`AuthorizationFailed` carries a stable ``code`` (``authorization_failed``,
``outbound_refused``) and a ``message`` safe to show and log: :func:`clean_text` strips control,
bidi and invisible characters and bounds it to 300 characters. A message never holds a token, an
authorization code, a PKCE verifier or a client secret (the code paths that build them only quote
the authorization server's ``error`` / ``error_description`` and the SDK's own flow errors, whose
texts hold URLs and status codes).
"""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["AUTHORIZATION_FAILED", "OUTBOUND_REFUSED", "AuthorizationFailed", "clean_text"]

AUTHORIZATION_FAILED: Final = "authorization_failed"
OUTBOUND_REFUSED: Final = "outbound_refused"
#: the most characters of server text a message quotes
MAX_TEXT: Final = 300


def clean_text(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as one bounded line: control (Cc), format (Cf: bidi, zero-width), surrogate,
    private-use and unassigned characters become ``?``, whitespace runs one space, at most
    ``limit`` characters (``…`` marks a cut). Framework-free (``mrtrweb.text.display`` imports Django)."""
    raw = text if isinstance(text, str) else str(text)
    out = []
    for ch in raw[: limit * 4]:
        cat = unicodedata.category(ch)
        if ch in "\t\r\n" or cat == "Zs" or cat in ("Zl", "Zp"):
            out.append(" ")
        elif cat in ("Cc", "Cf", "Cs", "Co", "Cn"):
            out.append("?")
        else:
            out.append(ch)
    cleaned = " ".join("".join(out).split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


class AuthorizationFailed(Exception):
    """The flow failed; ``code`` is ``authorization_failed`` (or ``outbound_refused``), ``message``
    is safe to show (server text cleaned and bounded; never a token, code or verifier)."""

    def __init__(self, message: str, *, code: str = AUTHORIZATION_FAILED) -> None:
        message = clean_text(message, 600)
        super().__init__(message)
        self.code = code
        self.message = message
