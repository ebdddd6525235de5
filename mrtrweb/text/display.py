"""Server text made fit to show: invisible and reordering characters made visible.

Every string a server (or an admin, or a user) chooses -- names, titles, descriptions, messages,
results, errors -- may carry characters a person cannot see but that change what they read:
bidi controls (U+202E turns ``https://evil.example/\\u202emoc.elgoog`` into what reads as
``.../google.com``), C0/C1 controls (BEL, ESC and its terminal escape sequences, NUL), zero-width
characters, line separators, invisible tag characters and lone surrogates. Before such text is shown, each of these
is replaced by a visible marker ``⟨U+202E⟩``; nothing else changes. The raw value stays what is
stored and sent back to the server (a tool is called with its name unchanged): only the display is
cleaned.

* :func:`shown` -- one-line text (names, titles, codes, URLs): every such character is marked,
  newlines and tabs included.
* :func:`shown_text` -- multi-line text (descriptions, messages, results): newline and tab are
  kept (``\\r\\n`` and a lone ``\\r`` become ``\\n``), the others marked.
* :func:`html` -- :func:`shown` (or :func:`shown_text`) then HTML-escaped, as a ``SafeString``:
  for form labels, help texts and choice labels, so that Django's form templates (which print
  ``help_text`` with ``|safe``) and a portal's own form templates print it as text, escaped once.
* :func:`json_text` -- JSON for a terminal or a file: the same characters written as ``\\uXXXX``
  escapes (the value parses back unchanged; nothing invisible is in the text).
* :func:`href` -- the URL-mode URL as a link target: the same address, its invisible characters
  percent-encoded.
* :func:`ascii_url` -- the URL-mode URL's ASCII form, for its address line: the host in IDNA
  (punycode), every other non-ASCII or invisible character percent-encoded (UTF-8), so no
  right-to-left letter can reorder what the person reads (``https://evil.example/اختبار/moc.elgoog``
  is shown as ``https://evil.example/%D8%A7...%B1/moc.elgoog``).

The same rules are applied in templates by the filters ``shown``, ``shown_text``, ``href`` and
``ascii_url`` of the
template library ``mrtrweb_display`` (:mod:`mrtrweb.templatetags.mrtrweb_display`).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString

#: the Unicode bidi formatting characters (Bidi_Control): ALM, LRM, RLM, LRE, RLE, PDF, LRO, RLO,
#: LRI, RLI, FSI, PDI
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"

#: invisible characters that hide or disguise text: soft hyphen, combining grapheme joiner, Hangul
#: fillers, zero-width space, word joiner and invisible operators, braille blank, the byte-order
#: mark, line/paragraph separators, interlinear annotation marks, tags
_INVISIBLE = "\u00ad\u034f\u115f\u1160\u180e\u200b\u2028\u2029\u2060-\u2064\u2800\u3164\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f"

#: C0 controls, DEL and C1 controls
_CONTROLS = "\x00-\x1f\x7f-\x9f"

#: lone UTF-16 surrogates: not characters; a page holding one cannot be encoded as UTF-8 (a 500)
_SURROGATES = "\ud800-\udfff"

_HIDDEN = re.compile(f"[{_CONTROLS}{BIDI_CONTROLS}{_INVISIBLE}{_SURROGATES}]")
_HIDDEN_KEEP_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}{_INVISIBLE}{_SURROGATES}]")
# what json.dumps(ensure_ascii=False) leaves raw inside strings (it escapes C0 itself; a raw newline
# or space in its output is indentation, outside any string)
_JSON_RAW = re.compile(f"[\x7f-\x9f{BIDI_CONTROLS}{_INVISIBLE}{_SURROGATES}]")


def marker(ch: str) -> str:
    """The visible stand-in of one character: ``⟨U+202E⟩`` (hex, at least 4 digits, upper case)."""
    return f"⟨U+{ord(ch):04X}⟩"


def _mark(match: re.Match[str]) -> str:
    return marker(match.group(0))


def shown(value: Any) -> Any:
    """One-line display of ``value``: every control, bidi and invisible character (newline and tab
    too) replaced by its :func:`marker`. A non-string is returned as it is (numbers, ``None``).
    Not HTML-escaped (templates do that)."""
    if not isinstance(value, str):
        return value
    return _HIDDEN.sub(_mark, value)


def shown_text(value: Any) -> Any:
    """Multi-line display of ``value``: like :func:`shown`, but newline and tab are kept (``\\r\\n``
    and a lone ``\\r`` become ``\\n``). A non-string is returned as it is."""
    if not isinstance(value, str):
        return value
    return _HIDDEN_KEEP_LINES.sub(_mark, value.replace("\r\n", "\n").replace("\r", "\n"))


def has_hidden(value: Any) -> bool:
    """Whether ``value`` (a string, or a JSON value holding strings) holds a control, bidi or
    invisible character that :func:`shown` would mark: such a value must not be put raw where a
    person reads it (a text box's pre-filled value cannot show markers)."""
    if isinstance(value, str):
        return _HIDDEN.search(value) is not None
    if isinstance(value, (list, tuple)):
        return any(has_hidden(v) for v in value)
    if isinstance(value, dict):
        return any(has_hidden(k) or has_hidden(v) for k, v in value.items())
    return False


def html(value: Any, *, multiline: bool = False) -> SafeString:
    """``value`` (``str()`` of a non-string; ``None`` is ``""``) cleaned by :func:`shown` (or
    :func:`shown_text`) and HTML-escaped: a ``SafeString`` to use as a form field's label, help
    text or choice label, so any form template prints it as text, escaped exactly once."""
    text = "" if value is None else str(value)
    return escape(shown_text(text) if multiline else shown(text))


def href(url: Any) -> Any:
    """The URL-mode URL as a link's ``href``: each control, bidi or invisible character
    percent-encoded (UTF-8), as a browser encodes it when it opens the link anyway -- the same
    address, with no invisible character in the page. (The gate's URL check has refused white
    space and C0/C1 controls already, and such characters cannot be in a valid host.) A
    non-string is returned as it is."""
    if not isinstance(url, str):
        return url
    return _HIDDEN.sub(lambda m: urllib.parse.quote(m.group(0), safe="", errors="replace"), url)


_NOT_PRINTABLE_ASCII = re.compile(r"[^\x21-\x7e]")


def _percent(match: re.Match[str]) -> str:
    return urllib.parse.quote(match.group(0), safe="", errors="surrogatepass")


def _ascii_host(host: str) -> str:
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:  # not a valid domain name (the gate refuses these): each byte shown
        return _NOT_PRINTABLE_ASCII.sub(_percent, host)


def ascii_url(url: Any) -> Any:
    """The ASCII form of a URL, for the line the person reads: a non-ASCII host in its IDNA
    (punycode) form, lower case, and every other character outside printable ASCII (non-ASCII
    letters, bidi controls, invisible characters, controls) percent-encoded as UTF-8, as a browser
    serializes the URL it opens. The result holds only printable ASCII, so nothing in it is
    reordered or hidden; an ASCII URL is returned unchanged. A non-string is returned as it is."""
    if not isinstance(url, str):
        return url
    if url.isascii() and not _HIDDEN.search(url):
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _NOT_PRINTABLE_ASCII.sub(_percent, url)
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    if not netloc.isascii():
        userinfo, at, hostport = netloc.rpartition("@")
        host, colon, port = hostport.partition(":")  # a non-ASCII host is never an IPv6 literal
        netloc = _NOT_PRINTABLE_ASCII.sub(_percent, userinfo) + at + _ascii_host(host) + colon \
            + _NOT_PRINTABLE_ASCII.sub(_percent, port)
    return (_NOT_PRINTABLE_ASCII.sub(_percent, scheme) + sep + _NOT_PRINTABLE_ASCII.sub(_percent, netloc)
            + _NOT_PRINTABLE_ASCII.sub(_percent, tail))


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code > 0xFFFF:  # a UTF-16 surrogate pair, as JSON writes astral characters
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def json_text(value: Any, **kwargs: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **kwargs)`` with every control, bidi and invisible
    character written as a ``\\uXXXX`` escape: the same JSON value, readable Unicode kept, nothing
    in it that a terminal or an editor would act on or hide. (Outside strings JSON text is ASCII
    and ``json.dumps`` escapes C0 controls in strings itself: every character replaced here is
    inside a string, where the escape is valid.)"""
    return _JSON_RAW.sub(_json_escape, json.dumps(value, ensure_ascii=False, **kwargs))
