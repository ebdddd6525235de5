"""System checks of the MRTRWEB settings."""

from __future__ import annotations

from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from . import conf


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    messages = []
    for key in conf.unknown_keys():
        messages.append(Warning(f"MRTRWEB has an unknown key {key!r}", id="mrtrweb.W001"))
    try:
        ttl = conf.get("TTL_S")
        max_ttl = conf.get("MAX_TTL_S")
        for key in conf.DEFAULTS:
            conf.get(key)
    except ImproperlyConfigured as exc:
        return messages + [Error(str(exc), id="mrtrweb.E001")]
    if ttl > max_ttl:
        messages.append(Error(f"MRTRWEB TTL_S ({ttl}) is above MAX_TTL_S ({max_ttl})", id="mrtrweb.E002"))
    return messages
