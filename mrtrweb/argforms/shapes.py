"""A tool's ``inputSchema`` read into a tree of :class:`Node` the form generator renders (no Django).

What is read: objects (``properties``, ``required``), arrays (``items``), the scalar types with
their bounds, ``enum`` / ``const`` and ``oneOf``/``anyOf`` of ``const`` with titles (a choice),
``anyOf``/``oneOf``/``type`` lists with ``null`` (nullable), ``anyOf``/``oneOf`` of objects (a
choice of variants), an ``allOf`` of one schema, and ``$ref`` to a pointer inside the document
(``#``, ``#/$defs/...``, ``#/definitions/...``). A part that is valid but has no fields of its own
(any value, a map with ``additionalProperties``, a mix of scalar types, a tuple) is a ``json``
node: one JSON value typed by the person.

:class:`Unsupported` (with a stable ``code``) when the schema cannot be expressed as fields:
a ``$ref`` outside the document (never fetched) or not resolvable, a reference cycle, nesting
deeper than :data:`MAX_DEPTH`, more than :data:`MAX_NODES` nodes or :data:`MAX_REF_HOPS`
references in a row, keywords that combine schemas (``not``, ``if``, ``allOf`` of several,
``patternProperties``, ``dependentSchemas``, ``unevaluatedProperties``...), or a root that is not
an object. Nothing here recurses deeper than :data:`MAX_DEPTH` levels.
"""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.parse
from typing import Any

#: nesting levels of objects and arrays the form shows (a deeper schema gets the JSON box)
MAX_DEPTH = 8
#: schema nodes read for one form (references expanded each time they are used)
MAX_NODES = 400
#: ``$ref`` followed one after another before a schema is reached
MAX_REF_HOPS = 16
#: variants of a choice, options of an enum
MAX_VARIANTS = 12
MAX_OPTIONS = 200
#: characters of the JSON box's starting text built from a schema
MAX_TEMPLATE_CHARS = 20_000

#: code -> why (English, for logs)
CODES = {
    "ref_outside": "a $ref outside the document (never fetched)",
    "ref_unresolvable": "a $ref that points nowhere in the document",
    "ref_cycle": "a $ref that refers back to itself (a recursive schema)",
    "too_deep": "nested too deeply for fields",
    "too_large": "too large for fields",
    "combinator": "keywords that combine schemas (not, if, allOf, patternProperties...)",
    "root_not_object": "the arguments are not an object",
    "not_schema": "a part of it is not a schema",
    "no_fields": "it has no part fields can show (only JSON values)",
    "dialect_nested": "a $schema or $id inside it (another dialect or base)",
}

_SCALARS = ("string", "integer", "number", "boolean")
_COMBINATORS = ("not", "if", "then", "else", "patternProperties", "dependentSchemas", "dependentRequired",
                "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "propertyNames",
                "contains", "dependencies")
_CONSTRAINTS = ("minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems")
_ANNOTATIONS = ("title", "description", "default", "examples", "$comment", "$schema", "$id", "$defs",
                "definitions", "$anchor", "deprecated", "readOnly", "writeOnly")


class Unsupported(ValueError):
    """The schema cannot be shown as fields; ``code`` is one of :data:`CODES`."""

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(f"{code}: {CODES[code]}")


@dataclasses.dataclass
class Node:
    """One part of the arguments. ``kind``: ``object``, ``array``, ``string``, ``integer``,
    ``number``, ``boolean``, ``enum`` (``options``: (value, title or None)), ``choice``
    (``variants``: object nodes, one chosen), ``json`` (any JSON value; ``example`` its start)."""

    kind: str
    title: str | None = None
    description: str | None = None
    default: Any = None
    has_default: bool = False
    nullable: bool = False
    constraints: dict[str, Any] = dataclasses.field(default_factory=dict)
    properties: list[tuple[str, Node, bool]] = dataclasses.field(default_factory=list)
    item: Node | None = None
    options: list[tuple[Any, str | None]] = dataclasses.field(default_factory=list)
    variants: list[Node] = dataclasses.field(default_factory=list)
    example: Any = None


