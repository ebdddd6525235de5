"""Validating a person's answer against a checked ``requestedSchema`` (mrtr-gate.md §2 row
``input_response_schema_mismatch``): defaults filled in, then the normalized schema's rules with
real format checks (``jsonschema``, or a shortcut for the plain answers that surely pass), then
the ECMA-262 patterns within a time budget; every error a message for the person
(:data:`PATTERN_MESSAGE`, :func:`_message`: the gate's stable English wording).
"""

from __future__ import annotations

import copy
import math
import re
import time
from typing import TYPE_CHECKING, Any

import jsonschema
from jsonschema import Draft202012Validator

from . import formats
from .codes import ContentMismatch
from .patterns import PATTERN_TIMEOUT_S, pattern_matches

if TYPE_CHECKING:
    from .schema import CheckedSchema, Field


#: seconds all the ``pattern`` checks of one answer may take together (thousands of fields, each
#: with a slow pattern, must not hold a worker for minutes): a field not checked in time is refused
PATTERN_BUDGET_S = 1.0


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
