"""A tool's input or output schema as a person reads it one click away: indented JSON, keys in the
server's order, bounded (:data:`MAX_SCHEMA_CHARS`). The template escapes it; nothing in it is
followed (a ``$ref`` is text here)."""

from __future__ import annotations

from typing import Any

from ..text.jsonshow import shown_json

#: the most characters of one schema shown
MAX_SCHEMA_CHARS = 20000


def pretty_schema(schema: Any, limit: int = MAX_SCHEMA_CHARS) -> str | None:
    """``schema`` as JSON (indented when that stays small: :func:`mrtrweb.text.jsonshow.shown_json`),
    cut at ``limit`` characters with a line saying how many more there were; ``None`` when there
    is no schema (not a JSON object)."""
    if not isinstance(schema, dict):
        return None
    return shown_json(schema, limit)
