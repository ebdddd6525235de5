"""The restricted ``requestedSchema`` subset's keywords and a select field's options (part of
:func:`.schema.check_requested_schema`): which keywords are annotations (ignored), which change
what validates and are refused where a type does not consume them; the options of a single- or
multi-select field -- an ``enum`` (legacy ``enumNames`` as labels) or a ``oneOf``/``anyOf`` of
``const`` + ``title`` (SEP-1330) -- checked and turned into :class:`Option` values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .codes import SchemaRefused

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment",
     "enumNames", "contentEncoding", "contentMediaType"}
)


# JSON Schema keywords that change what validates; one not consumed by a type below is refused.
_KNOWN_KEYWORDS = frozenset(
    {"$ref", "$dynamicRef", "$recursiveRef", "$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor",
     "$vocabulary", "$schema", "$defs", "definitions", "allOf", "anyOf", "oneOf", "not", "if", "then",
     "else", "dependentSchemas", "dependentRequired", "dependencies", "prefixItems", "items", "contains",
     "minContains", "maxContains", "additionalItems", "unevaluatedItems", "unevaluatedProperties",
     "properties", "patternProperties", "additionalProperties", "propertyNames", "minProperties",
     "maxProperties", "required", "const", "enum", "type", "minLength", "maxLength", "pattern", "format",
     "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
     "uniqueItems", "contentSchema"}
)


def _check_refused_keywords(schema: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in schema:
        if key in allowed or key in _ANNOTATIONS or key.startswith("x-"):
            continue
        if key in _KNOWN_KEYWORDS:
            raise SchemaRefused(f"{where}: keyword {key!r} is outside the restricted subset")



MAX_ENUM_VALUES = 1000


@dataclasses.dataclass(frozen=True)
class Option:
    value: Any
    label: str


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True  # math.isfinite would overflow on a huge JSON integer
    return isinstance(v, float) and math.isfinite(v)


def _enum_values(values: Any, type_name: str, where: str) -> list[Any]:
    if not isinstance(values, list) or not values:
        raise SchemaRefused(f"{where}: enum must be a non-empty list")
    if len(values) > MAX_ENUM_VALUES:
        raise SchemaRefused(f"{where}: too many enum values")
    for v in values:
        if not _matches_type(v, type_name):
            raise SchemaRefused(f"{where}: an enum value does not match the type {type_name}")
    keys = [_hashable(v) for v in values]
    if len(set(keys)) != len(keys):
        raise SchemaRefused(f"{where}: enum values repeat")
    return list(values)


def _hashable(v: Any) -> Any:
    return (type(v) is bool, v)


def _matches_type(v: Any, type_name: str) -> bool:
    if type_name == "string":
        return isinstance(v, str)
    if type_name == "boolean":
        return isinstance(v, bool)
    if type_name == "integer":
        return _is_number(v) and (isinstance(v, int) or v.is_integer())
    if type_name == "number":
        return _is_number(v)
    return False


def _titled_options(items: Any, type_name: str, where: str) -> list[Option]:
    if not isinstance(items, list) or not items:
        raise SchemaRefused(f"{where}: oneOf/anyOf must be a non-empty list of {{const, title}}")
    if len(items) > MAX_ENUM_VALUES:
        raise SchemaRefused(f"{where}: too many options")
    options: list[Option] = []
    for item in items:
        if not isinstance(item, dict) or "const" not in item:
            raise SchemaRefused(f"{where}: each option needs const and title")
        _check_refused_keywords(item, frozenset({"const", "type"}), where)
        if "type" in item and item["type"] != type_name:
            raise SchemaRefused(f"{where}: an option's type differs")
        if not _matches_type(item["const"], type_name):
            raise SchemaRefused(f"{where}: an option's const does not match the type {type_name}")
        if "title" not in item:
            raise SchemaRefused(f"{where}: each option needs const and title")
        label = item["title"] if isinstance(item["title"], str) else str(item["const"])
        options.append(Option(item["const"], label))
    keys = [_hashable(o.value) for o in options]
    if len(set(keys)) != len(keys):
        raise SchemaRefused(f"{where}: option values repeat")
    return options


def _plain_options(values: list[Any], names: Any) -> list[Option]:
    if isinstance(names, list) and len(names) == len(values) and all(isinstance(n, str) for n in names):
        return [Option(v, n) for v, n in zip(values, names)]
    return [Option(v, v if isinstance(v, str) else _json_text(v)) for v in values]


def _json_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