class _Reader:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.nodes = 0

    def deref(self, schema: Any, refs: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        """``schema`` with its ``$ref`` chain followed (siblings of a ``$ref`` kept over the target)."""
        hops = 0
        while isinstance(schema, dict) and "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise Unsupported("ref_outside")
            if ref in refs:
                raise Unsupported("ref_cycle")
            hops += 1
            if hops > MAX_REF_HOPS:
                raise Unsupported("too_deep")
            target = resolve_pointer(self.root, ref)
            refs = refs + (ref,)
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **siblings} if isinstance(target, dict) and siblings else target
        return schema, refs

    def read(self, schema: Any, depth: int, refs: tuple[str, ...] = ()) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise Unsupported("too_large")
        if depth > MAX_DEPTH:
            raise Unsupported("too_deep")
        schema, refs = self.deref(schema, refs)
        if schema is True:
            return Node("json")
        if not isinstance(schema, dict):
            raise Unsupported("not_schema")
        if any(k in schema for k in _COMBINATORS):
            raise Unsupported("combinator")
        if depth > 0 and ("$schema" in schema or "$id" in schema):
            raise Unsupported("dialect_nested")  # another dialect or base URI inside: not read here
        all_of = schema.get("allOf")
        if all_of is not None:
            if not isinstance(all_of, list) or len(all_of) != 1:
                raise Unsupported("combinator")
            inner, refs = self.deref(all_of[0], refs)
            if not isinstance(inner, dict):
                raise Unsupported("not_schema")
            schema = {**inner, **{k: v for k, v in schema.items() if k != "allOf"}}
        node = self._shape(schema, depth, refs)
        node.title = _text(schema.get("title")) or node.title
        node.description = _text(schema.get("description")) or node.description
        if "default" in schema:
            node.default, node.has_default = schema["default"], True
        if node.kind == "json" and node.example is None:
            node.example = template_value(self.root, schema)
        return node

    def _shape(self, schema: dict[str, Any], depth: int, refs: tuple[str, ...]) -> Node:
        variants = schema.get("anyOf", schema.get("oneOf"))
        if variants is not None:
            return self._variants(schema, variants, depth, refs)
        if "const" in schema:
            return Node("enum", options=[(schema["const"], None)])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values or len(values) > MAX_OPTIONS:
                return Node("json")
            nullable = None in values
            options = [(v, None) for v in values if v is not None]
            return Node("enum", options=options, nullable=nullable) if options else Node("json")
        types = schema.get("type")
        nullable = False
        if isinstance(types, list):
            nullable = "null" in types
            types = [t for t in types if t != "null"]
            types = types[0] if len(types) == 1 else None if not types else "mixed"
        if types is None and ("properties" in schema or "required" in schema):
            types = "object"
        constraints = _constraints(schema)
        if types == "object":
            node = self._object(schema, depth, refs)
        elif types == "array":
            items = schema.get("items")
            if not isinstance(items, dict | bool) or "prefixItems" in schema or items is False:
                node = Node("json")
            else:
                node = Node("array", item=self.read(items if items is not None else True, depth + 1, refs))
        elif types in _SCALARS:
            node = Node(types)
        else:
            node = Node("json")
        node.nullable = node.nullable or nullable
        node.constraints = constraints
        return node

    def _object(self, schema: dict[str, Any], depth: int, refs: tuple[str, ...]) -> Node:
        props = schema.get("properties")
        closed = schema.get("additionalProperties") is False
        if not isinstance(props, dict) or (not props and not closed):
            return Node("json")  # a map (additionalProperties) or any object: one JSON value
        required = _names(schema.get("required"))
        node = Node("object")
        for name, sub in props.items():
            node.properties.append((name, self.read(sub, depth + 1, refs), name in required))
        return node

    def _variants(self, schema: dict[str, Any], variants: Any, depth: int, refs: tuple[str, ...]) -> Node:
        if not isinstance(variants, list) or not variants or len(variants) > MAX_VARIANTS:
            raise Unsupported("not_schema")
        others = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf") and k not in _ANNOTATIONS}
        if others or ("anyOf" in schema and "oneOf" in schema):
            raise Unsupported("combinator")  # variants beside their own keywords: not mergeable here
        resolved = []
        nullable = False
        for v in variants:
            target, sub_refs = self.deref(v, refs)
            if isinstance(target, dict) and (target.get("type") == "null" or target.get("const", 0) is None):
                nullable = True
            else:
                resolved.append((v, target))
        if not resolved:
            return Node("json")
        if len(resolved) == 1:
            node = self.read(resolved[0][0], depth, refs)
            node.nullable = node.nullable or nullable
            return node
        if all(isinstance(t, dict) and "const" in t for _, t in resolved):  # a choice with titles
            return Node("enum", nullable=nullable, options=[(t["const"], _text(t.get("title"))) for _, t in resolved])
        read = [self.read(v, depth, refs) for v, _ in resolved]
        if all(n.kind == "object" for n in read):
            return Node("choice", variants=read, nullable=nullable)
        return Node("json", nullable=nullable)


