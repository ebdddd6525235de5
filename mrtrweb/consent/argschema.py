"""Checking tool arguments against a server's ``inputSchema`` (the JSON editor's check), bounded.

The schema comes from the server, so this check is built so that it **never opens a URL or a file**
and **never runs unbounded**:

* ``$ref`` / ``$dynamicRef`` / ``$recursiveRef`` resolve only inside the schema itself and against
  the JSON Schema metaschemas bundled with ``jsonschema`` (a ``referencing.Registry`` whose
  ``retrieve`` refuses every URI: ``http(s)://``, ``file://``, ``urn:``... are never opened);
* ``$schema`` only picks one of the dialects ``jsonschema`` ships (an unknown one, never looked up,
  means 2020-12, as an absent one); a dialect change *inside* the schema to another shipped dialect
  is refused (it would leave the bounded keywords);
* the schema is surveyed without recursion first: at most :data:`MAX_DEPTH` levels and
  :data:`MAX_NODES` values, every ``pattern`` / ``patternProperties`` key must compile;
* ``pattern``, ``patternProperties`` and ``additionalProperties`` match with the ``regex`` module
  (ECMA-262 dialect, as the gate; the GIL released) under a timeout, ``uniqueItems`` is linear, and
  every keyword application checks one deadline of :data:`CHECK_TIMEOUT_S` for the whole check.

:func:`check_arguments` returns the errors or raises :class:`SchemaUnchecked` with a stable
``code``; it does not import Django (the form in :mod:`mrtrweb.consent.forms` turns both into messages).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import jsonschema
import referencing
import referencing.exceptions

from ..gate.ids import canonical_json
from ..gate.schema import SchemaRefused, compile_pattern

#: nesting levels a tool's input schema may have (a deeper one is not checked: ``schema_too_deep``)
MAX_DEPTH = 64
#: JSON values (objects, arrays, atoms) a tool's input schema may hold (``schema_too_large``)
MAX_NODES = 50_000
#: nesting levels the arguments themselves may have
MAX_ARGUMENT_DEPTH = 100
#: seconds the whole check of one set of arguments may take (``check_timeout``)
CHECK_TIMEOUT_S = 1.0

#: code -> what the person is told (English; the form translates its own wording)
CODES = {
    "schema_too_deep": "it is nested too deeply",
    "schema_too_large": "it is too large",
    "schema_ref_outside": "it refers to a document outside itself, which is never fetched",
    "schema_dialect_nested": "it changes its JSON Schema dialect ($schema) inside itself",
    "schema_pattern_invalid": "one of its patterns is not a regular expression that can be checked",
    "schema_unsupported": "it combines unevaluatedProperties with patternProperties",
    "check_timeout": "checking the arguments against it took too long",
}


logger = logging.getLogger("mrtrweb.argschema")


class SchemaUnchecked(ValueError):
    """The arguments cannot be checked against this schema within the bounds.

    Attributes:
        code: one of :data:`CODES` (stable, for logs and tests).
    """

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(f"{code}: {CODES[code]}")


class _Deadline(Exception):
    """Internal: the check's deadline passed."""


def _refuse(uri: str) -> referencing.Resource:
    """The registry's ``retrieve``: nothing outside the schema is ever fetched."""
    raise referencing.exceptions.NoSuchResource(ref=uri)


_REGISTRY: referencing.Registry = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]
_local = threading.local()


def _tick() -> None:
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise _Deadline


def _search(pattern: str, value: str) -> bool:
    """ECMA-262 unanchored search within what is left of the deadline."""
    deadline = getattr(_local, "deadline", None)
    remaining = CHECK_TIMEOUT_S if deadline is None else deadline - time.monotonic()
    if remaining <= 0:
        raise _Deadline
    try:
        return compile_pattern(pattern).search(value, timeout=remaining, concurrent=True) is not None
    except TimeoutError:
        raise _Deadline from None
    except SchemaRefused:  # surveyed before; a pattern reached only through a metaschema
        raise SchemaUnchecked("schema_pattern_invalid") from None


def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and isinstance(patrn, str) and not _search(patrn, instance):
        yield jsonschema.ValidationError(f"the value does not match the pattern {patrn!r}")


