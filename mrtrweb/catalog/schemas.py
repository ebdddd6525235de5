"""A tool's input or output schema as a person reads it one click away: indented JSON, keys in the
server's order, bounded (:data:`MAX_SCHEMA_CHARS`). The template escapes it; nothing in it is
followed (a ``$ref`` is text here)."""

from __future__ import annotations

import json
from typing import Any

#: the most characters of one schema shown
MAX_SCHEMA_CHARS = 20000


def pretty_schema(schema: Any, limit: int = MAX_SCHEMA_CHARS) -> str | None:
    """``schema`` as indented JSON, cut at ``limit`` characters with a line saying how many more
    there were; ``None`` when there is no schema (not a JSON object)."""
    if not isinstance(schema, dict):
        return None
    try:
        text = json.dumps(schema, indent=2, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(text) > limit:
        text = f"{text[:limit]}\n… ({len(text) - limit} more characters)"
    return text
