"""The Django field of one leaf :class:`~.shapes.Node` (a scalar, an enum, a list of enum values,
or one JSON value), its label and help bounded by the page's budget and escaped (server text)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from ..consent import fieldhints
from ..consent.forms import option_key, stand_in_keys
from ..text import display, results
from .shapes import Node

NO_VALUE = ""


class BooleanSelect(forms.NullBooleanSelect):
    """true, false, or not given ("—"): an optional boolean a checkbox could not leave out."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.choices = [(NO_VALUE, "—"), ("true", _("true")), ("false", _("false"))]

    def format_value(self, value: Any) -> Any:
        shown = super().format_value(value)
        return [NO_VALUE if shown == "unknown" else shown]  # a list: Select matches options by membership


class JsonValueField(forms.CharField):
    """One JSON value typed by the person (a part the form has no fields for); empty: not given."""

    widget = forms.Textarea

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("strip", False)
        super().__init__(**kwargs)
        self.widget.attrs.setdefault("rows", 3)
        self.widget.attrs["class"] = "json-value"

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text.strip() == "":
            return NO_VALUE

        def refuse_constant(name: str) -> Any:
            raise ValueError(name)

        try:
            parsed = json.loads(text, parse_constant=refuse_constant)
            json.dumps(parsed, allow_nan=False)
        except (ValueError, RecursionError):
            raise forms.ValidationError(_("Enter valid JSON."), code="invalid_json") from None
        return parsed

    def prepare_value(self, value: Any) -> Any:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def is_leaf(node: Node) -> bool:
    return node.kind not in ("object", "array", "choice") or (
        node.kind == "array" and node.item is not None and node.item.kind == "enum" and not node.item.nullable)


def option_map(node: Node) -> dict[str, Any]:
    """An enum's option keys (as the page posts them) -> their JSON values."""
    keys = stand_in_keys([option_key(v) for v, _t in node.options])
    return {keys[option_key(v)]: v for v, _t in node.options}


def make_field(node: Node, name: str, budget: results.ShownBudget, required: bool) -> forms.Field:
    """The field of a leaf ``node`` named ``name`` (its label, when untitled). Never ``required``
    for Django: the form checks requiredness where the part is given (a required field of an
    optional object left empty is not an error), and marks it (``marked_required``)."""
    label = display.html(budget.label(node.title or name))
    c = node.constraints
    common: dict[str, Any] = {"label": label, "required": False}
    field: forms.Field
    if node.kind == "boolean":
        field = forms.NullBooleanField(widget=BooleanSelect(), **common)
    elif node.kind == "enum" or (node.kind == "array" and node.item is not None and node.item.kind == "enum"):
        source = node if node.kind == "enum" else node.item
        assert source is not None
        keys = stand_in_keys([option_key(v) for v, _t in source.options])
        choices = [(keys[option_key(v)], display.html(budget.label(t if t else option_key(v))))
                   for v, t in source.options]
        if node.kind == "array":
            field = forms.MultipleChoiceField(choices=choices, widget=forms.CheckboxSelectMultiple, **common)
        else:
            field = forms.ChoiceField(choices=[(NO_VALUE, "—")] + choices, **common)
    elif node.kind in ("integer", "number"):
        kwargs = dict(common)
        if isinstance(c.get("minimum"), int | float) and not isinstance(c.get("minimum"), bool):
            kwargs["min_value"] = c["minimum"]
        if isinstance(c.get("maximum"), int | float) and not isinstance(c.get("maximum"), bool):
            kwargs["max_value"] = c["maximum"]
        field = forms.IntegerField(**kwargs) if node.kind == "integer" else forms.FloatField(**kwargs)
        if node.kind == "number":
            field.widget.attrs["step"] = "any"
    elif node.kind == "string":
        kwargs = dict(common, strip=False)
        for key, arg in (("minLength", "min_length"), ("maxLength", "max_length")):
            if isinstance(c.get(key), int) and not isinstance(c.get(key), bool) and c[key] >= 0:
                kwargs[arg] = c[key]
        fmt = c.get("format")
        kwargs["widget"] = (forms.EmailInput() if fmt == "email" else forms.URLInput() if fmt == "uri" else
                            forms.DateInput(attrs={"type": "date"}) if fmt == "date" else forms.TextInput())
        field = forms.CharField(**kwargs)
    else:
        field = JsonValueField(**common)
    description = budget.description(node.description) if node.description else ""
    parts = [description] if description else []
    hints = [str(h) for h in fieldhints.bound_hints(c, str(description))] if node.kind != "array" else []
    if node.kind == "json":
        hints.insert(0, str(_("a JSON value")))
    if hints:
        parts.append("(" + "; ".join(hints) + ")")
    field.help_text = display.html(" ".join(parts), multiline=True)
    field.marked_required = required  # type: ignore[attr-defined]
    if required:
        field.widget.attrs["aria-required"] = "true"
    return field


def initial_of(node: Node, value: Any) -> Any:
    """A JSON value as the leaf field of ``node`` shows it (None: nothing to show)."""
    if display.has_hidden(value):
        return None  # a box cannot show markers: a value holding hidden characters is not filled in
    if node.kind == "enum":
        keys = {option_key(v): k for k, v in option_map(node).items()}
        return keys.get(option_key(value))
    if node.kind == "array" and node.item is not None and isinstance(value, list):
        keys = {option_key(v): k for k, v in option_map(node.item).items()}
        return [keys[option_key(v)] for v in value if option_key(v) in keys]
    if node.kind == "boolean":
        return value if isinstance(value, bool) else None
    if node.kind == "json":
        return json.dumps(value, ensure_ascii=False, indent=1)
    if node.kind in ("integer", "number", "string"):
        return value if isinstance(value, int | float | str) and not isinstance(value, bool) else None
    return None


def leaf_value(node: Node, cleaned: Any) -> tuple[bool, Any]:
    """(given, the JSON value) of a leaf's cleaned value: empty means not given."""
    if cleaned is None or cleaned == NO_VALUE or (node.kind == "array" and not cleaned):
        return False, None
    if node.kind == "enum":
        return True, option_map(node)[cleaned]
    if node.kind == "array" and node.item is not None:
        mapping = option_map(node.item)
        return True, [mapping[k] for k in cleaned]
    if node.kind == "number" and isinstance(cleaned, float) and cleaned.is_integer() and abs(cleaned) < 2 ** 53:
        return True, int(cleaned)
    return True, cleaned
