"""A JSON value as a page shows it, with bounded work: indented when that stays small, else
compact, and cut at a limit either way.

Indenting multiplies a deeply nested value's size by its depth (a list nested 190 deep grows
~190-fold), so :func:`shown_json` measures the compact form and the depth first (both linear) and
indents only when the indented text cannot pass a few times the limit. Control, bidi and
invisible characters are escaped (:func:`mrtrweb.text.display.json_text`).
"""

from __future__ import annotations

from typing import Any

from .display import json_text


def depth_of(value: Any, cap: int = 1000) -> int:
    """The nesting depth of a JSON value (``1`` for a scalar), counted without recursion, at most ``cap``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest >= cap:
            return cap
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def shown_json(value: Any, limit: int) -> str | None:
    """``value`` as JSON text of at most ``limit`` characters (a cut one ends with a line saying how
    many more there were); None when it is not JSON (a value ``json`` cannot write)."""
    try:
        compact = json_text(value)
    except (TypeError, ValueError, RecursionError):
        return None
    text = compact
    if len(compact) * (2 * depth_of(value) + 2) <= 4 * max(limit, 1):
        try:
            text = json_text(value, indent=2)
        except (TypeError, ValueError, RecursionError):
            text = compact
    if len(text) > limit:
        text = f"{text[:limit]}\n… ({len(text) - limit} more characters)"
    return text
