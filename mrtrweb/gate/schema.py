"""The MCP restricted ``requestedSchema`` subset: checking a server's schema, describing its
fields for a form, and validating a person's answer (mrtr-gate.md §1 row
``invalid_form_requestedSchema`` and §2 row ``input_response_schema_mismatch``).

Accepted (spec 2026-07-28 ``client/elicitation``; SEP-1034 defaults; SEP-1330 enums):

* the root: ``{"type": "object", "properties": {...}, "required": [...]}`` plus annotations
  (``title``, ``description``, ``$schema``, ``$id``, ``$defs``, ``x-*``), a boolean
  ``additionalProperties``;
* each property (directly or through a ``$ref`` that stays inside the document, ``#/...``):
  ``string`` (``minLength``, ``maxLength``, ``pattern``, ``format``), ``number`` / ``integer``
  (``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``),
  ``boolean``, a single-select enum (``enum``, or ``oneOf`` of ``const`` + ``title``; legacy
  ``enumNames`` as labels), a multi-select ``array`` whose ``items`` are an enum (``enum``, or
  ``anyOf``/``oneOf`` of ``const`` + ``title``) with ``minItems``, ``maxItems``, ``uniqueItems``;
* annotations anywhere: ``title``, ``description``, ``default``, ``examples``, ``deprecated``,
  ``readOnly``, ``writeOnly``, ``$comment``, ``enumNames``, ``x-*`` and unknown keywords (ignored
  for validation).

Refused: nested objects, other arrays, composition beyond the enum ``oneOf``/``anyOf``, a ``$ref``
leaving the document (or cyclic / unresolvable), a ``format`` the gate cannot check, ill-typed
keyword values, a ``required`` name that is not a property.

The checked schema is compiled into a *normalized* schema (refs resolved, annotations dropped)
that is what answers are validated against, with real format checks.

The pieces: :mod:`.keywords` (the subset's keywords, a select field's options), :mod:`.patterns`
(ECMA-262 ``pattern``, bounded and timed), :mod:`.content` (validating an answer),
:mod:`.schema_cache` (a schema checked once); this module's names stay importable as they were.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import urllib.parse
from collections.abc import Mapping
from typing import Any

from . import formats
from .codes import ContentMismatch, SchemaRefused
from .content import PATTERN_BUDGET_S, PATTERN_MESSAGE, validate_content
from .keywords import (_ANNOTATIONS, MAX_ENUM_VALUES, Option, _check_refused_keywords, _enum_values, _is_number,
                       _plain_options, _titled_options)
from .patterns import PATTERN_TIMEOUT_S, compile_pattern, ecma_to_python, pattern_matches, pattern_weight

#: what this module offered before its split (issue 27): the gate's API stays importable from here
__all__ = [
    "CheckedSchema", "ContentMismatch", "Field", "MAX_ENUM_VALUES", "MAX_PROPERTIES", "MAX_REF_DEPTH", "Option",
    "PATTERN_BUDGET_S", "PATTERN_MESSAGE", "PATTERN_TIMEOUT_S", "SchemaRefused", "check_requested_schema",
    "compile_pattern", "ecma_to_python", "pattern_matches", "pattern_weight", "validate_content",
]

MAX_PROPERTIES = 4096
MAX_REF_DEPTH = 16

_BY_TYPE = {
    "string": frozenset({"type", "minLength", "maxLength", "pattern", "format", "enum", "oneOf"}),
    "number": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum"}),
    "integer": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum"}),
    "boolean": frozenset({"type", "enum"}),
    "array": frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"}),
}
_ROOT_ALLOWED = frozenset({"type", "properties", "required", "additionalProperties", "$schema", "$id", "$defs",
                           "definitions"})


@dataclasses.dataclass(frozen=True)
class Field:
    """One requested field, normalized for rendering.

    ``kind`` is one of ``string``, ``number``, ``integer``, ``boolean``, ``choice`` (single
    select) or ``multi`` (multi select). ``constraints`` holds the enforced keywords
    (``minLength``, ``maximum``, ``format``...). ``has_default``/``default`` carry SEP-1034
    defaults. ``title``/``description`` are server text (escape when rendering).
    """

    name: str
    kind: str
    title: str
    description: str
    required: bool
    has_default: bool
    default: Any
    options: tuple[Option, ...]
    constraints: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class CheckedSchema:
    """A requestedSchema that passed :func:`check_requested_schema`."""

    fields: tuple[Field, ...]
    normalized: dict[str, Any]
    defaults: Mapping[str, Any]

    def validate(self, content: Any) -> dict[str, Any]:
        """Fill absent fields that have a ``default``, then validate. Returns the filled content.

        Raises:
            ContentMismatch: ``content`` is not an object, has an undeclared key, or breaks a rule.
        """
        return validate_content(self, content)


def _non_negative_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v >= 0
    return isinstance(v, float) and math.isfinite(v) and v.is_integer() and v >= 0


def _str_or_empty(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _resolve_pointer(root: Any, ref: str) -> Any:
    base = root.get("$id") if isinstance(root, dict) else None
    if isinstance(base, str) and base and ref.startswith(base.split("#", 1)[0]) and \
            ref[len(base.split("#", 1)[0]):][:1] in ("", "#"):
        ref = "#" + ref[len(base.split("#", 1)[0]):].lstrip("#")  # the document's own $id: same document
    if not ref.startswith("#"):
        raise SchemaRefused("a $ref leaves the document")
    fragment = urllib.parse.unquote(ref[1:])
    if fragment == "":
        return root
    if not fragment.startswith("/"):
        raise SchemaRefused("a $ref names an anchor, not a JSON pointer")
    node = root
    for raw in fragment[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise SchemaRefused("a $ref does not resolve inside the document")
    return node


def _deref(root: Mapping[str, Any], prop: Any) -> Mapping[str, Any]:
    seen: set[str] = set()
    annotations: dict[str, Any] = {}
    depth = 0
    while isinstance(prop, dict) and "$ref" in prop:
        ref = prop["$ref"]
        if not isinstance(ref, str):
            raise SchemaRefused("$ref must be a string")
        extra = [k for k in prop if k != "$ref" and k not in _ANNOTATIONS and not k.startswith("x-")]
        if extra:
            raise SchemaRefused("a $ref has sibling keywords other than annotations")
        for k, v in prop.items():
            if k != "$ref":
                annotations.setdefault(k, v)
        if ref in seen or depth >= MAX_REF_DEPTH:
            raise SchemaRefused("a $ref is cyclic or too deep")
        seen.add(ref)
        depth += 1
        prop = _resolve_pointer(root, ref)
    if not isinstance(prop, dict):
        raise SchemaRefused("a property schema is not an object")
    if annotations:
        merged = dict(prop)
        for k, v in annotations.items():
            merged[k] = v  # the referring site's annotations win
        prop = merged
    return prop


        # Unknown keywords are annotations in JSON Schema 2020-12: ignored.


def _check_property(name: str, prop: Mapping[str, Any], required: bool) -> tuple[Field, dict[str, Any]]:
    where = f"property {name!r}"
    type_name = prop.get("type")
    if not isinstance(type_name, str) or type_name not in _BY_TYPE:
        raise SchemaRefused(f"{where}: type must be one of string, number, integer, boolean, array")
    _check_refused_keywords(prop, _BY_TYPE[type_name], where)
    normalized: dict[str, Any] = {"type": type_name}
    constraints: dict[str, Any] = {}
    options: tuple[Option, ...] = ()
    kind = type_name

    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if key in prop:
            if not _non_negative_int(prop[key]):
                raise SchemaRefused(f"{where}: {key} must be a non-negative integer")
            normalized[key] = constraints[key] = int(prop[key])
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in prop:
            if not _is_number(prop[key]):
                raise SchemaRefused(f"{where}: {key} must be a number")
            normalized[key] = constraints[key] = prop[key]
    if "multipleOf" in prop:
        if not _is_number(prop["multipleOf"]) or prop["multipleOf"] <= 0:
            raise SchemaRefused(f"{where}: multipleOf must be a number > 0")
        normalized["multipleOf"] = constraints["multipleOf"] = prop["multipleOf"]
    if "uniqueItems" in prop:
        if not isinstance(prop["uniqueItems"], bool):
            raise SchemaRefused(f"{where}: uniqueItems must be a boolean")
        normalized["uniqueItems"] = constraints["uniqueItems"] = prop["uniqueItems"]
    if "pattern" in prop:
        pattern = prop["pattern"]
        if not isinstance(pattern, str):
            raise SchemaRefused(f"{where}: pattern must be a string")
        compile_pattern(pattern, where)  # raises SchemaRefused
        constraints["pattern"] = pattern  # enforced by validate_content, not by jsonschema
    if "format" in prop:
        fmt = prop["format"]
        if not isinstance(fmt, str) or fmt not in formats.CHECKERS:
            raise SchemaRefused(f"{where}: format must be one the gate checks ({', '.join(formats.CHECKERS)})")
        normalized["format"] = constraints["format"] = fmt
    if "enum" in prop and "oneOf" in prop:
        raise SchemaRefused(f"{where}: enum and oneOf together")
    if "enum" in prop:
        values = _enum_values(prop["enum"], type_name, where)
        normalized["enum"] = values
        options = tuple(_plain_options(values, prop.get("enumNames")))
        kind = "choice"
    elif "oneOf" in prop:
        opts = _titled_options(prop["oneOf"], type_name, where)
        normalized["enum"] = [o.value for o in opts]
        options = tuple(opts)
        kind = "choice"
    if type_name == "array":
        items = prop.get("items")
        if not isinstance(items, dict):
            raise SchemaRefused(f"{where}: an array must have items that are an enum")
        item_type = items.get("type", "string")
        if item_type != "string":
            raise SchemaRefused(f"{where}: multi-select items must be strings")
        if "enum" in items:
            _check_refused_keywords(items, frozenset({"type", "enum"}), where + " items")
            values = _enum_values(items["enum"], "string", where + " items")
            options = tuple(_plain_options(values, items.get("enumNames")))
        else:
            combo = [k for k in ("anyOf", "oneOf") if k in items]
            if len(combo) != 1:
                raise SchemaRefused(f"{where}: an array must have items that are an enum")
            _check_refused_keywords(items, frozenset({"type", combo[0]}), where + " items")
            options = tuple(_titled_options(items[combo[0]], "string", where + " items"))
        normalized["items"] = {"type": "string", "enum": [o.value for o in options]}
        kind = "multi"
    has_default = "default" in prop
    field = Field(
        name=name,
        kind=kind,
        title=_str_or_empty(prop.get("title")) or name,
        description=_str_or_empty(prop.get("description")),
        required=required,
        has_default=has_default,
        default=copy.deepcopy(prop["default"]) if has_default else None,
        options=options,
        constraints=constraints,
    )
    return field, normalized


#: what the patterns of one ``requestedSchema`` may add up to: characters, and weight (compiling
#: is roughly linear in the weight, and a schema may have thousands of properties)
MAX_SCHEMA_PATTERN_CHARS = 100_000
MAX_SCHEMA_PATTERN_WEIGHT = 200_000
#: patterns one ``requestedSchema`` may have (each is compiled: about a millisecond)
MAX_SCHEMA_PATTERNS = 256
#: options (enum values, titled options) one ``requestedSchema`` may have in all (4,096 fields of
#: 1,000 options each took 19 s to check)
MAX_SCHEMA_OPTIONS = 10_000


def check_requested_schema(schema: Any) -> CheckedSchema:
    """Check a form-mode ``requestedSchema`` against the restricted subset.

    Returns:
        a :class:`CheckedSchema` (fields for rendering, the normalized schema, the defaults).

    Raises:
        SchemaRefused: the schema is outside the subset (the message names no values).
    """
    if not isinstance(schema, dict):
        raise SchemaRefused("requestedSchema must be an object")
    if schema.get("type") != "object":
        raise SchemaRefused('requestedSchema must have "type": "object"')
    _check_refused_keywords(schema, _ROOT_ALLOWED, "requestedSchema")
    for key in ("$schema", "$id"):
        if key in schema and not isinstance(schema[key], str):
            raise SchemaRefused(f"{key} must be a string")
    for key in ("$defs", "definitions"):
        if key in schema and not isinstance(schema[key], dict):
            raise SchemaRefused(f"{key} must be an object")
    if "additionalProperties" in schema and not isinstance(schema["additionalProperties"], bool):
        raise SchemaRefused("additionalProperties must be a boolean (nested schemas are refused)")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise SchemaRefused("properties must be an object")
    if len(properties) > MAX_PROPERTIES:
        raise SchemaRefused(f"more than {MAX_PROPERTIES} properties")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaRefused("required must be a list of property names")
    if len(set(required)) != len(required):
        raise SchemaRefused("required repeats a name")
    missing = [r for r in required if r not in properties]
    if missing:
        raise SchemaRefused("required names a property that is not declared")
    fields: list[Field] = []
    norm_props: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    pattern_chars = pattern_total = pattern_count = options = 0
    for name, raw in properties.items():
        if not name:
            raise SchemaRefused("a property name is empty")
        prop = _deref(schema, raw)
        if isinstance(prop.get("items"), dict) and "$ref" in prop["items"]:
            prop = {**prop, "items": _deref(schema, prop["items"])}  # a local $ref is legal here too
        if isinstance(prop.get("pattern"), str):
            pattern_count += 1
            if pattern_count > MAX_SCHEMA_PATTERNS:
                raise SchemaRefused(f"more than {MAX_SCHEMA_PATTERNS} patterns")
            pattern_chars += len(prop["pattern"])
            if pattern_chars > MAX_SCHEMA_PATTERN_CHARS:
                raise SchemaRefused("the patterns are too long together")
            pattern_total += pattern_weight(prop["pattern"])
            if pattern_total > MAX_SCHEMA_PATTERN_WEIGHT:
                raise SchemaRefused("the patterns repeat too much together")
        field, normalized = _check_property(name, prop, name in required)
        options += len(field.options)
        if options > MAX_SCHEMA_OPTIONS:
            raise SchemaRefused(f"more than {MAX_SCHEMA_OPTIONS} options in all")
        fields.append(field)
        norm_props[name] = normalized
        if field.has_default:
            defaults[name] = field.default
    normalized_schema = {
        "type": "object",
        "properties": norm_props,
        "required": list(required),
        "additionalProperties": False,
    }
    return CheckedSchema(fields=tuple(fields), normalized=normalized_schema, defaults=defaults)


