"""The consent card's form renderer (issue 30): Django's own ``DjangoTemplates`` form renderer, with
the two templates every field of every card renders -- the label (``django/forms/label.html``) and
the ``<input>`` (``django/forms/widgets/input.html``, which ``text``, ``email``, ``number``,
``checkbox``... include) -- written in Python exactly as those templates write them (the same
escaping: ``conditional_escape``; the same ``stringformat:'s'``; the same ``strip()``), since each card
pushed rendered them once per field through the template engine. Everything else (selects, radio
lists, textareas, a portal's own ``FORM_RENDERER``) renders through the templates as before.

The Python path is taken only while the installed Django's templates are the ones it reproduces:
their sources are compared once with :data:`_SOURCES` (a Django upgrade that changes them puts
every field back on the templates). ``tests/consent/test_renderer.py`` compares the two outputs.
"""

from __future__ import annotations

from typing import Any

from django.forms.renderers import DjangoTemplates
from django.utils.html import conditional_escape, escape
from django.utils.safestring import SafeData

_INPUT = "django/forms/widgets/input.html"
_LABEL = "django/forms/label.html"
#: the template sources the Python path reproduces, as Django 5.x ships them
_SOURCES = {
    _INPUT: ('<input type="{{ widget.type }}" name="{{ widget.name }}"{% if widget.value != None %} '
             'value="{{ widget.value|stringformat:\'s\' }}"{% endif %}'
             '{% include "django/forms/widgets/attrs.html" %}>'),
    "django/forms/widgets/attrs.html": ("{% for name, value in widget.attrs.items %}{% if value is not False %} "
                                        "{{ name }}{% if value is not True %}=\"{{ value|stringformat:'s' }}\""
                                        "{% endif %}{% endif %}{% endfor %}"),
    _LABEL: ("{% if use_tag %}<{{ tag }}{% include 'django/forms/attrs.html' %}>{{ label }}</{{ tag }}>"
             "{% else %}{{ label }}{% endif %}"),
    "django/forms/attrs.html": ("{% for name, value in attrs.items %}{% if value is not False %} {{ name }}"
                                "{% if value is not True %}=\"{{ value|stringformat:'s' }}\"{% endif %}{% endif %}"
                                "{% endfor %}"),
}
#: the widget templates that are exactly an include of ``input.html``
_INCLUDES_INPUT = '{% include "django/forms/widgets/input.html" %}'
_WIDGETS = ("text", "email", "number", "checkbox", "url", "date", "time", "datetime", "search", "tel", "color",
            "hidden", "password")
#: plain values an attribute or a value may hold on the Python path (anything else: the templates)
_PLAIN = (str, int, float)


def _formatted(value: Any) -> str:
    """``{{ value|stringformat:'s' }}`` with autoescaping: ``stringformat`` is ``is_safe``, so a
    safe string stays as it is, anything else is escaped."""
    text = "%s" % (str(value) if isinstance(value, tuple) else value)
    return text if isinstance(value, SafeData) else escape(text)


def _attrs(attrs: Any) -> str | None:
    """``attrs.html``; None when a value is not plain (the template then renders it)."""
    out = []
    for name, value in attrs.items():
        if not isinstance(name, str) or not (value is None or isinstance(value, _PLAIN)):
            return None
        if value is not False:
            out.append(f" {conditional_escape(name)}" + ("" if value is True else f'="{_formatted(value)}"'))
    return "".join(out)


def _input(context: dict[str, Any]) -> str | None:
    widget = context.get("widget")
    if not isinstance(widget, dict) or len(context) != 1:
        return None
    kind, name, value, attrs = widget.get("type"), widget.get("name"), widget.get("value"), widget.get("attrs")
    if not isinstance(kind, str) or not isinstance(name, str) or not isinstance(attrs, dict) or not (
            value is None or isinstance(value, _PLAIN)):
        return None
    rest = _attrs(attrs)
    if rest is None:
        return None
    shown = "" if value is None else f' value="{_formatted(value)}"'
    return f'<input type="{conditional_escape(kind)}" name="{conditional_escape(name)}"{shown}{rest}>'


def _label(context: dict[str, Any]) -> str | None:
    label, attrs, tag = context.get("label"), context.get("attrs"), context.get("tag")
    if not isinstance(label, str):
        return None
    if not context.get("use_tag"):
        return conditional_escape(label)
    if not isinstance(tag, str):
        return None
    rest = "" if attrs is None else _attrs(attrs) if isinstance(attrs, dict) else None
    if rest is None:
        return None
    return f"<{conditional_escape(tag)}{rest}>{conditional_escape(label)}</{conditional_escape(tag)}>"


class CardRenderer(DjangoTemplates):
    """Django's ``DjangoTemplates`` form renderer, the label and the ``<input>`` in Python."""

    _fast: dict[str, Any] | None = None

    def _paths(self) -> dict[str, Any]:
        if self._fast is None:
            fast: dict[str, Any] = {}
            try:
                same = all(self.get_template(name).template.source.strip() == source
                           for name, source in _SOURCES.items())
                if same:
                    fast[_LABEL] = _label
                    for kind in _WIDGETS:
                        name = f"django/forms/widgets/{kind}.html"
                        if self.get_template(name).template.source.strip() == _INCLUDES_INPUT:
                            fast[name] = _input
            except Exception:  # noqa: BLE001 -- a template missing or unreadable: the templates serve
                fast = {}
            type(self)._fast = fast
        return self._fast

    def render(self, template_name: str, context: dict[str, Any], request: Any = None) -> str:
        path = self._paths().get(template_name) if request is None else None
        if path is not None:
            out = path(context)
            if out is not None:
                return out.strip()
        return super().render(template_name, context, request)


_card_renderer: CardRenderer | None = None


def card_renderer(configured: Any) -> Any:
    """The renderer a card's form uses: :class:`CardRenderer` when the site's is Django's default
    (``DjangoTemplates``, exactly), else the site's own (a portal's ``FORM_RENDERER`` is kept)."""
    global _card_renderer
    if type(configured) is not DjangoTemplates:
        return configured
    if _card_renderer is None:
        _card_renderer = CardRenderer()
    return _card_renderer
