"""The card's form renderer (:mod:`mrtrweb.consent.renderer`) writes the label and the ``<input>`` as
Django's templates do: byte for byte, hostile server text included, for every kind of field a
schema makes; it takes the Python path only for Django's default renderer and its own templates."""

from __future__ import annotations

import pytest
from django.forms.renderers import DjangoTemplates, TemplatesSetting
from django.utils.safestring import mark_safe

from mrtrweb.consent import renderer
from mrtrweb.consent.forms import SchemaForm
from mrtrweb.gate import check_requested_schema

HOSTILE = ['<script>alert(1)</script>', '" onmouseover="x', "a'b&c", "\u202eevil\u200b", "x" * 300, "ünï 😀"]


def _schema(title: str, default: str = "") -> dict:
    return {"type": "object", "required": ["ticket", "region"], "properties": {
        "confirm": {"type": "boolean", "title": title},
        "ticket": {"type": "string", "title": title, "minLength": 3, "maxLength": 32, "description": title},
        "email": {"type": "string", "format": "email", "title": title},
        "site": {"type": "string", "format": "uri", "title": title},
        "day": {"type": "string", "format": "date", "title": title},
        "window": {"type": "integer", "minimum": 1, "maximum": 24, "title": title},
        "ratio": {"type": "number", "title": title, "default": 0.5},
        "region": {"type": "string", "enum": ["eu", "us"], "title": title},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "title": title},
        "note": {"type": "string", "title": title, "default": default},
    }}


def _html(form) -> str:
    return "".join(f"{field.label_tag()}|{field}|{field.legend_tag()}" for field in form)


@pytest.mark.parametrize("title", HOSTILE + ["Plain", "Ends with colon:"])
@pytest.mark.parametrize("bound", [False, True])
def test_the_card_renderer_writes_what_djangos_templates_write(title, bound):
    checked = check_requested_schema(_schema(title, default=title))
    data = {"in-k-ticket": title, "in-k-email": title, "in-k-window": "7", "in-k-confirm": "on",
            "in-k-region": "eu", "in-k-note": title, "in-k-site": title, "in-k-day": title} if bound else None
    fast = SchemaForm(checked, data=data, prefix="in-k")
    assert isinstance(fast.renderer, renderer.CardRenderer)
    slow = SchemaForm(checked, data=data, prefix="in-k", renderer=DjangoTemplates())
    assert type(slow.renderer) is DjangoTemplates
    if bound:
        fast.is_valid(), slow.is_valid()
    assert _html(fast) == _html(slow)
    assert "<script>" not in _html(fast)


def test_odd_values_and_attributes_render_alike():
    fast, slow = renderer.CardRenderer(), DjangoTemplates()
    for value in (None, "", 0, 1.5, "<b>", mark_safe("<i>"), 'q"q'):
        for attrs in ({}, {"a": True, "b": False, "c": None, "d": 3, "e": "<&>", "f": mark_safe("<ok>")},
                      {"x": ("t", 1)}, {"y": ["l"]}):
            context = {"widget": {"type": "text", "name": 'n"<', "value": value, "attrs": attrs,
                                  "is_hidden": False, "required": False, "template_name": "x"}}
            for name in ("django/forms/widgets/text.html", "django/forms/widgets/checkbox.html"):
                assert fast.render(name, context) == slow.render(name, context)
        for label in ("L<", mark_safe("<b>L</b>"), ""):
            for use_tag in (True, False):
                context = {"label": label, "attrs": attrs, "use_tag": use_tag, "tag": "legend", "field": None}
                assert fast.render("django/forms/label.html", context) == slow.render("django/forms/label.html",
                                                                                       context)
    assert renderer.CardRenderer._fast  # the Python path was taken (Django's templates are the known ones)


def test_a_portals_own_form_renderer_is_kept(settings):
    settings.FORM_RENDERER = "django.forms.renderers.TemplatesSetting"
    form = SchemaForm(check_requested_schema(_schema("t")), prefix="in-k")
    assert isinstance(form.renderer, TemplatesSetting)
