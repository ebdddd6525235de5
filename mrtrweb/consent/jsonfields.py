"""A JSON form field for admin and settings forms that turns any bad input into a form error.

Django's ``forms.JSONField`` catches ``json.JSONDecodeError`` only: a 5,000-deep array makes
``json.loads`` raise ``RecursionError`` (a 500), on validation and again when the bound form is
rendered (``bound_data``, ``has_changed``). :class:`BoundedJSONField` measures the nesting of the
text before parsing it (no recursion) and refuses more than ``max_depth`` levels with the error
code ``too_deep``; a value holding a lone surrogate (``"\\ud800"``: valid JSON, but no UTF-8 page,
database or server can carry it) is refused with the code ``surrogate``; whatever still fails to
parse or to encode is an ``invalid`` form error.
"""

from __future__ import annotations

import json
from typing import Any

import regex
from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput
from django.utils.translation import gettext_lazy as _

#: nesting levels (arrays and objects) a configured JSON value may have
MAX_CONFIG_JSON_DEPTH = 32

_STRINGS = regex.compile(r'"(?:[^"\\]|\\.)*+"', regex.DOTALL)
_BRACKETS = regex.compile(r"[\[\]{}]")
_SURROGATE = regex.compile(r"[\ud800-\udfff]")


def text_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON ``text``, brackets inside strings not counted
    (the brackets after an unterminated quote are counted: such text fails to parse anyway).
    Iterative: any depth, linear in ``len(text)``."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(_STRINGS.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
    return deepest


def value_depth(value: Any) -> int:
    """The nesting depth of a parsed JSON value (lists and dicts), iteratively."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def has_lone_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a lone surrogate in any string (key or value), iteratively."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class BoundedJSONField(forms.JSONField):
    """``forms.JSONField`` whose every failure is a form error (codes ``invalid``, ``too_deep``,
    ``surrogate``)."""

    default_error_messages = {
        "too_deep": _("This JSON nests deeper than %(max)s levels."),
        "surrogate": _("This JSON holds a lone surrogate (\\ud800-\\udfff), which is not text."),
    }

    def __init__(self, *args: Any, max_depth: int = MAX_CONFIG_JSON_DEPTH, **kwargs: Any) -> None:
        self.max_depth = max_depth
        super().__init__(*args, **kwargs)

    def _too_deep(self, value: Any) -> bool:
        return isinstance(value, str) and text_depth(value) > self.max_depth

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if self._too_deep(value) or (not isinstance(value, str) and value_depth(value) > self.max_depth):
            raise ValidationError(self.error_messages["too_deep"], code="too_deep",
                                  params={"max": self.max_depth})
        try:
            parsed = super().to_python(value)
        except (RecursionError, ValueError):
            raise ValidationError(self.error_messages["invalid"], code="invalid", params={"value": ""}) from None
        if has_lone_surrogate(parsed):
            raise ValidationError(self.error_messages["surrogate"], code="surrogate")
        return parsed

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled:
            return initial
        if data is None:
            return None
        if self._too_deep(data):
            return InvalidJSONInput(data)
        try:
            bound = super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return InvalidJSONInput(data)
        # shown again as typed (its escapes kept), never re-dumped with the raw surrogate
        return InvalidJSONInput(data) if has_lone_surrogate(bound) else bound

    def prepare_value(self, value: Any) -> Any:
        try:
            prepared = super().prepare_value(value)
        except (RecursionError, ValueError, TypeError):
            return ""
        if isinstance(prepared, str) and _SURROGATE.search(prepared):
            # a stored value with a lone surrogate: shown with ASCII escapes, so the page encodes
            try:
                return json.dumps(value, ensure_ascii=True, cls=self.encoder)
            except (RecursionError, ValueError, TypeError):
                return ""
        return prepared

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return super().has_changed(initial, data)
        except (RecursionError, ValueError, TypeError):
            return True


def bounded_json_overrides() -> dict[Any, dict[str, Any]]:
    """``ModelAdmin.formfield_overrides`` making every model ``JSONField`` a :class:`BoundedJSONField`."""
    from django.db import models

    return {models.JSONField: {"form_class": BoundedJSONField}}
