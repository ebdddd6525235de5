"""A stored result's content as blocks a page lays out (issue 28, item 3), before the page's budget.

Each block is a ``dict`` with ``kind`` and, by kind::

    text            text, markdown (None until the page judges the shown text, then bool), folded (bool:
                    meant only for the assistant, annotations.audience), role ("user" | "assistant" | None)
    image, audio    src (a checked data: URL), mime, bytes, uri (embedded resource) | None, role, folded
    media_refused   media ("image" | "audio" | "file"), mime (as declared, bounded; declared: the same
                    or "?"), why ("type",
                    "size", "encoding", "mismatch"), index (the content item: its download), uri, role
    resource_link   uri, name, title, mime, size, description (resources/read on the person's click)
    resource_text   uri, mime, text, markdown, role
    json            text (an item this module does not know, as indented JSON)

Nothing here fetches a URI or decodes more than ``MAX_MEDIA_BYTES`` of one item.
"""

from __future__ import annotations

import json
from typing import Any

from ..catalog import valid_size
from ..text import media
from ..text.jsonshow import shown_json

#: the most bytes of one image or audio item shown or played (larger ones: a download)
MAX_MEDIA_BYTES = 4 * 1024 * 1024
#: the most characters of a name, title or type shown
FIELD_CHARS = 500
#: the longest URI shown, and read on a click (a longer resource link is shown cut, without Read)
MAX_URI_CHARS = 2000
#: the most characters of an item shown as JSON (the page's budget cuts it further)
MAX_JSON_CHARS = 100_000


def _field(value: Any, limit: int = FIELD_CHARS) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def _folded(item: dict[str, Any]) -> bool:
    """Meant only for the assistant: ``annotations.audience`` lists ``"assistant"`` and not ``"user"``."""
    ann = item.get("annotations")
    audience = ann.get("audience") if isinstance(ann, dict) else None
    return isinstance(audience, list) and "assistant" in audience and "user" not in audience


def _media(kind: str, declared: Any, data: Any, index: int, **extra: Any) -> dict[str, Any]:
    allowed = media.IMAGE_TYPES if kind == "image" else media.AUDIO_TYPES
    raw, why = media.checked(declared, data, allowed, MAX_MEDIA_BYTES)
    mime = media.canonical_type(declared)
    if raw is None:
        return {"kind": "media_refused", "media": kind, "mime": _field(declared, 100), "why": why, "index": index,
                "declared": _field(declared, 100) or "?", **extra}
    return {"kind": kind, "src": media.data_url(mime or "", raw), "mime": mime, "bytes": len(raw), "index": index,
            **extra}


def _blob_kind(mime: Any) -> str:
    kind = media.canonical_type(mime) or ""
    return "image" if kind.startswith("image/") else "audio" if kind.startswith("audio/") else "file"


def item_block(item: Any, index: int, role: str | None = None) -> dict[str, Any]:
    """One content item (``TextContent``, ``ImageContent``, ``AudioContent``, ``ResourceLink``,
    ``EmbeddedResource``, or a ``resources/read`` content) as a block."""
    if not isinstance(item, dict):
        return {"kind": "json", "text": _json(item), "role": role}
    folded = _folded(item)
    kind = item.get("type")
    if kind is None and "uri" in item and ("text" in item or "blob" in item):
        kind = "resource_contents"  # resources/read: the contents themselves
    if kind in ("text", None) and isinstance(item.get("text"), str) and kind != "resource_contents":
        return {"kind": "text", "text": item["text"], "markdown": None, "folded": folded, "role": role}
    if kind in ("image", "audio"):
        return _media(kind, item.get("mimeType"), item.get("data"), index, role=role, folded=folded, uri=None)
    if kind == "resource_link":
        size, uri = item.get("size"), item.get("uri")
        return {"kind": "resource_link", "index": index, "uri": _field(uri, MAX_URI_CHARS),
                "readable": isinstance(uri, str) and 0 < len(uri) <= MAX_URI_CHARS,
                "name": _field(item.get("name")), "title": _field(item.get("title")),
                "mime": _field(item.get("mimeType"), 100), "size": size if valid_size(size) else None,
                "description": _field(item.get("description"), 2000), "role": role, "folded": folded}
    resource = item.get("resource") if kind == "resource" else item if kind == "resource_contents" else None
    if isinstance(resource, dict):
        uri = _field(resource.get("uri"), MAX_URI_CHARS)
        if isinstance(resource.get("text"), str):
            return {"kind": "resource_text", "uri": uri, "mime": _field(resource.get("mimeType"), 100),
                    "text": resource["text"], "markdown": _markdown_type(resource.get("mimeType")),
                    "role": role, "folded": folded}
        if isinstance(resource.get("blob"), str):
            blob_kind = _blob_kind(resource.get("mimeType"))
            if blob_kind == "file":
                return {"kind": "media_refused", "media": "file", "mime": _field(resource.get("mimeType"), 100),
                        "declared": _field(resource.get("mimeType"), 100) or "?",
                        "why": "type", "index": index, "uri": uri, "role": role, "folded": folded}
            return _media(blob_kind, resource.get("mimeType"), resource["blob"], index, uri=uri, role=role,
                          folded=folded)
    return {"kind": "json", "text": _json(item), "role": role, "folded": folded}


def _json(item: Any) -> str:
    return shown_json(item, MAX_JSON_CHARS) or "[content that cannot be shown]"


def _markdown_type(mime: Any) -> bool | None:
    """Markdown by its declared type; None (judged on the shown text) for plain text or no type."""
    kind = media.canonical_type(mime)
    return True if kind == "text/markdown" else None if kind in (None, "text/plain") else False


def content_items(method: str, result: Any) -> list[tuple[Any, str | None]]:
    """The content items of a stored result with their role: ``(item, role)``; a tool's
    ``content``, a prompt's messages' contents (role ``user``/``assistant``), a resource's ``contents``."""
    result = result if isinstance(result, dict) else {}
    if method == "prompts/get":
        messages = result.get("messages")
        return [(m.get("content"), m.get("role") if m.get("role") in ("user", "assistant") else None)
                for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    items = result.get("contents") if method == "resources/read" else result.get("content")
    return [(i, None) for i in items] if isinstance(items, list) else []


def same_json(text: str, value: Any) -> bool:
    """Whether ``text`` is JSON equal to ``value`` (a text block repeating the structured content)."""
    if not isinstance(text, str) or len(text) > 1_000_000 or text.strip()[:1] not in ("{", "["):
        return False
    try:
        return json.loads(text) == value
    except (ValueError, RecursionError):
        return False


def item_bytes(method: str, result: Any, index: int) -> tuple[bytes, str] | None:
    """The decoded bytes of content item ``index`` (an image, audio or embedded blob) and its
    declared type as served for download (``application/octet-stream`` when it is not a plain
    ``type/subtype``); ``None`` when that item has no base64 payload or it does not decode."""
    import base64
    import binascii

    items = content_items(method, result)
    if not 0 <= index < len(items) or not isinstance(items[index][0], dict):
        return None
    item = items[index][0]
    payload = item.get("resource") if item.get("type") == "resource" else item
    if not isinstance(payload, dict):
        return None
    data = payload.get("data") if "data" in payload else payload.get("blob")
    if not isinstance(data, str):
        return None
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw, "application/octet-stream"
