"""A tool's MCP Apps metadata (``_meta.ui``, SEP-1865) and the capability the client declares.

Shapes (from the specification, ``@modelcontextprotocol/ext-apps`` 2.x)::

    tool._meta.ui = {"resourceUri": "ui://...", "visibility": ["model", "app"]}
    tool._meta["ui/resourceUri"] = "ui://..."          # the deprecated flat key, still read

``visibility`` defaults to ``["model", "app"]``; a tool whose visibility does not include
``"model"`` (e.g. ``["app"]``) is callable only by its app, never offered as a person's call.
Everything here tolerates any JSON a server sends (a wrong type counts as absent) and never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..mcp.connection import APPS_EXTENSION, APPS_MIME_TYPE

__all__ = ["CAPABILITY", "EXTENSION", "MIME_TYPE", "app_only", "resource_uri", "visibility"]

#: the extension's identifier in ``capabilities.extensions``
EXTENSION: Final = APPS_EXTENSION
#: the mime type of an app's HTML resource
MIME_TYPE: Final = APPS_MIME_TYPE
#: the settings the client declares under :data:`EXTENSION`
CAPABILITY: Final = {"mimeTypes": [MIME_TYPE]}
_DEFAULT_VISIBILITY: Final = ("model", "app")
_MAX_URI = 2000


def _ui(tool: Any) -> Mapping[str, Any]:
    meta = tool.get("_meta") if isinstance(tool, Mapping) else getattr(tool, "meta", None)
    if not isinstance(meta, Mapping):
        return {}
    ui = meta.get("ui")
    flat = meta.get("ui/resourceUri")
    out: dict[str, Any] = dict(ui) if isinstance(ui, Mapping) else {}
    if "resourceUri" not in out and isinstance(flat, str):
        out["resourceUri"] = flat
    return out


def resource_uri(tool: Any) -> str | None:
    """The ``ui://`` URI of ``tool``'s app (a listing's tool dict, or an object with ``meta``), or
    None when it names none, or names something that is not a ``ui://`` URI of sane length."""
    uri = _ui(tool).get("resourceUri")
    if isinstance(uri, str) and uri.startswith("ui://") and 5 < len(uri) <= _MAX_URI and uri.isprintable():
        return uri
    return None


def visibility(tool: Any) -> tuple[str, ...]:
    """``tool``'s ``_meta.ui.visibility`` as a tuple of its strings (``("model", "app")`` when
    absent or not a list of strings)."""
    raw = _ui(tool).get("visibility")
    if not isinstance(raw, list) or not raw or not all(isinstance(v, str) for v in raw):
        return _DEFAULT_VISIBILITY
    return tuple(raw)


def app_only(tool: Any) -> bool:
    """Whether ``tool`` is for its app alone (its visibility leaves out ``"model"``): not listed as
    a person's call, and a person's call of it is refused."""
    return "model" not in visibility(tool)
