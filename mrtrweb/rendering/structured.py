"""A tool's ``structuredContent`` as a person reads it (issue 28, item 3): checked against the
tool's ``outputSchema`` (JSON Schema 2020-12; the bounded, never-fetching check of
:func:`mrtrweb.consent.argschema.check_arguments`), and laid out once as a table or a tree.

:func:`view` returns::

    {"verdict": "valid" | "invalid" | "unchecked" | "no_schema",
     "problems": [str, ...],            # invalid: at most MAX_PROBLEMS, each "at <path>: <message>"
     "unchecked_reason": str,           # unchecked: argschema's code, e.g. "schema_ref_outside"
     "table": {"columns": [str], "rows": [[str]]} | None,   # a list of flat objects, or one flat object
     "tree": [{"depth": int, "key": str, "value": str | None}] | None,  # anything else, bounded
     "json": str}                       # the value as indented JSON (the tree's fallback and the copy)

Every string in it is server text: the template escapes it.
"""

from __future__ import annotations

import json
from typing import Any

from ..consent.argschema import SchemaUnchecked, check_arguments
from ..text.jsonshow import shown_json

#: the most problems of an invalid value listed
MAX_PROBLEMS = 5
#: a table has at most this many rows and columns; a tree at most this many lines and levels
MAX_ROWS = 200
MAX_COLUMNS = 12
MAX_TREE_LINES = 400
MAX_DEPTH = 8
#: the most characters of one cell or tree value
MAX_CELL_CHARS = 500
#: the most characters of the value as JSON (the page's budget cuts it further)
MAX_JSON_CHARS = 100_000


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS] + " …"


def _table(value: Any) -> dict[str, Any] | None:
    rows = value
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), list):
        rows = next(iter(value.values()))  # {"items": [...]} reads as the list
    if isinstance(rows, list) and rows and len(rows) <= MAX_ROWS and all(
            isinstance(r, dict) and all(_scalar(v) for v in r.values()) for r in rows):
        columns: list[str] = []
        for r in rows:
            for k in r:
                if k not in columns:
                    columns.append(k)
        if len(columns) <= MAX_COLUMNS:
            return {"columns": [_cell(c) for c in columns],
                    "rows": [[_cell(r[c]) if c in r else "" for c in columns] for r in rows]}
    if isinstance(value, dict) and value and len(value) <= MAX_ROWS and all(_scalar(v) for v in value.values()):
        return {"columns": ["", ""], "rows": [[_cell(k), _cell(v)] for k, v in value.items()], "pairs": True}
    return None


def _tree(value: Any) -> list[dict[str, Any]] | None:
    lines: list[dict[str, Any]] = []
    stack: list[tuple[int, str, Any]] = [(0, "", value)]
    while stack:
        depth, key, node = stack.pop()
        if len(lines) >= MAX_TREE_LINES or depth > MAX_DEPTH:
            return None
        if isinstance(node, dict):
            if depth or key:
                lines.append({"depth": depth, "key": key, "value": None if node else "{}"})
            children = [(depth + (1 if depth or key else 0), _cell(k), v) for k, v in node.items()]
        elif isinstance(node, list):
            if depth or key:
                lines.append({"depth": depth, "key": key, "value": None if node else "[]"})
            children = [(depth + (1 if depth or key else 0), f"[{i}]", v) for i, v in enumerate(node)]
        else:
            lines.append({"depth": depth, "key": key, "value": _cell(node)})
            children = []
        stack.extend(reversed(children))
    return lines


def view(value: Any, output_schema: Any) -> dict[str, Any]:
    """``structuredContent`` checked and laid out (the module docstring)."""
    out: dict[str, Any] = {"verdict": "no_schema", "problems": [], "unchecked_reason": "", "table": None,
                           "tree": None, "json": shown_json(value, MAX_JSON_CHARS) or ""}
    if isinstance(output_schema, dict):
        try:
            errors = check_arguments(output_schema, value)
        except SchemaUnchecked as exc:
            out.update(verdict="unchecked", unchecked_reason=exc.code)
        else:
            out["verdict"] = "invalid" if errors else "valid"
            out["problems"] = [f"at {('/'.join(str(p) for p in e.absolute_path) or '(top)')[:300]}: {e.message[:300]}"
                               for e in errors[:MAX_PROBLEMS]]
    out["table"] = _table(value)
    if out["table"] is None:
        out["tree"] = _tree(value)
    return out
