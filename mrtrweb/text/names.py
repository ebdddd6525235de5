"""Names a server chooses (tools, prompts), made safe to link and to look up again.

A tool or prompt name is server text: it may be empty, hold ``/ ? # % ..``, spaces, any Unicode,
differ from another only in case, or be very long. It never goes into a URL path (a path
segment cannot carry ``/``, an empty string or ``..`` through browsers and proxies). A call page
is ``servers/<id>/tools/?name=<the name, percent-encoded as UTF-8>`` (prompts likewise); a name
too long for a link (over :data:`MAX_LINKED_NAME_CHARS` characters once encoded) or that is not
valid Unicode text (a lone surrogate) is linked by its digest, ``?sha256=<64 hex digits>``.

The page looks the name up among the server's *current* listing and calls the listed name, so what
the server receives is byte for byte what it listed. When a listing holds one name several times,
the first item of that name is the one shown and called (:func:`unique_items`).
"""

from __future__ import annotations

import hashlib
import logging
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from django.urls import reverse

logger = logging.getLogger("mrtrweb.names")

#: the query parameter carrying a name, and the one carrying its digest
NAME_PARAM = "name"
DIGEST_PARAM = "sha256"
#: a name whose encoded form is longer than this (characters) is linked by its digest
MAX_LINKED_NAME_CHARS = 2000
#: a server page lists at most this many tools, prompts and resource templates of each kind
MAX_LISTED_SHOWN = 500
#: an operation's ``name`` column holds at most this many characters (the full name stays in its params)
STORED_NAME_CHARS = 500


def name_digest(name: str) -> str:
    """The 64 hex digits of SHA-256 over ``name`` in UTF-8 (lone surrogates kept as their code points)."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def name_query(name: str, param: str = NAME_PARAM, digest_param: str = DIGEST_PARAM) -> str:
    """The query string (without ``?``) that names ``name`` on a call page: ``<param>=...`` or
    ``<digest_param>=<name_digest(name)>``."""
    try:
        encoded = urllib.parse.quote(name, safe="", encoding="utf-8", errors="strict")
    except UnicodeEncodeError:
        encoded = None
    if encoded is None or len(encoded) > MAX_LINKED_NAME_CHARS:
        return f"{digest_param}={name_digest(name)}"
    return f"{param}={encoded}"


#: per kind of call page: its URL name and the query parameters naming the listed item (by value, by digest)
PARAMS = {"tool": ("tool", NAME_PARAM, DIGEST_PARAM), "prompt": ("prompt", NAME_PARAM, DIGEST_PARAM),
          "resource": ("resource", "template", DIGEST_PARAM), "resource-uri": ("resource", "uri", "uri_sha256")}


def call_url(kind: str, server_id: Any, name: Any) -> str:
    """The call page of the tool, prompt, resource template or resource ``name`` of a server
    (``kind``: ``"tool"``, ``"prompt"``, ``"resource"`` (``?template=``) or ``"resource-uri"`` (``?uri=``)).

    Returns the server page's URL when ``name`` is not a string (nothing can be called by it)."""
    if not isinstance(name, str):
        return reverse("mrtrweb:server", args=[server_id])
    url_name, param, digest_param = PARAMS[kind]
    return f"{reverse(f'mrtrweb:{url_name}', args=[server_id])}?{name_query(name, param, digest_param)}"


def stored_name(name: str) -> str:
    """``name`` as kept in the operation's ``name`` column (and audit rows): at most
    :data:`STORED_NAME_CHARS` characters, a cut one ending in ``…``, NUL characters as U+FFFD
    (PostgreSQL stores none). What is sent is the params' name."""
    name = name.replace("\x00", "\ufffd")
    return name if len(name) <= STORED_NAME_CHARS else name[: STORED_NAME_CHARS - 1] + "…"


def unique_items(items: Iterable[Any], key: str, *, what: str = "item") -> tuple[list[dict[str, Any]], int]:
    """The listed items whose ``key`` is a string, each name once (its first item), in listing order.

    Returns ``(items, duplicates)``: ``duplicates`` counts the later items dropped because their name
    was already listed (logged, without the names: they are server text)."""
    seen: dict[str, dict[str, Any]] = {}
    dropped = 0
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get(key), str):
            continue
        if item[key] in seen:
            dropped += 1
            continue
        seen[item[key]] = dict(item)
    if dropped:
        logger.info("a server listed %d %s(s) under a name it had already listed; the first of each is used",
                    dropped, what)
    return list(seen.values()), dropped


def requested(query: Mapping[str, Any], path_name: str | None = None,
              param: str = NAME_PARAM, digest_param: str = DIGEST_PARAM) -> tuple[str | None, str | None]:
    """What a call page was asked for: ``(name, None)``, ``(None, digest)`` or ``(None, None)``.

    ``param`` is the query parameter of the name; ``path_name`` comes from the older
    ``.../tools/<name>/`` form of the URL (plain names only)."""
    if path_name is not None:
        return path_name, None
    if param in query:
        return str(query.get(param)), None
    wanted = str(query.get(digest_param) or "").lower()
    if len(wanted) == 64 and all(c in "0123456789abcdef" for c in wanted):
        return None, wanted
    return None, None


def find(items: Iterable[dict[str, Any]], key: str, name: str | None, wanted_digest: str | None) -> dict[str, Any] | None:
    """The first listed item named ``name`` (or whose name has the digest ``wanted_digest``), else None."""
    for item in items:
        value = item.get(key)
        if not isinstance(value, str):
            continue
        if (name is not None and value == name) or (wanted_digest is not None and name_digest(value) == wanted_digest):
            return item
    return None
