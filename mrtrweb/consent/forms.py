"""Django forms derived from JSON schemas.

* :class:`SchemaForm` -- one field per property of a flat schema (a ``requestedSchema`` checked by
  the gate, or a flat tool ``inputSchema``), defaults pre-filled; ``content()`` gives the JSON
  answer. The browser's constraints are hints; the gate's validation is the truth.
* :class:`JsonArgumentsForm` -- a JSON editor for tool input schemas that are not flat, checked
  with ``jsonschema`` through :mod:`mrtrweb.consent.argschema` (nothing the schema names is fetched; the
  check is bounded in depth, size and time).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from . import argschema, fieldhints
from ..text import display, results
from ..gate.schema import PATTERN_MESSAGE, CheckedSchema, Field
from .gate_text import field_message

_EMPTY = ""
logger = logging.getLogger("mrtrweb.forms")

#: why a tool's input schema could not be checked (:data:`mrtrweb.consent.argschema.CODES`), for the person
_UNCHECKED = {
    "schema_too_deep": _("it is nested too deeply"),
    "schema_too_large": _("it is too large"),
    "schema_ref_outside": _("it refers to a document outside itself ($ref), and mrtrweb never fetches one"),
    "schema_dialect_nested": _("it changes its JSON Schema dialect ($schema) inside itself"),
    "schema_pattern_invalid": _("one of its patterns is not a regular expression mrtrweb can check"),
    "schema_unsupported": _("it combines unevaluatedProperties with patternProperties"),
    "check_timeout": _("checking these arguments against it took too long"),
}


#: a lone UTF-16 surrogate: not a Unicode character, cannot be encoded as UTF-8 (nor sent, nor stored
#: in a page); a browser never posts one, but a JSON ``\\ud800`` escape decodes to one
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
LONE_SURROGATE_MESSAGE = _("This holds text that is not valid Unicode (a lone surrogate, such as the JSON escape "
                           "\\ud800 without its pair). Nothing was sent.")


def has_lone_surrogate(value: Any, _depth: int = 0) -> bool:
    """Whether a string, a key or a value anywhere in ``value`` (JSON-like) holds a lone surrogate.
    (Nesting deeper than 100 levels counts as holding one: such a value is refused anyway.)"""
    if isinstance(value, str):
        return _LONE_SURROGATE.search(value) is not None
    if _depth > 100:
        return True
    if isinstance(value, dict):
        return any(has_lone_surrogate(k, _depth + 1) or has_lone_surrogate(v, _depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_lone_surrogate(v, _depth + 1) for v in value)
    return False


def refuse_lone_surrogates(form: forms.Form) -> None:
    """Add a form error (code ``lone_surrogate``) to each field of ``form`` whose cleaned value holds
    a lone surrogate (:func:`has_lone_surrogate`), and log how many (not the values nor the field
    names: both may be server or user text). Call from ``clean()`` of every form that starts a call
    or answers a round: what it sends must be UTF-8 on the wire, in the database and on every page."""
    bad = [name for name, value in list(form.cleaned_data.items()) if has_lone_surrogate(value)]
    for name in bad:
        form.add_error(name, forms.ValidationError(LONE_SURROGATE_MESSAGE, code="lone_surrogate"))
    if bad:
        logger.info("form refused: %d field(s) hold a lone surrogate", len(bad))


def option_key(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


#: at most this many characters of a default that is not pre-filled are quoted in its notice
MAX_DEFAULT_NOTICE_CHARS = 300


def _shown_default(value: Any) -> str:
    """A server default as one line of text, its control, bidi and invisible characters marked
    (:func:`mrtrweb.text.display.shown`), at most :data:`MAX_DEFAULT_NOTICE_CHARS` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    cut = text[:MAX_DEFAULT_NOTICE_CHARS]
    return display.shown(cut) + ("…" if len(cut) < len(text) else "")


#: at most this many characters of a field's ``pattern`` are quoted in its error
MAX_PATTERN_SHOWN_CHARS = 300


#: a field or option named by more characters than this is keyed in the page by a short stand-in
#: (``#<n>``): a server's long name is never repeated in every name, id and label attribute
MAX_KEY_CHARS = 100