def _pattern_properties(validator: Any, pp: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pp.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        yield jsonschema.ValidationError("Additional properties are not allowed (%s unexpected)"
                                         % ", ".join(repr(e) for e in sorted(extras, key=str)))


def _unique_items(validator: Any, ui: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    """``uniqueItems`` in linear time (jsonschema compares objects pairwise: quadratic), with
    JSON equality: ``1`` equals ``1.0``, ``true`` does not equal ``1``, key order does not matter."""
    if not ui or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for item in instance:
        key = canonical_json(item)
        if key in seen:
            yield jsonschema.ValidationError("the array has non-unique elements")
            return
        seen.add(key)


def _ticking(fn: Any) -> Any:
    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _tick()
        return fn(validator, value, instance, schema)

    keyword.__name__ = getattr(fn, "__name__", "keyword")
    return keyword


_BOUNDED: dict[type, type] = {}
_bounded_lock = threading.Lock()


def _bounded(cls: type) -> type:
    """``cls`` (a stock ``jsonschema`` validator class) with bounded regex keywords and a deadline
    check on every keyword application."""
    with _bounded_lock:
        out = _BOUNDED.get(cls)
        if out is None:
            replaced = {"pattern": _pattern, "patternProperties": _pattern_properties,
                        "additionalProperties": _additional_properties, "uniqueItems": _unique_items}
            keywords = {k: _ticking(replaced.get(k, fn)) for k, fn in cls.VALIDATORS.items()}  # type: ignore[attr-defined]
            out = _BOUNDED[cls] = jsonschema.validators.extend(cls, validators=keywords)
        return out


def _survey(schema: Any) -> tuple[bool, bool, list[Any]]:
    """Walk ``schema`` without recursion; bound its depth and size; compile its patterns.

    Returns:
        (has ``patternProperties``, has ``unevaluatedProperties``, the ``$schema`` values found
        below the root).

    Raises:
        SchemaUnchecked: ``schema_too_deep``, ``schema_too_large``, ``schema_pattern_invalid``.
    """
    nodes = 0
    has_pp = has_up = False
    nested_dialects: list[Any] = []
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise SchemaUnchecked("schema_too_large")
        if depth > MAX_DEPTH:
            raise SchemaUnchecked("schema_too_deep")
        if isinstance(node, dict):
            if depth > 1 and "$schema" in node:
                nested_dialects.append(node["$schema"])
            pattern = node.get("pattern")
            patterns = [pattern] if isinstance(pattern, str) else []
            pp = node.get("patternProperties")
            if isinstance(pp, dict):
                has_pp = True
                patterns.extend(pp)
            has_up = has_up or "unevaluatedProperties" in node
            for p in patterns:
                try:
                    compile_pattern(p)
                except SchemaRefused:
                    raise SchemaUnchecked("schema_pattern_invalid") from None
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return has_pp, has_up, nested_dialects


def _depth_within(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return True


def arguments_too_deep(value: Any) -> bool:
    """True when the arguments nest deeper than :data:`MAX_ARGUMENT_DEPTH` (checked without recursion)."""
    return not _depth_within(value, MAX_ARGUMENT_DEPTH)


def check_arguments(schema: Any, value: Any) -> list[jsonschema.ValidationError]:
    """Validate ``value`` (the arguments, a JSON object) against ``schema`` (a tool's ``inputSchema``).

    Returns:
        the validation errors, ordered by their path (empty: the arguments match). A schema that
        is not a valid JSON Schema of its dialect (a keyword jsonschema cannot apply: an unknown
        ``type``, ``"required": true``...) gives no errors: the server judges.

    Raises:
        SchemaUnchecked: the schema cannot be applied within the bounds (see :data:`CODES`):
            nothing a server names is ever fetched, and the check ends within about
            :data:`CHECK_TIMEOUT_S` seconds.
    """
    if not isinstance(schema, dict):
        return []
    has_pp, has_up, nested = _survey(schema)
    if has_pp and has_up:
        raise SchemaUnchecked("schema_unsupported")
    # a lookup among the bundled dialects, never a fetch; an unknown (or absent) $schema: 2020-12
    # ($schema not a string -- 5, a list -- is no dialect: jsonschema would fail parsing it as a URI)
    dialect = schema.get("$schema")
    cls: Any = jsonschema.validators.validator_for({"$schema": dialect} if isinstance(dialect, str) else {},
                                                   default=jsonschema.Draft202012Validator)
    if any(jsonschema.validators.validator_for({"$schema": d}, default=None) is not None
           for d in nested if isinstance(d, str)):
        raise SchemaUnchecked("schema_dialect_nested")  # it would switch to the stock (unbounded) keywords
    # The dialect is chosen: drop the root's $schema, or a "$ref": "#" would switch to the stock class.
    root = {k: v for k, v in schema.items() if k != "$schema"}
    # No check_schema: validating a schema against its metaschema runs the stock (unbounded)
    # keywords and took 1.8 s for 20,000 nodes. A malformed keyword shows while validating instead.
    _local.deadline = time.monotonic() + CHECK_TIMEOUT_S
    try:
        validator = _bounded(cls)(root, registry=_REGISTRY)
        return sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    except _Deadline:
        raise SchemaUnchecked("check_timeout") from None
    except referencing.exceptions.Unresolvable:
        raise SchemaUnchecked("schema_ref_outside") from None
    except RecursionError:
        raise SchemaUnchecked("schema_too_deep") from None
    except SchemaUnchecked:
        raise
    except Exception as exc:  # noqa: BLE001 -- e.g. an unknown "type" name, "required": true
        logger.info("tool arguments left to the server: its inputSchema is not a valid schema (%s)",
                    type(exc).__name__)
        return []  # not a valid schema of its dialect: the server judges the arguments, as before
    finally:
        _local.deadline = None
