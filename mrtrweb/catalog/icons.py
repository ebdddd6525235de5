"""Icons a server gives (``icons: [{"src", "mimeType"?, "sizes"?, "theme"?}]`` on tools, prompts,
resources and ``serverInfo``, spec 2025-11-25 onwards), shown only when they can do no harm:

* only a ``data:`` URL with base64 content is considered: an ``http(s):`` or any other URL is
  dropped, **never fetched** (nothing a server sends makes the product open a URL);
* the declared type (the data URL's media type, and ``mimeType`` when given: both must agree) is
  one of :data:`RASTER_TYPES` (no SVG: it is a document that can hold script and links);
* the decoded bytes' signature must be that type's (a GIF declared as PNG is dropped);
* at most :data:`MAX_ICON_BYTES` decoded bytes (the encoded text is checked first, so a huge
  string is never decoded).

:func:`icon_src` returns the first icon that passes, re-encoded canonically, or ``None``.
"""

from __future__ import annotations

import re
from typing import Any

from ..text import media

#: the raster types an icon may have
RASTER_TYPES = media.IMAGE_TYPES
#: the largest icon shown (decoded bytes)
MAX_ICON_BYTES = 64 * 1024
#: the most icons of one item looked at
MAX_ICONS_TRIED = 8

_DATA_URL = re.compile(r"data:(?P<type>[a-z0-9.+-]+/[a-z0-9.+-]+)(?P<params>(?:;[a-z0-9-]+=[^;,]*)*);base64,"
                       r"(?P<data>[A-Za-z0-9+/=\s]*)", re.IGNORECASE | re.ASCII)


def sniff(data: bytes) -> str | None:
    """The raster type of ``data`` by its signature, or ``None`` when it is none of :data:`RASTER_TYPES`."""
    kind = media.sniff(data)
    return kind if kind in RASTER_TYPES else None


def checked_image(declared: str, encoded: str, allowed: tuple[str, ...] = RASTER_TYPES,
                  max_bytes: int = MAX_ICON_BYTES) -> bytes | None:
    """The decoded bytes of a base64 image when ``declared`` is in ``allowed``, the encoded text
    is small enough to hold at most ``max_bytes``, it decodes, and its signature is ``declared``;
    else ``None`` (:func:`mrtrweb.text.media.checked`)."""
    return media.checked(declared, encoded, allowed, max_bytes)[0]


def icon_src(icons: Any) -> str | None:
    """The first icon of ``icons`` (the item's ``icons`` list) that passes every rule of the module
    docstring, as ``data:<type>;base64,<canonical base64>``; ``None`` when none does."""
    if not isinstance(icons, list):
        return None
    for icon in icons[:MAX_ICONS_TRIED]:
        if not isinstance(icon, dict) or not isinstance(icon.get("src"), str):
            continue
        src = icon["src"]
        if len(src) > MAX_ICON_BYTES * 2:
            continue
        match = _DATA_URL.fullmatch(src.strip())
        if match is None:
            continue  # a URL of any other scheme: dropped, never fetched
        declared = match["type"].lower()
        mime = icon.get("mimeType")
        if mime is not None and (not isinstance(mime, str) or mime.strip().lower() != declared):
            continue
        data = checked_image(declared, match["data"])
        if data is not None:
            return media.data_url(declared, data)
    return None