def stand_in_keys(keys: list[str]) -> dict[str, str]:
    """``{key: what the page uses}``: a key of at most :data:`MAX_KEY_CHARS` characters as it is,
    a longer one (or one holding a lone surrogate, which no page can carry) as ``#<its position>``
    (primes added while that is taken by another key)."""
    def kept(k: str) -> bool:
        return len(k) <= MAX_KEY_CHARS and not _LONE_SURROGATE.search(k)

    taken = {k for k in keys if kept(k)}
    out: dict[str, str] = {}
    for i, key in enumerate(keys):
        if key in out:
            continue
        if kept(key):
            out[key] = key
            continue
        stand_in = f"#{i}"
        while stand_in in taken:
            stand_in += "'"
        taken.add(stand_in)
        out[key] = stand_in
    return out


class SchemaForm(forms.Form):
    """A form for a :class:`CheckedSchema`.

    Labels, help texts and choice labels are server text: each is cleaned
    (:func:`mrtrweb.text.display.html`: control and bidi characters made visible) and escaped into a
    ``SafeString``, so whichever form template renders it (Django's, which prints ``help_text``
    with ``|safe``, or a portal's own) shows it as text. Each is also bounded
    (:class:`mrtrweb.text.results.ShownBudget`: a cap per string, one budget for the page or card);
    ``shown_labels`` and ``shown_options`` keep the cut texts for the review. A field or option
    whose name is long is keyed by a stand-in (:func:`stand_in_keys`; ``keys``: name -> field key).

    Args:
        checked: the schema (from :func:`mrtrweb.gate.check_requested_schema`).
        prefix: the input-request key (so several requests share one card).
        budget: the page's or card's budget, shared by several forms (default: a new one).
    """

    #: a required field's label gets this class (the card marks it with an asterisk, app.css); the
    #: card's form is ``novalidate`` and checked on the server: ``aria-required`` tells, not ``required``
    required_css_class = "required"
    use_required_attribute = False

    def __init__(self, checked: CheckedSchema, *args: Any, budget: results.ShownBudget | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checked = checked
        self.budget = budget if budget is not None else results.ShownBudget()
        self._maps: dict[str, dict[str, Any]] = {}
        self._option_keys: dict[str, dict[str, str]] = {}
        #: field name -> its title as shown (cut); field name -> option key -> its label as shown
        self.shown_labels: dict[str, Any] = {}
        self.shown_options: dict[str, dict[str, Any]] = {}
        self.keys = stand_in_keys([spec.name for spec in checked.fields])
        for spec in checked.fields:
            if self.keys[spec.name] not in self.fields:
                self.fields[self.keys[spec.name]] = self._field(spec)

    def _field(self, spec: Field) -> forms.Field:
        c = spec.constraints
        attrs: dict[str, Any] = {}
        title = self.shown_labels[spec.name] = self.budget.label(spec.title)
        label = display.html(title)
        common: dict[str, Any] = {"label": label, "required": spec.required and not spec.has_default}
        if spec.kind == "boolean":
            field: forms.Field = forms.BooleanField(required=False, label=label)
        elif spec.kind in ("choice", "multi"):
            option_keys = stand_in_keys([option_key(o.value) for o in spec.options])
            self._option_keys[spec.name] = option_keys
            mapping = {option_keys[option_key(o.value)]: o.value for o in spec.options}
            self._maps[spec.name] = mapping
            shown_options = [(option_key(o.value), self.budget.label(o.label)) for o in spec.options]
            self.shown_options[spec.name] = dict(shown_options)
            choices = [(option_keys[key], display.html(text)) for key, text in shown_options]
            if spec.kind == "multi":
                field = forms.MultipleChoiceField(choices=choices, widget=forms.CheckboxSelectMultiple,
                                                  required=common["required"] and c.get("minItems", 0) > 0,
                                                  label=label)
            else:
                if not common["required"]:
                    choices = [(_EMPTY, "—")] + choices
                elif not spec.has_default:
                    # nothing pre-selected: the person picks; an untouched select is "required"
                    choices = [(_EMPTY, _("— choose —"))] + choices
                field = forms.ChoiceField(choices=choices, **common)
        elif spec.kind in ("integer", "number"):
            kwargs: dict[str, Any] = dict(common)
            if "minimum" in c:
                kwargs["min_value"] = c["minimum"]
            if "maximum" in c:
                kwargs["max_value"] = c["maximum"]
            field = forms.IntegerField(**kwargs) if spec.kind == "integer" else forms.FloatField(**kwargs)
            if spec.kind == "number":
                field.widget.attrs["step"] = "any"
        else:
            kwargs = dict(common)
            kwargs["strip"] = False
            if "minLength" in c:
                kwargs["min_length"] = c["minLength"]
            if "maxLength" in c:
                kwargs["max_length"] = c["maxLength"]
            fmt = c.get("format")
            widget: forms.Widget = forms.TextInput()
            if fmt == "email":
                widget = forms.EmailInput()
            elif fmt == "uri":
                widget = forms.URLInput()
            elif fmt == "date":
                widget = forms.DateInput(attrs={"type": "date"})
            kwargs["widget"] = widget
            field = forms.CharField(**kwargs)
        held_default = spec.has_default and display.has_hidden(spec.default)
        if held_default:
            # a text box (or a pre-selected option) cannot show markers: U+202E would make
            # "https://evil.example/\u202emoc.elgoog" read ".../google.com" in the box. Not filled in;
            # the default is shown, marked, in the help (and, if the gate fills it in, on the review)
            # (a select keeps its empty first option: a field with a default is optional here)
            logger.info("a server default holding control, bidi or invisible characters was not pre-filled")
        elif spec.has_default:
            default = spec.default
            option_keys = self._option_keys.get(spec.name, {})
            if spec.kind == "choice":
                default = option_keys.get(option_key(default), option_key(default))
            elif spec.kind == "multi" and isinstance(default, list):
                default = [option_keys.get(option_key(v), option_key(v)) for v in default]
            field.initial = default
        description = self.budget.description(spec.description) if spec.description else ""
        help_parts = [description] if description else []
        hints = fieldhints.bound_hints(c, str(description))
        if hints:
            help_parts.append("(" + "; ".join(hints) + ")")
        if held_default:
            help_parts.append(str(_("The server's default holds invisible or control characters, so it is not "
                                    "filled in: %(default)s")) % {"default": _shown_default(spec.default)})
        field.help_text = display.html(" ".join(help_parts), multiline=True)
        if field.required and not isinstance(field.widget, forms.CheckboxSelectMultiple):
            attrs["aria-required"] = "true"  # a checkbox group says "required" in its legend (_fields.html)
        field.widget.attrs.update(attrs)
        if "pattern" in c:
            #: the pattern as the error shows it (cut), and the description as a hint (both server text)
            field.expected_pattern = results.shown_text(c["pattern"], MAX_PATTERN_SHOWN_CHARS)
            field.expected_hint = description
        return field

    @property
    def has_required(self) -> bool:
        """Whether any field must be filled in (the card then explains its asterisk)."""
        return any(f.required for f in self.fields.values())

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        refuse_lone_surrogates(self)
        return cleaned

    def content(self) -> dict[str, Any]:
        """The JSON answer from ``cleaned_data``: typed values, optional empty fields omitted
        (the gate then fills their defaults). Call after ``is_valid()``."""
        out: dict[str, Any] = {}
        for spec in self.checked.fields:
            value = self.cleaned_data.get(self.keys[spec.name])
            if spec.kind == "boolean":
                out[spec.name] = bool(value)
            elif spec.kind == "choice":
                if value not in (None, _EMPTY):
                    out[spec.name] = self._maps[spec.name][value]
            elif spec.kind == "multi":
                if value or spec.required:
                    out[spec.name] = [self._maps[spec.name][v] for v in value or []]
            elif value is None or (value == "" and not spec.required):
                continue
            elif spec.kind == "number" and isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
                out[spec.name] = int(value)  # 1200, not 1200.0: the same JSON number, as the person typed it
            else:
                out[spec.name] = value
        return out

    def add_gate_errors_to_valid_fields(self) -> None:
        """On an invalid form, also run the gate's checks (pattern, formats, item counts...) on the
        fields Django accepted, so every invalid field shows its message at the first Accept, not
        only after the Django-level errors are fixed. Fields with errors already, and whole-answer
        messages (e.g. a required field left empty, reported by Django), are left alone."""
        from ..gate import ContentMismatch

        if self.is_valid():
            return
        ok = {name for name, key in self.keys.items() if key in self.fields and key not in self.errors}
        try:
            self.checked.validate({k: v for k, v in self.content().items() if k in ok})
        except ContentMismatch as exc:
            self.add_gate_errors({name: messages for name, messages in exc.errors.items() if name in ok})

    def add_gate_errors(self, errors: dict[str, list[str]]) -> None:
        """Show the gate's per-field messages on this form (in the page's language,
        :func:`mrtrweb.consent.gate_text.field_message`)."""
        for name, messages in errors.items():
            for message in messages:
                key = self.keys.get(name) if isinstance(name, str) else None
                if key in self.fields and message == PATTERN_MESSAGE:
                    self.fields[key].pattern_failed = True  # the card then shows the pattern expected
                self.add_error(key if key in self.fields else None, field_message(message))


class JsonArgumentsForm(forms.Form):
    """Tool arguments as JSON, checked against the tool's ``inputSchema`` with
    :func:`mrtrweb.consent.argschema.check_arguments`.

    Errors (on the ``arguments`` field): not JSON or not an object; nested deeper than
    :data:`mrtrweb.consent.argschema.MAX_ARGUMENT_DEPTH`; not matching the schema (the first error's path and
    keyword); or the schema cannot be checked within the bounds (code
    :class:`~mrtrweb.consent.argschema.SchemaUnchecked` ``.code``, logged; nothing is sent). A schema that
    is not a valid JSON Schema leaves judging the arguments to the server. Run ``is_valid()`` off
    the event loop: the check may take up to :data:`mrtrweb.consent.argschema.CHECK_TIMEOUT_S` seconds.
    """

    arguments = forms.CharField(label=_("Arguments (JSON)"), widget=forms.Textarea(attrs={"rows": 8}),
                                initial="{}")

    def __init__(self, schema: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema if isinstance(schema, dict) else {}

    def clean_arguments(self) -> dict[str, Any]:
        def refuse_constant(name: str) -> Any:
            raise ValueError(name)

        try:
            value = json.loads(self.cleaned_data["arguments"], parse_constant=refuse_constant)
            json.dumps(value, allow_nan=False)  # 1e400 reads as infinity: not sendable
        except (ValueError, RecursionError):
            raise forms.ValidationError(_("Enter valid JSON."), code="invalid_json") from None
        if not isinstance(value, dict):
            raise forms.ValidationError(_("The arguments must be a JSON object."), code="not_object")
        if argschema.arguments_too_deep(value):
            raise forms.ValidationError(_("The arguments are nested more than %(n)s levels deep."), code="too_deep",
                                        params={"n": argschema.MAX_ARGUMENT_DEPTH})
        if has_lone_surrogate(value):  # e.g. "\ud800": not UTF-8, so not sendable (nor storable, nor showable)
            logger.info("tool arguments refused: they hold a lone surrogate")
            raise forms.ValidationError(LONE_SURROGATE_MESSAGE, code="lone_surrogate")
        try:
            errors = argschema.check_arguments(self.schema, value)
        except argschema.SchemaUnchecked as exc:
            logger.warning("tool arguments refused: the tool's inputSchema cannot be checked (%s)", exc.code)
            raise forms.ValidationError(
                _("The tool's input schema cannot be checked here: %(why)s. Nothing was sent."),
                code=exc.code, params={"why": _UNCHECKED.get(exc.code, exc.code)}) from None
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "(root)"
            raise forms.ValidationError(_("Arguments do not match the tool's schema at %(where)s: %(what)s"),
                                        code="schema_mismatch", params={"where": where, "what": first.validator})
        return value

    def content(self) -> dict[str, Any]:
        return self.cleaned_data["arguments"]
