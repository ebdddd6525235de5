""":class:`NestedArgumentsForm`: a tool's arguments as generated fields (see the package docstring).

Field names are paths: a property by its name (a name that is not a plain word, or is long, by
``~<position>``), an array row by its index, an object variant by ``~v<n>``, joined by ``.``
(``entities.0.observations.1``). Controls beside the fields: ``<path>.__rows`` (a hidden row
count), ``<path>.__null`` (send ``null``), ``<path>.__variant`` (the chosen variant).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django import forms
from django.forms.utils import ErrorDict
from django.utils.datastructures import MultiValueDict
from django.utils.translation import gettext, gettext_lazy as _

from ..consent import argschema, fieldhints
from ..consent.forms import LONE_SURROGATE_MESSAGE, has_lone_surrogate
from ..text import display, results
from .fields import initial_of, is_leaf, leaf_value, make_field, NO_VALUE
from .shapes import Node, Unsupported

logger = logging.getLogger("mrtrweb.argforms")

#: the POST key of "Add a row" / "Remove" (with the form's prefix): ``add:<path>``, ``remove:<path>:<i>``
#: (a property named so is keyed by a stand-in, as every name beginning with ``__``)
ROWS_ACTION = "__row_action"
#: inputs one form may have (rows included); more: the JSON box
MAX_FIELDS = 150
#: rows of one array
MAX_ROWS = 50

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")
#: a row index or count as the page posts it: ASCII digits only (``str.isdigit`` is true of ``"²"``,
#: which ``int`` refuses; ``int`` takes ``"١"``, ``" 1"`` and ``"1_0"``): anything else is no number
_COUNT = re.compile(r"[0-9]{1,6}")


def _count(text: Any) -> int | None:
    """A posted row count or index, or None when it is not one (tampered: never an exception)."""
    return int(text) if isinstance(text, str) and _COUNT.fullmatch(text) else None


def _segment(name: str, index: int) -> str:
    return name if _PLAIN.fullmatch(name) and not name.startswith("__") else f"~{index}"


def _join(path: str, segment: str) -> str:
    return f"{path}.{segment}" if path else segment


class NestedArgumentsForm(forms.Form):
    """The fields of ``node`` (:func:`mrtrweb.argforms.read_schema` of ``schema``).

    Args:
        schema: the tool's ``inputSchema`` (the assembled arguments are checked against it).
        node: its tree.
        data: the POST (bound) or None.
        values: arguments to show in an unbound form ("Change the arguments").
        budget: the page's budget of server text.

    Raises:
        Unsupported: ``too_large`` when the rows make more than :data:`MAX_FIELDS` inputs.
    """

    required_css_class = "required"
    use_required_attribute = False

    def __init__(self, schema: dict[str, Any], node: Node, data: Any = None, *, values: Any = None,
                 budget: results.ShownBudget | None = None, prefix: str = "arg") -> None:
        super().__init__(data, prefix=prefix)
        self.schema, self.node = schema, node
        self.budget = budget if budget is not None else results.ShownBudget()
        self.rows: dict[str, int] = {}
        self.items: list[dict[str, Any]] = []
        self._json_paths: dict[tuple[Any, ...], str] = {}
        self._walk_object(node, "", values if isinstance(values, dict) else None, True, top=True)

    # -- building -------------------------------------------------------------------------------

    def _add(self, name: str, field: forms.Field) -> None:
        if len(self.fields) >= MAX_FIELDS:
            raise Unsupported("too_large")
        self.fields[name] = field
        self.items.append({"t": "field", "name": name})

    def _open(self, node: Node, name: str, path: str, required: bool, kind: str = "group") -> None:
        help_text = str(self.budget.description(node.description)) if node.description else ""
        if kind == "rows":  # how many rows, said once (in the range wording of a number: "1 to 5")
            counts = {bound: node.constraints[key] for key, bound in (("minItems", "minimum"), ("maxItems", "maximum"))
                      if isinstance(node.constraints.get(key), int) and not isinstance(node.constraints[key], bool)}
            hints = fieldhints.bound_hints(counts, help_text)
            help_text = " ".join([help_text, "(" + "; ".join(hints) + ")"] if hints else [help_text]).strip()
        self.items.append({"t": "open", "kind": kind, "path": path, "required": required,
                           "legend": display.html(self.budget.label(node.title or name)),
                           "help": display.html(help_text, multiline=True) if help_text else ""})

    def _null_field(self, node: Node, path: str, value: Any, given: bool) -> None:
        if node.nullable:
            field = forms.BooleanField(required=False, label=_("Send null (no value)"))
            field.initial = given and value is None
            self._add(_join(path, "__null"), field)

    def _walk(self, node: Node, name: str, path: str, value: Any, given: bool, required: bool) -> None:
        if is_leaf(node):
            field = make_field(node, name, self.budget, required)
            shown = value if given else node.default if node.has_default else None
            if shown is not None:
                field.initial = initial_of(node, shown)
            self._add(path, field)
            self._null_field(node, path, value, given)
        elif node.kind == "object":
            self._open(node, name, path, required)
            self._null_field(node, path, value, given)
            self._walk_object(node, path, value if isinstance(value, dict) else
                              node.default if not given and isinstance(node.default, dict) else None, required)
            self.items.append({"t": "close"})
        elif node.kind == "array":
            self._walk_array(node, name, path, value, given, required)
        else:
            self._walk_choice(node, name, path, value, given, required)

    def _walk_object(self, node: Node, path: str, value: dict[str, Any] | None, required: bool,
                     top: bool = False) -> None:
        for index, (name, sub, sub_required) in enumerate(node.properties):
            given = value is not None and name in value
            self._walk(sub, name, _join(path, _segment(name, index)), value.get(name) if given else None, given,
                       sub_required)

    def _walk_array(self, node: Node, name: str, path: str, value: Any, given: bool, required: bool) -> None:
        assert node.item is not None
        listed = value if given and isinstance(value, list) else \
            node.default if not given and isinstance(node.default, list) else None
        high = node.constraints.get("maxItems")
        cap = min(MAX_ROWS, high) if isinstance(high, int) and not isinstance(high, bool) and high >= 0 else MAX_ROWS
        count_key = self.add_prefix(_join(path, "__rows"))
        if self.is_bound:
            count = _count(self.data.get(count_key)) or 0
        elif listed is not None:
            count = len(listed)
        else:
            low = node.constraints.get("minItems")
            count = max(low if isinstance(low, int) and not isinstance(low, bool) else 0, 1 if required else 0)
        count = max(0, min(count, cap))
        self.rows[path] = count
        self._open(node, name, path, required, kind="rows")
        self._null_field(node, path, value, given)
        self.items.append({"t": "hidden", "name": count_key, "value": str(count)})
        for i in range(count):
            row = _join(path, str(i))
            self.items.append({"t": "row", "path": path, "index": i, "number": i + 1})
            item = listed[i] if listed is not None and i < len(listed) else None
            item_given = listed is not None and i < len(listed)
            if node.item.kind == "object":  # the row is the object's group: no second legend "#n"
                self._null_field(node.item, row, item, item_given)
                self._walk_object(node.item, row, item if isinstance(item, dict) else None, False)
            else:
                self._walk(node.item, f"#{i + 1}", row, item, item_given, False)
            self.items.append({"t": "endrow"})
        self.items.append({"t": "add", "path": path, "can_add": count < cap})
        self.items.append({"t": "close"})

    def _walk_choice(self, node: Node, name: str, path: str, value: Any, given: bool, required: bool) -> None:
        self._open(node, name, path, required, kind="choice")
        self._null_field(node, path, value, given)
        titles = [v.title or gettext("Variant %(n)s") % {"n": i + 1} for i, v in enumerate(node.variants)]
        choices = [(NO_VALUE, "—")] + [(str(i), display.html(self.budget.label(t))) for i, t in enumerate(titles)]
        chosen = self._matching_variant(node, value) if given and isinstance(value, dict) else None
        picker = forms.ChoiceField(choices=choices, required=False, label=_("Which one"))
        picker.initial = str(chosen) if chosen is not None else (NO_VALUE if len(node.variants) > 1 else "0")
        self._add(_join(path, "__variant"), picker)
        for i, variant in enumerate(node.variants):
            vpath = _join(path, f"~v{i}")
            self._open(variant, gettext("Variant %(n)s") % {"n": i + 1}, vpath, False, kind="variant")
            self._walk_object(variant, vpath, value if chosen == i else None, False)
            self.items.append({"t": "close"})
        self.items.append({"t": "close"})

    @staticmethod
    def _matching_variant(node: Node, value: dict[str, Any]) -> int | None:
        for i, variant in enumerate(node.variants):
            names = {n for n, _s, _r in variant.properties}
            needed = {n for n, _s, r in variant.properties if r}
            if needed <= set(value) <= names:
                return i
        return None

    # -- rows ---------------------------------------------------------------------------------

    @classmethod
    def rows_changed(cls, data: Any, action: str, prefix: str = "arg") -> MultiValueDict | None:
        """``data`` with the row ``action`` (``add:<path>`` / ``remove:<path>:<i>``) applied, or
        None when it is not one (the page is then shown as it was posted)."""
        kind, _sep, rest = action.partition(":")
        out = MultiValueDict({k: data.getlist(k) for k in data if k != f"{prefix}-{ROWS_ACTION}"})
        if kind == "add":
            key = f"{prefix}-{_join(rest, '__rows')}"
            count = _count(out.get(key))
            if count is None:
                return None
            out[key] = str(count + 1)
            return out
        path, _sep, index = rest.rpartition(":")
        key = f"{prefix}-{_join(path, '__rows')}"
        count, removed = _count(out.get(key)), _count(index)
        if kind != "remove" or count is None or removed is None or removed >= count:
            return None  # not a row of this page (tampered): the page is shown as it was posted
        base = f"{prefix}-{path}." if path else f"{prefix}-"
        shifted = MultiValueDict()
        for k in out:
            values = out.getlist(k)
            head, dot, tail = k[len(base):].partition(".") if k.startswith(base) else ("", "", "")
            n = _count(head)
            if n is not None:
                if n == removed:
                    continue
                if n > removed:
                    k = f"{base}{n - 1}{dot}{tail}"
            shifted.setlist(k, values)
        shifted[key] = str(max(0, count - 1))
        return shifted

    def quiet(self) -> NestedArgumentsForm:
        """Show the posted values without checking them (after a row was added or removed)."""
        self._errors = ErrorDict()
        self.cleaned_data = {}
        return self

    def entries(self) -> list[dict[str, Any]]:
        """What the page renders, in order (groups, rows, fields as bound fields, buttons)."""
        return [dict(e, field=self[e["name"]]) if e["t"] == "field" else e for e in self.items]

    def has_required(self) -> bool:
        return any(getattr(f, "marked_required", False) for f in self.fields.values())

    # -- assembling -------------------------------------------------------------------------------

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        self._missing: list[str] = []
        self._json_paths = {}
        value = self._assemble_object(self.node, "", (), True)[1]
        for name in self._missing:
            self.add_error(name if name in self.fields else None, _("This field is required."))
        if self._missing:
            return cleaned
        if has_lone_surrogate(value):
            logger.info("tool arguments refused: they hold a lone surrogate")
            raise forms.ValidationError(LONE_SURROGATE_MESSAGE, code="lone_surrogate")
        if argschema.arguments_too_deep(value):
            raise forms.ValidationError(_("The arguments are nested more than %(n)s levels deep."), code="too_deep",
                                        params={"n": argschema.MAX_ARGUMENT_DEPTH})
        try:
            errors = argschema.check_arguments(self.schema, value)
        except argschema.SchemaUnchecked as exc:
            logger.warning("tool arguments refused: the tool's inputSchema cannot be checked (%s)", exc.code)
            raise forms.ValidationError(_("The tool's input schema cannot be checked here: %(why)s. Nothing was sent."),
                                        code=exc.code, params={"why": exc.code}) from None
        for error in errors[:20]:
            where = tuple(error.absolute_path)
            name = next((self._json_paths[where[:n]] for n in range(len(where), -1, -1)
                         if where[:n] in self._json_paths), None)
            self.add_error(name if name in self.fields else None, forms.ValidationError(
                _("Arguments do not match the tool's schema at %(where)s: %(what)s"), code="schema_mismatch",
                params={"where": "/".join(str(p) for p in where) or "(root)", "what": error.validator}))
        self.assembled = value
        return cleaned

    def _null_chosen(self, path: str) -> bool:
        return bool(self.cleaned_data.get(_join(path, "__null")))

    def _assemble(self, node: Node, path: str, at: tuple[Any, ...], required: bool) -> tuple[bool, Any]:
        if node.nullable and self._null_chosen(path):
            return True, None
        if is_leaf(node):
            self._json_paths[at] = path
            given, value = leaf_value(node, self.cleaned_data.get(path))
            if not given and required:
                self._missing.append(path)
            return given, value
        if node.kind == "object":
            return self._assemble_object(node, path, at, required)
        if node.kind == "array":
            assert node.item is not None
            out = []
            for i in range(self.rows.get(path, 0)):
                given, value = self._assemble(node.item, _join(path, str(i)), at + (len(out),), False)
                if given:
                    out.append(value)
            self._json_paths.setdefault(at, path)
            return bool(out), out  # a required array left empty: [] where its object is given
        picked = self.cleaned_data.get(_join(path, "__variant"))
        if not picked:
            if required:
                self._missing.append(_join(path, "__variant"))
            return False, None
        index = int(picked)
        return self._assemble_object(node.variants[index], _join(path, f"~v{index}"), at, True)

    def _assemble_object(self, node: Node, path: str, at: tuple[Any, ...], required: bool) -> tuple[bool, Any]:
        out: dict[str, Any] = {}
        given_any = False
        missing_before = len(self._missing)
        for index, (name, sub, sub_required) in enumerate(node.properties):
            given, value = self._assemble(sub, _join(path, _segment(name, index)), at + (name,), sub_required)
            if given:
                out[name], given_any = value, True
            elif sub_required and sub.kind == "array" and not sub.nullable:
                out[name] = []
        if not given_any and not required:
            del self._missing[missing_before:]  # an optional part left empty: not given, nothing required in it
            return False, None
        return True, out

    def content(self) -> dict[str, Any]:
        """The arguments (after ``is_valid()``)."""
        return self.assembled
