"""``{% load mrtrweb_nav %}``: what the navigation of every page shows (:mod:`mrtrweb.consent.pending`)."""

from __future__ import annotations

import logging
from typing import Any

from django import template
from django.core.exceptions import SynchronousOnlyOperation
from django.db import DatabaseError

from ..consent import pending

register = template.Library()
logger = logging.getLogger("mrtrweb.pending")


@register.simple_tag(takes_context=True)
def nav_summary(context: Any) -> dict[str, Any] | None:
    """``{% nav_summary as nav %}``: the signed-in user's rounds waiting and the tenants they
    administer (one query, :func:`mrtrweb.consent.pending.nav_summary`); None for no user, or when it
    cannot be read now (a database outage, a template rendered on the event loop): the page
    shows then without the count, which the page's socket fills in."""
    user = context.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    try:
        return pending.nav_summary(user.pk)
    except (DatabaseError, SynchronousOnlyOperation) as exc:
        logger.info("navigation without the waiting count (%s)", type(exc).__name__)
        return None