_COUNTS = ("minLength", "maxLength", "minItems", "maxItems")


def _constraints(schema: dict[str, Any]) -> dict[str, Any]:
    """The bounds of ``schema`` the fields and their hints use, each of its keyword's type (a count
    a non-negative integer, a bound a finite number, ``format``/``pattern`` a string): a server's
    ``"format": [1]`` or ``"minimum": {}`` is left to the schema check, never shown or applied."""
    out: dict[str, Any] = {}
    for key in _CONSTRAINTS:
        value = schema.get(key)
        if key in _COUNTS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif key in ("format", "pattern"):
            ok = isinstance(value, str)
        elif key == "uniqueItems":
            ok = isinstance(value, bool)
        else:
            ok = (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and math.isfinite(value))  # math.isfinite(10**400) raises
        if ok:
            out[key] = value
    return out


def _names(required: Any) -> set[str]:
    """A schema's ``required`` as a set (a list of 50,000 names is looked up once per property)."""
    return {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def resolve_pointer(root: Any, ref: str) -> Any:
    """The value at the JSON pointer fragment ``ref`` (``#`` or ``#/a/b``) inside ``root``.

    Raises:
        Unsupported: ``ref_outside`` (an anchor such as ``#foo``), ``ref_unresolvable``.
    """
    fragment = urllib.parse.unquote(ref[1:])
    if fragment == "":
        return root
    if not fragment.startswith("/"):
        raise Unsupported("ref_outside")  # a named anchor: not followed here
    node = root
    for part in fragment[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise Unsupported("ref_unresolvable")
    return node


def read_schema(schema: Any) -> Node:
    """The tool's ``inputSchema`` as an object :class:`Node` (its properties the form's fields).

    Raises:
        Unsupported: see the module's docstring.
    """
    if not isinstance(schema, dict):
        raise Unsupported("root_not_object")
    node = _Reader(schema).read(schema, 0)
    if node.kind != "object" or node.nullable:
        raise Unsupported("root_not_object")
    if not _has_field(node):
        raise Unsupported("no_fields")  # a page of JSON values only: the JSON box says it better
    return node


def _has_field(node: Node) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.kind not in ("object", "array", "choice", "json"):
            return True
        stack.extend(sub for _name, sub, _r in n.properties)
        stack.extend(n.variants)
        if n.item is not None:
            stack.append(n.item)
    return False


def template_value(root: Any, schema: Any, depth: int = 0, refs: tuple[str, ...] = (), budget: list[int] | None = None,
                   ) -> Any:
    """A starting value for ``schema``: its default, else for an object its required properties
    (and those with a default), for an array ``[]``, a scalar's zero value, an enum's first
    value. Local references followed; a cycle, an outside reference or a deep part gives ``None``
    there (the box is the person's to complete)."""
    budget = budget if budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH or not isinstance(root, dict):
        return None
    try:
        schema, refs = _Reader(root).deref(schema, refs)
    except Unsupported:
        return None
    if not isinstance(schema, dict):
        return None
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            firsts = [s for s in schema[key] if not (isinstance(s, dict) and s.get("type") == "null")]
            if firsts:
                return template_value(root, firsts[0], depth + 1, refs, budget)
            return None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((t for t in kind if t != "null"), None)
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), dict)):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = _names(schema.get("required"))
        out = {}
        for name, sub in props.items():
            if budget[0] < 0:
                break  # the budget is spent: the rest is the person's to write
            if name in required or (isinstance(sub, dict) and "default" in sub):
                out[name] = template_value(root, sub, depth + 1, refs, budget)
        return out
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False}.get(kind)


def template_for(schema: Any) -> str:
    """The JSON box's starting text for a tool's ``inputSchema`` (:func:`template_value`, indented),
    ``{}`` when that is not an object or is longer than :data:`MAX_TEMPLATE_CHARS`."""
    value = template_value(schema, schema) if isinstance(schema, dict) else None
    if not isinstance(value, dict):
        return "{}"
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return "{}"
    return text if len(text) <= MAX_TEMPLATE_CHARS else "{}"
