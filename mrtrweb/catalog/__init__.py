"""What a server offers, shown as the server means it (issue 28, item 1): its tools', prompts' and
resources' titles, descriptions, annotations as badges, input and output schemas one click away,
icons (``data:`` raster images only), and the server's own identity (name, title, version,
instructions, capabilities).

Everything here turns server JSON into plain values a template escapes; nothing here opens a URL
or a file (a URL icon is dropped, never fetched), and every text is bounded.

Public API:

* :func:`describe` / :func:`describe_all` -- one listed item (or each) -> ``dict`` for the server page;
* :func:`tool_hints` / :func:`is_destructive` -- a tool's annotations, read by the MCP rules
  (2025-06-18 "Tool annotations"; unchanged in 2026-07-28);
* :func:`icon_src` -- the one icon a page may show, as a checked ``data:`` URL, or ``None``;
* :func:`pretty_schema` -- a schema as indented JSON, bounded;
* :func:`server_identity` -- ``serverInfo``, instructions and capabilities, as shown.

May import: :mod:`mrtrweb.text` and :mod:`mrtrweb.conf` (bounds); never Django's request layer,
never :mod:`mrtrweb.operations`. Imported by :mod:`mrtrweb.views` and :mod:`mrtrweb.consent`.
"""

from __future__ import annotations

from .annotations import ToolHints, is_destructive, tool_hints
from .entries import describe, describe_all, title_of, valid_size
from .icons import MAX_ICON_BYTES, RASTER_TYPES, icon_src
from .identity import server_identity
from .schemas import MAX_SCHEMA_CHARS, pretty_schema

__all__ = ["MAX_ICON_BYTES", "MAX_SCHEMA_CHARS", "RASTER_TYPES", "ToolHints", "describe", "describe_all", "icon_src", "is_destructive",
           "pretty_schema", "server_identity", "title_of", "tool_hints", "valid_size"]
