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
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator

from . import formats
from .ids import digest
from .jsoncopy import json_copy

MAX_PROPERTIES = 4096
#: seconds one ``pattern`` may take on one answer before the answer is refused (ReDoS guard)
PATTERN_TIMEOUT_S = 0.5
#: seconds all the ``pattern`` checks of one answer may take together (thousands of fields, each
#: with a slow pattern, must not hold a worker for minutes): a field not checked in time is refused
PATTERN_BUDGET_S = 1.0
MAX_ENUM_VALUES = 1000
MAX_REF_DEPTH = 16

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
_BY_TYPE = {
    "string": frozenset({"type", "minLength", "maxLength", "pattern", "format", "enum", "oneOf"}),
    "number": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum"}),
    "integer": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum"}),
    "boolean": frozenset({"type", "enum"}),
    "array": frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"}),
}
_ROOT_ALLOWED = frozenset({"type", "properties", "required", "additionalProperties", "$schema", "$id", "$defs",
                           "definitions"})


class SchemaRefused(ValueError):
    """The ``requestedSchema`` is outside the restricted subset; ``str(exc)`` says why (no values)."""


class ContentMismatch(ValueError):
    """An answer does not satisfy the schema.

    Attributes:
        errors: field name (or ``""`` for the whole answer) -> list of messages for the person.
    """

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        fields = ", ".join(sorted(k or "(answer)" for k in errors))
        super().__init__(f"answer does not match the requested schema (fields: {fields})")


@dataclasses.dataclass(frozen=True)
class Option:
    value: Any
    label: str


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


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True  # math.isfinite would overflow on a huge JSON integer
    return isinstance(v, float) and math.isfinite(v)


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


