"""The language of a WebSocket connection's pushes: the one its pages are shown in.

A pushed panel is rendered outside any HTTP request, so ``LocaleMiddleware`` has not chosen its
language: :func:`scope_language` chooses it the same way from the handshake (the language cookie,
then ``Accept-Language``), and only when the site uses ``LocaleMiddleware`` (else its pages are in
``LANGUAGE_CODE``, and so are its pushes).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.translation import trans_real

LOCALE_MIDDLEWARE = "django.middleware.locale.LocaleMiddleware"


def _supported(code: str) -> str | None:
    """``code``'s variant among ``LANGUAGES`` (e.g. ``de-DE`` → ``de``), or None."""
    try:
        return translation.get_supported_language_variant(code)
    except LookupError:
        return None


def scope_language(scope: Any) -> str:
    """The language a connection's pages are shown in (see the module docstring); never fails."""
    if not settings.USE_I18N or LOCALE_MIDDLEWARE not in settings.MIDDLEWARE:
        return settings.LANGUAGE_CODE
    cookie = (scope.get("cookies") or {}).get(settings.LANGUAGE_COOKIE_NAME)
    if isinstance(cookie, str) and cookie and (found := _supported(cookie)):
        return found
    header = ""
    for name, value in scope.get("headers") or ():
        if name == b"accept-language":
            header = value.decode("latin-1")
            break
    for code, _quality in trans_real.parse_accept_lang_header(header[:1000]):
        if code == "*":
            break
        if found := _supported(code):
            return found
    return _supported(settings.LANGUAGE_CODE) or settings.LANGUAGE_CODE
