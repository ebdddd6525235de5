"""Bytes a page may show as an image or play as audio: the declared type must be on an allow-list,
the bytes' own signature must be that type, and the size bounded. Used by the server page's icons
(:mod:`mrtrweb.catalog.icons`) and by results (:mod:`mrtrweb.rendering`).

No SVG and no HTML are ever on a list: an SVG is a document that can hold script and links. The
base64 text is measured before it is decoded, so a huge string is never decoded.
"""

from __future__ import annotations

import base64
import binascii

#: the raster image types a page shows
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
#: the audio types a page plays (``audio/wav`` also as ``audio/x-wav`` and ``audio/wave``)
AUDIO_TYPES = ("audio/mpeg", "audio/wav", "audio/ogg", "audio/flac", "audio/webm", "audio/mp4")
#: other names of the same types, mapped to the name used above
ALIASES = {"image/jpg": "image/jpeg", "audio/x-wav": "audio/wav", "audio/wave": "audio/wav", "audio/mp3": "audio/mpeg",
           "audio/x-flac": "audio/flac"}


def canonical_type(declared: object) -> str | None:
    """A declared media type, lower case, parameters dropped, aliases resolved; None if not a string."""
    if not isinstance(declared, str):
        return None
    kind = declared.split(";", 1)[0].strip().lower()
    return ALIASES.get(kind, kind)


def sniff(data: bytes) -> str | None:
    """The type of ``data`` by its signature (and, for PNG, GIF and WebP, the header after it), one
    of :data:`IMAGE_TYPES` or :data:`AUDIO_TYPES`, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):  # and its first chunk, the header: not a bare signature
        return "image/png" if len(data) >= 33 and data[12:16] == b"IHDR" else None
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif" if len(data) >= 13 else None
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp" if len(data) >= 16 and data[12:15] == b"VP8" else None
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data.startswith(b"OggS"):
        return "audio/ogg"
    if data.startswith(b"fLaC"):
        return "audio/flac"
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return "audio/webm"
    if len(data) >= 12 and data[4:8] == b"ftyp":
        return "audio/mp4"
    if data.startswith(b"ID3") or (len(data) >= 2 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    return None


def encoded_fits(encoded: str, max_bytes: int) -> bool:
    """Whether base64 text ``encoded`` can decode to at most ``max_bytes`` (whitespace allowed)."""
    return len(encoded) <= (max_bytes * 4) // 3 + 8 + encoded.count("\n") + encoded.count("\r") + encoded.count(" ")


def checked(declared: object, encoded: object, allowed: tuple[str, ...], max_bytes: int) -> tuple[bytes | None, str]:
    """``(bytes, "")`` when ``declared`` (canonical) is in ``allowed``, ``encoded`` is base64 of at
    most ``max_bytes`` bytes, and the bytes' signature is ``declared``; else ``(None, why)`` with
    ``why`` one of ``"type"`` (not allowed), ``"size"``, ``"encoding"``, ``"mismatch"`` (the bytes
    are something else)."""
    kind = canonical_type(declared)
    if kind not in allowed:
        return None, "type"
    if not isinstance(encoded, str) or not encoded_fits(encoded, max_bytes):
        return None, "size"
    try:
        data = base64.b64decode("".join(encoded.split()), validate=True)
    except (binascii.Error, ValueError):
        return None, "encoding"
    if not data or len(data) > max_bytes:
        return None, "size"
    if sniff(data) != kind:
        return None, "mismatch"
    return data, ""


def data_url(kind: str, data: bytes) -> str:
    """``data:<kind>;base64,<canonical base64>``."""
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"