def _check_refused_keywords(schema: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in schema:
        if key in allowed or key in _ANNOTATIONS or key.startswith("x-"):
            continue
        if key in _KNOWN_KEYWORDS:
            raise SchemaRefused(f"{where}: keyword {key!r} is outside the restricted subset")
        # Unknown keywords are annotations in JSON Schema 2020-12: ignored.


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


#: ECMA-262 ``\\s``: WhiteSpace (TAB, VT, FF, SP, NBSP, ZWNBSP and the Zs category) and LineTerminator
_ECMA_SPACE = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
#: ECMA-262 ``.`` (without the ``s`` flag): any character but a LineTerminator
_ECMA_DOT = "[^\\n\\r\\u2028\\u2029]"


def ecma_to_python(pattern: str) -> str:
    """Translate an ECMA-262 ``pattern`` (JSON Schema's dialect) to the ``regex`` module's syntax:
    ``$`` outside a class matches only at the very end (``\\Z``, not before a final newline),
    ``(?<name>`` becomes ``(?P<name>``, ``.`` excludes every ECMA LineTerminator (``\\r``,
    U+2028, U+2029 too), ``\\s``/``\\S`` are ECMA's Unicode white space (``\\S`` inside a class keeps
    the ASCII meaning). ``\\d``/``\\w``/``\\b`` are made ASCII by the caller's flag."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            escape = pattern[i:i + 2]
            if escape == "\\s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif escape == "\\S" and not in_class:
                out.append(f"[^{_ECMA_SPACE}]")
            else:
                out.append(escape)
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
        elif ch == "$":
            out.append("\\Z")
            i += 1
            continue
        elif ch == ".":
            out.append(_ECMA_DOT)
            i += 1
            continue
        elif pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


_PATTERNS: dict[str, Any] = {}
#: the compiled patterns kept hold at most this total weight (a heavy pattern is large compiled)
_CACHE_MAX_WEIGHT = 1_000_000
_patterns_weight = 0
#: what the patterns of one ``requestedSchema`` may add up to: characters, and weight (compiling
#: is roughly linear in the weight, and a schema may have thousands of properties)
MAX_SCHEMA_PATTERN_CHARS = 100_000
MAX_SCHEMA_PATTERN_WEIGHT = 200_000
#: patterns one ``requestedSchema`` may have (each is compiled: about a millisecond)
MAX_SCHEMA_PATTERNS = 256
#: options (enum values, titled options) one ``requestedSchema`` may have in all (4,096 fields of
#: 1,000 options each took 19 s to check)
MAX_SCHEMA_OPTIONS = 10_000
#: the most a pattern may expand to when compiled: its atoms, each counted once per repetition a
#: bounded quantifier (``{n}``, ``{n,m}``) around it asks for (the ``regex`` module expands those:
#: ``[a-z]{4294967294}`` would exhaust memory, ``(?:a{1000}){1000}`` takes half a second)
MAX_PATTERN_WEIGHT = 100_000
_BOUND = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def pattern_weight(pattern: str, limit: int = MAX_PATTERN_WEIGHT) -> int:
    """An upper estimate of what ``pattern`` expands to when compiled (see
    :data:`MAX_PATTERN_WEIGHT`): alternatives and a sequence add up, a bounded quantifier
    multiplies by its larger bound, ``*``/``+``/``?`` do not. Stops early, returning a value above
    ``limit``, once that is exceeded. Never raises; a malformed pattern is left to the compiler."""
    sums = [0]  # the running weight of each open group, innermost last
    last = 0  # the weight of the previous atom or group (what a quantifier repeats)
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        atom = 1
        if ch == "\\":
            j = i + 2
            if i + 1 < n and pattern[i + 1] in "pPNxuk" and j < n and pattern[j] in "{<":
                close = pattern.find("}" if pattern[j] == "{" else ">", j)
                j = n if close < 0 else close + 1
            i = j
        elif ch == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
        elif ch == "(":
            sums.append(0)
            last = 0
            i += 1
            continue
        elif ch == ")" and len(sums) > 1:
            atom = max(sums.pop(), 1)
            i += 1
        elif ch == "{" and last:
            m = _BOUND.match(pattern, i)
            if m is None or not (m.group(1) or m.group(2)):
                i += 1
            else:
                digits = [g for g in m.groups() if g]
                if any(len(g) > 9 for g in digits):
                    return limit + 1
                factor = max(int(g) for g in digits)
                sums[-1] += last * (factor - 1) if factor else 0
                last *= max(factor, 1)
                i = m.end()
                if sums[-1] > limit:
                    return limit + 1
                continue
        elif ch in "*+?":
            i += 1
            continue
        else:
            i += 1
        sums[-1] += atom
        last = atom
        if sums[-1] > limit:
            return limit + 1
    return sum(sums)


def compile_pattern(pattern: str, where: str = "pattern"):
    """Compile (and cache) an ECMA-262 pattern with the ``regex`` module.

    Raises:
        SchemaRefused: the pattern is not a regular expression the gate can enforce.
    """
    import regex

    global _patterns_weight
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        if len(pattern) > 10000:
            raise SchemaRefused(f"{where}: pattern is too long")
        weight = pattern_weight(pattern)
        if weight > MAX_PATTERN_WEIGHT:
            raise SchemaRefused(f"{where}: pattern repeats too much")
        try:
            compiled = regex.compile(ecma_to_python(pattern), flags=regex.ASCII | regex.V0)
        except (regex.error, RecursionError, OverflowError, ValueError, TypeError) as exc:
            raise SchemaRefused(f"{where}: pattern does not compile") from exc
        if len(_PATTERNS) > 1024 or _patterns_weight + weight > _CACHE_MAX_WEIGHT:
            _PATTERNS.clear()
            _patterns_weight = 0
        _PATTERNS[pattern] = compiled
        _patterns_weight += weight
    return compiled


def pattern_matches(pattern: str, value: str, timeout_s: float = PATTERN_TIMEOUT_S) -> bool:
    """ECMA-262 ``pattern`` semantics (unanchored search); False when it takes longer than
    ``timeout_s`` seconds (default :data:`PATTERN_TIMEOUT_S`; a server's catastrophic pattern
    never hangs a worker), or when ``timeout_s`` is not positive."""
    if timeout_s <= 0:
        return False
    try:
        return compile_pattern(pattern).search(value, timeout=timeout_s, concurrent=True) is not None
    except TimeoutError:
        return False


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


#: checked schemas kept (LRU), keyed by their exact JSON text; bounded in count, in the size of
#: one schema and in the total size of the schemas kept (their text; a few times that in objects)
CACHE_MAX_ENTRIES = 256
CACHE_MAX_KEY_CHARS = 16384
CACHE_MAX_TOTAL_CHARS = 1 << 20
#: nesting a cached schema may have (a deeper one is checked every time, as before the cache)
_CACHE_MAX_DEPTH = 32
_ATOM_TYPES = frozenset({str, int, float, bool, type(None)})
_cache: OrderedDict[str, tuple[CheckedSchema, str]] = OrderedDict()
_cache_lock = threading.Lock()
_cache_chars = 0


def _exact_key(schema: Any) -> str | None:
    """A text that identifies ``schema`` exactly -- key order, ``1`` vs ``1.0`` vs ``true`` --
    when it is plain JSON (``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``float``,
    ``bool``, ``None``, no subclass or tuple) at most :data:`_CACHE_MAX_DEPTH` deep; else ``None``.
    For such values ``json.dumps`` (unsorted) is injective, so equal keys mean equal schemas."""
    atoms = _ATOM_TYPES
    level = [schema]
    depth = 0
    while level:  # breadth first, one nesting level at a time
        depth += 1
        if depth > _CACHE_MAX_DEPTH:
            return None
        below: list[Any] = []
        for node in level:
            cls = type(node)
            if cls is dict:
                for k in node:
                    if type(k) is not str:
                        return None
                below.extend([v for v in node.values() if type(v) not in atoms])
            elif cls is list:
                below.extend([v for v in node if type(v) not in atoms])
            elif cls not in atoms:
                return None
        level = below
    try:
        return json.dumps(schema, ensure_ascii=False, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        return None


def _fresh(checked: CheckedSchema) -> CheckedSchema:
    """A copy of a cached :class:`CheckedSchema` that shares nothing mutable with it (what
    :func:`check_requested_schema` would have returned: each field's default is also the
    ``defaults`` value)."""
    fields = tuple(map(_fresh_field, checked.fields))
    defaults = {f.name: f.default for f in fields if f.has_default}
    return CheckedSchema(fields=fields, normalized=json_copy(checked.normalized), defaults=defaults)


def _fresh_field(f: Field) -> Field:
    copied = object.__new__(Field)  # a frozen dataclass: fill its __dict__ as __init__ would
    copied.__dict__.update(f.__dict__)
    copied.__dict__["constraints"] = dict(f.constraints)  # values are numbers, strings, booleans
    if f.has_default:
        copied.__dict__["default"] = json_copy(f.default)
    return copied


def check_requested_schema_cached(schema: Any, *, shared: bool = False) -> tuple[CheckedSchema, str | None]:
    """:func:`check_requested_schema` and :func:`ids.digest` of ``schema``, remembered for plain
    schemas in a bounded LRU (a round's schema is checked when it arrives, when it is shown and
    when it is answered).

    Returns a :class:`CheckedSchema` of its own (``shared=False``), or with ``shared=True`` the
    cached one -- for internal use only: it must not be handed out or mutated (answers validated
    against it reuse one compiled validator).

    The digest is ``None`` when computing it raised: the caller then calls :func:`ids.digest`
    itself (outside its handling of a refused schema), so that it raises where it always did.

    Raises:
        as :func:`check_requested_schema`.
    """
    key = _exact_key(schema)
    if key is not None:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
        if hit is not None:
            return (hit[0] if shared else _fresh(hit[0])), hit[1]
    checked = check_requested_schema(schema)
    try:
        schema_digest = digest(schema)
    except Exception:  # noqa: BLE001 -- the caller digests it again, raising as it always did
        return checked, None
    if key is not None and len(key) <= CACHE_MAX_KEY_CHARS:
        pristine = _fresh(checked)
        object.__setattr__(pristine, "_shared", True)
        global _cache_chars
        with _cache_lock:
            if key not in _cache:
                _cache_chars += len(key)
            _cache[key] = (pristine, schema_digest)
            _cache.move_to_end(key)
            while len(_cache) > CACHE_MAX_ENTRIES or _cache_chars > CACHE_MAX_TOTAL_CHARS:
                _cache_chars -= len(_cache.popitem(last=False)[0])
        if shared:
            return pristine, schema_digest
    return checked, schema_digest


_FORMAT_CHECKER = jsonschema.FormatChecker(formats=())
for _name, _fn in formats.CHECKERS.items():
    # ``format`` applies to strings only; another type is judged by ``type`` (the checkers expect str).
    _FORMAT_CHECKER.checks(_name)(lambda value, _fn=_fn: not isinstance(value, str) or _fn(value))


#: the message for a value that does not match its field's ``pattern`` (the card adds the pattern)
PATTERN_MESSAGE = "Enter a value in the requested pattern."


def _message(error: jsonschema.ValidationError, field: Field | None) -> str:
    v = error.validator
    val = error.validator_value
    if v == "type":
        return {"string": "Enter text.", "number": "Enter a number.", "integer": "Enter a whole number.",
                "boolean": "Choose yes or no.", "array": "Choose from the list."}.get(str(val), "Wrong type.")
    if v == "required":
        return "This field is required."
    if v == "minLength":
        return f"Enter at least {val} characters."
    if v == "maxLength":
        return f"Enter at most {val} characters."
    if v == "pattern":
        return PATTERN_MESSAGE
    if v == "format":
        return f"Enter {formats.DESCRIPTIONS.get(str(val), 'a valid value')}."
    if v == "minimum":
        return f"Enter a value of at least {val}."
    if v == "maximum":
        return f"Enter a value of at most {val}."
    if v == "exclusiveMinimum":
        return f"Enter a value greater than {val}."
    if v == "exclusiveMaximum":
        return f"Enter a value less than {val}."
    if v == "multipleOf":
        return f"Enter a multiple of {val}."
    if v == "enum":
        return "Choose one of the offered options."
    if v == "minItems":
        return f"Choose at least {val}."
    if v == "maxItems":
        return f"Choose at most {val}."
    if v == "uniqueItems":
        return "Choose each option once."
    if v == "additionalProperties":
        return "The answer has a field that was not asked for."
    return "This value is not accepted."


_ROOT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})
_FAST_KEYS = {
    "string": frozenset({"type", "minLength", "maxLength", "format", "enum"}),
    "integer": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "number": frozenset({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "boolean": frozenset({"type"}),
}
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _surely_valid(normalized: Any, filled: dict[str, Any]) -> bool:
    """True only if validating ``filled`` against ``normalized`` with jsonschema would find no
    error (the common answer of plain strings, numbers and booleans); False when it might find
    one, or when the schema or a value is of a shape this shortcut does not judge -- jsonschema
    then judges it, as always (so every error, message and order comes from it)."""
    try:
        if type(normalized) is not dict or normalized.keys() != _ROOT_KEYS or normalized["type"] != "object" or \
                normalized["additionalProperties"] is not False:
            return False
        properties, required = normalized["properties"], normalized["required"]
        if type(properties) is not dict or type(required) is not list:
            return False
        for name in required:
            if type(name) is not str or name not in filled:
                return False
        for name, value in filled.items():
            prop = properties.get(name)
            if type(prop) is not dict:
                return False
            kind = prop.get("type")
            allowed = _FAST_KEYS.get(kind) if type(kind) is str else None
            if allowed is None or not prop.keys() <= allowed:
                return False
            vtype = type(value)
            if kind == "string":
                if vtype is not str:
                    return False
                if "minLength" in prop and (type(prop["minLength"]) is not int or len(value) < prop["minLength"]):
                    return False
                if "maxLength" in prop and (type(prop["maxLength"]) is not int or len(value) > prop["maxLength"]):
                    return False
                if "enum" in prop:
                    enum = prop["enum"]
                    if type(enum) is not list or not all(type(e) is str for e in enum) or value not in enum:
                        return False
                if "format" in prop:
                    entry = _FORMAT_CHECKER.checkers.get(prop["format"]) if type(prop["format"]) is str else None
                    if entry is None or not entry[0](value):
                        return False
            elif kind == "boolean":
                if vtype is not bool:
                    return False
            else:
                if not (vtype is int or (kind == "number" and vtype is float and math.isfinite(value))):
                    return False
                for key in _BOUNDS:
                    if key in prop:
                        bound = prop[key]
                        if type(bound) not in (int, float) or not math.isfinite(bound):
                            return False
                        if (key == "minimum" and value < bound) or (key == "maximum" and value > bound) or \
                                (key == "exclusiveMinimum" and value <= bound) or \
                                (key == "exclusiveMaximum" and value >= bound):
                            return False
        return True
    except Exception:  # noqa: BLE001 -- anything odd: let jsonschema judge (and raise) as before
        return False


def validate_content(checked: CheckedSchema, content: Any) -> dict[str, Any]:
    """Fill defaults into ``content`` and validate it against ``checked.normalized``.

    Args:
        checked: the result of :func:`check_requested_schema`.
        content: the answer's ``content`` (``None`` means absent and counts as ``{}``).

    Returns:
        the default-filled content (a new dict).

    Raises:
        ContentMismatch: per-field messages for the person.
    """
    if content is None:
        content = {}
    if not isinstance(content, dict):
        raise ContentMismatch({"": ["The answer must be an object of fields."]})
    filled = dict(content)
    for name, default in checked.defaults.items():
        if name not in filled:
            filled[name] = copy.deepcopy(default)
    if _surely_valid(checked.normalized, filled):
        return _checked_patterns(checked, filled, {})
    errors: dict[str, list[str]] = {}
    declared = checked.normalized["properties"]
    for key in filled:
        if key not in declared:
            errors.setdefault("", []).append("The answer has a field that was not asked for.")
    by_name = {f.name: f for f in checked.fields}
    validator = checked.__dict__.get("_validator")
    if validator is None:
        validator = Draft202012Validator(checked.normalized, format_checker=_FORMAT_CHECKER)
        if checked.__dict__.get("_shared"):  # a cached, never mutated schema: compile once
            object.__setattr__(checked, "_validator", validator)
    try:
        found = list(validator.iter_errors(filled))
    except (RecursionError, re.error, TypeError, ValueError, OverflowError):
        raise ContentMismatch({"": ["The answer could not be checked."]}) from None
    for error in found:
        if error.validator == "additionalProperties":
            continue  # reported above, once
        if error.validator == "required":
            missing = [r for r in checked.normalized["required"] if r not in filled]
            for name in missing:
                errors.setdefault(name, []).append("This field is required.")
            continue
        path = [p for p in error.absolute_path]
        name = str(path[0]) if path else ""
        msg = _message(error, by_name.get(name))
        bucket = errors.setdefault(name, [])
        if msg not in bucket:
            bucket.append(msg)
    return _checked_patterns(checked, filled, errors)


def _checked_patterns(checked: CheckedSchema, filled: dict[str, Any], errors: dict[str, list[str]]) -> dict[str, Any]:
    """Check the ``pattern`` constraints (ECMA-262, each within :data:`PATTERN_TIMEOUT_S`, all
    within :data:`PATTERN_BUDGET_S`; one not decided in time fails), then raise the errors if any."""
    deadline = time.monotonic() + PATTERN_BUDGET_S
    for spec in checked.fields:
        pattern = spec.constraints.get("pattern")
        value = filled.get(spec.name)
        if pattern is not None and isinstance(value, str) and \
                not pattern_matches(pattern, value, min(PATTERN_TIMEOUT_S, deadline - time.monotonic())):
            bucket = errors.setdefault(spec.name, [])
            if PATTERN_MESSAGE not in bucket:
                bucket.append(PATTERN_MESSAGE)
    if errors:
        raise ContentMismatch(errors)
    return filled
