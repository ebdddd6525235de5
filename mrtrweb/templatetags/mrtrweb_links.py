"""``{% load mrtrweb_links %}``: links to call pages that work for any name a server chose."""

from __future__ import annotations

from typing import Any

from django import template

from ..text.names import call_url as _call_url

register = template.Library()


@register.simple_tag
def call_url(kind: str, server_id: Any, name: Any) -> str:
    """``{% call_url "tool" server.pk tool.name %}``: the call page of that tool or prompt (the name
    percent-encoded in the query string, or its digest; see :mod:`mrtrweb.text.names`). Autoescaped."""
    return _call_url(kind, server_id, name)
