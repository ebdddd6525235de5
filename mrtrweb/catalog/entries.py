"""One listed tool, prompt, resource template or resource, as the server page shows it (its
schemas are on its call page, one click away: :func:`.schemas.pretty_schema`, within that page's
budget of server text).

:func:`describe` adds to the listed item (a ``dict`` as the server sent it, names untouched: the
page links and calls them byte for byte) a ``catalog`` entry (tools whose ``_meta.ui.visibility``
leaves out ``"model"`` are for their app alone: :func:`describe_all` leaves them out)::

    {"title": str | None,          # "title", or a tool's "annotations.title"; None when absent or
                                   # the same as the name; at most TITLE_CHARS
     "badges": [str, ...],         # tools only: ToolHints.badges(), then "app" when the tool
                                   # names an MCP App (_meta.ui.resourceUri, mrtrweb.mcpapps)
     "app": str | None,            # tools only: that app's ui:// URI
     "destructive": bool,          # tools only: is_destructive()
     "icon": str | None,           # icons.icon_src()
     "mime_type": str | None,      # resources: mimeType, at most 100 characters
     "size": int | None}           # resources: size in bytes, when a non-negative integer
"""

from __future__ import annotations

from typing import Any

from .annotations import tool_hints
from .icons import icon_src
from ..mcpapps import meta as app_meta

#: the most characters of a title shown
TITLE_CHARS = 200

#: the key naming each kind's items
KEYS = {"tool": "name", "prompt": "name", "template": "uriTemplate", "resource": "uri"}


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value.strip() else None


def valid_size(size: Any) -> bool:
    """A size a page may format: an integer (not a boolean) from 0 to below 2**63 bytes (a larger
    one would overflow the formatting)."""
    return isinstance(size, int) and not isinstance(size, bool) and 0 <= size < 2**63


def title_of(kind: str, item: dict[str, Any]) -> str | None:
    """The item's title (``title``, or a tool's ``annotations.title``), at most :data:`TITLE_CHARS`;
    None when absent or the same as its name."""
    title = _text(item.get("title"), TITLE_CHARS)
    annotations = item.get("annotations")
    if title is None and kind == "tool" and isinstance(annotations, dict):
        title = _text(annotations.get("title"), TITLE_CHARS)
    return None if title is not None and title == item.get(KEYS[kind]) else title


def describe(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with its ``catalog`` entry (the module docstring), for ``kind`` one of :data:`KEYS`."""
    title = title_of(kind, item)
    entry: dict[str, Any] = {"title": title, "badges": [], "destructive": False, "icon": icon_src(item.get("icons")),
                             "mime_type": None, "size": None}
    if kind == "tool":
        hints = tool_hints(item)
        app = app_meta.resource_uri(item)
        entry.update(badges=hints.badges() + (["app"] if app else []), destructive=hints.destructive, app=app)
    if kind in ("resource", "template"):
        entry["mime_type"] = _text(item.get("mimeType"), 100)
        size = item.get("size")
        entry["size"] = size if valid_size(size) else None
    return {**item, "catalog": entry}


def describe_all(kind: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`describe` of each item; for ``kind`` ``"tool"``, those a person may call (not
    :func:`mrtrweb.mcpapps.meta.app_only`)."""
    return [describe(kind, item) for item in items if kind != "tool" or not app_meta.app_only(item)]
