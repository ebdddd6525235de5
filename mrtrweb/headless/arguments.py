"""Arguments for ``mrtr_client --each`` synthesized from an input schema: each required property's
default, else a minimal value of its type (:func:`synthesize_arguments`), and a prompt's required
arguments as empty strings (:func:`prompt_arguments`). Pure functions of the listed schema; no
``$ref`` is followed (a schema may point at the network).

May import: nothing of mrtrweb. Imported by ``mrtrweb.management.commands.mrtr_client``.
"""

from __future__ import annotations

from typing import Any


def synthesize_arguments(schema: Any) -> dict[str, Any]:
    """Arguments for a tool or prompt from its input schema: each required property takes its
    ``default``, else its first ``enum``/``const`` value, else its ``minimum``, else a minimal value
    of its type (0, false, "", [], {}). Optional properties are left out. ``$ref`` is never
    followed (a schema may point at the network)."""
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [r for r in schema.get("required", []) if isinstance(r, str)] \
        if isinstance(schema.get("required"), list) else []
    return {name: _minimal(props.get(name)) for name in required}


def _minimal(prop: Any) -> Any:
    if not isinstance(prop, dict):
        return ""
    if "default" in prop:
        return prop["default"]
    if "const" in prop:
        return prop["const"]
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return prop["enum"][0]
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind in ("number", "integer"):
        low = prop.get("minimum", 0)
        return low if isinstance(low, int | float) and not isinstance(low, bool) else 0
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return synthesize_arguments(prop)
    if kind == "null":
        return None
    return ""


def prompt_arguments(prompt: dict[str, Any]) -> dict[str, str]:
    """``prompts/get`` arguments: every required argument as an empty string (prompt args are strings)."""
    return {a["name"]: "" for a in prompt.get("arguments") or []
            if isinstance(a, dict) and isinstance(a.get("name"), str) and a.get("required")}
