"""``MRTRWEB`` values from the environment: :func:`from_environ` (the standalone and production
settings modules of mrtrweb.site use it).

May import: django (ImproperlyConfigured), :mod:`.defaults`."""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .defaults import BOOL_KEYS, COUNT_KEYS, DEFAULTS, DICT_KEYS, INT_TUPLE_KEYS, LIST_KEYS, NUMERIC_KEYS

__all__ = ["from_environ"]


def from_environ(environ: Any) -> dict[str, Any]:
    """The ``MRTRWEB`` values given as ``MRTRWEB_<KEY>`` environment variables (the standalone and
    production settings modules use it; every key of :data:`DEFAULTS` may be given so).

    Numbers parse as ``int`` when whole, else ``float``; list keys (:data:`LIST_KEYS`) take a JSON list
    or white-space separated words; dict keys (:data:`DICT_KEYS`) a JSON object; :data:`INT_TUPLE_KEYS` white-space separated whole numbers; boolean keys (:data:`BOOL_KEYS`) ``1/0/true/false/yes/no``; the
    rest are strings. An empty variable counts as unset.

    Raises:
        ImproperlyConfigured: a value that does not parse (named, never echoed: it may be a key).
    """
    out: dict[str, Any] = {}
    for key in DEFAULTS:
        raw = environ.get(f"MRTRWEB_{key}")
        if raw is None or not raw.strip():
            continue
        raw = raw.strip()
        if key == "GC_EVERY_S" and raw.lower() in ("none", "off"):  # the interpreter's counts alone
            out[key] = None
            continue
        if key in NUMERIC_KEYS or key in COUNT_KEYS:
            try:
                number = float(raw)
            except ValueError:
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be a number") from None
            if not math.isfinite(number):  # nan, inf, 1e400: no bound at all, or a crash at first use
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be a finite number")
            out[key] = int(number) if number.is_integer() else number
        elif key in LIST_KEYS:
            if raw.startswith("["):
                try:
                    value = json.loads(raw)
                except ValueError:
                    raise ImproperlyConfigured(f"MRTRWEB_{key} must be a JSON list or words separated by spaces") from None
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ImproperlyConfigured(f"MRTRWEB_{key} must be a list of strings")
                out[key] = value
            else:
                out[key] = raw.split()
        elif key in DICT_KEYS:
            try:
                value = json.loads(raw)
            except ValueError:
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be a JSON object") from None
            if not isinstance(value, dict):
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be a JSON object")
            out[key] = value
        elif key in INT_TUPLE_KEYS:
            try:
                out[key] = tuple(int(word) for word in raw.split())
            except ValueError:
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be whole numbers separated by spaces") from None
        elif key in BOOL_KEYS:
            lowered = raw.lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no"):
                raise ImproperlyConfigured(f"MRTRWEB_{key} must be 1 or 0 (true/false, yes/no)")
            out[key] = lowered in ("1", "true", "yes")
        else:
            out[key] = raw
    return out
