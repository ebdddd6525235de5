"""What a requested field's bounds say to the person, said once.

A field's help is the server's ``description`` followed by the bounds the schema sets (length,
value range, item count, multiple, format, pattern). Servers often already state a bound in the
description ("The ticket id (3 to 32 characters)."); repeating it ("(at least 3 characters; at
most 32 characters)") makes the help read twice. :func:`bound_hints` phrases each group of bounds
in one phrase ("3 to 32 characters", "1 to 24", "choose 1 to 2") and leaves a group out when the
description already states every number of it. The bounds are enforced either way (the form's and
the gate's checks say which one failed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext, ngettext

from ..gate import formats
from .gate_text import format_description

#: a number as written in prose: "3", "32", "0.5", "-1" (a thousands separator splits it)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?!\w)")


def number_text(value: Any) -> str:
    """A JSON number as a person reads it: ``1200.0`` as ``1200``, ``0.5`` as ``0.5``, an
    integer as its digits (no grouping); anything else as ``str``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


def stated_numbers(description: str) -> set[float]:
    """The numbers written in ``description`` (as floats)."""
    found: set[float] = set()
    for token in _NUMBER.findall(description or ""):
        try:
            found.add(float(token))
        except ValueError:  # pragma: no cover -- the pattern only matches numbers
            continue
    return found


def _stated(numbers: list[Any], stated: set[float]) -> bool:
    try:
        return bool(numbers) and all(float(n) in stated for n in numbers)
    except (TypeError, ValueError, OverflowError):
        return False


def _length(c: Mapping[str, Any]) -> str | None:
    low, high = c.get("minLength"), c.get("maxLength")
    if low is not None and high is not None:
        if low == high:
            return ngettext("exactly %(n)s character", "exactly %(n)s characters", high) % {"n": high}
        return ngettext("%(low)s to %(high)s character", "%(low)s to %(high)s characters", high) % {
            "low": low, "high": high}
    if low is not None:
        return ngettext("at least %(n)s character", "at least %(n)s characters", low) % {"n": low}
    if high is not None:
        return ngettext("at most %(n)s character", "at most %(n)s characters", high) % {"n": high}
    return None


def _range(c: Mapping[str, Any]) -> str | None:
    low, high = c.get("minimum"), c.get("maximum")
    if low is not None and high is not None:
        if low == high:
            return gettext("exactly %(n)s") % {"n": number_text(low)}
        return gettext("%(low)s to %(high)s") % {"low": number_text(low), "high": number_text(high)}
    if low is not None:
        return gettext("at least %(n)s") % {"n": number_text(low)}
    if high is not None:
        return gettext("at most %(n)s") % {"n": number_text(high)}
    return None


def _items(c: Mapping[str, Any]) -> str | None:
    low, high = c.get("minItems"), c.get("maxItems")
    if low is not None and high is not None:
        if low == high:
            return gettext("choose exactly %(n)s") % {"n": low}
        return gettext("choose %(low)s to %(high)s") % {"low": low, "high": high}
    if low is not None:
        return gettext("choose at least %(n)s") % {"n": low}
    if high is not None:
        return gettext("choose at most %(n)s") % {"n": high}
    return None


def bound_hints(constraints: Mapping[str, Any], description: str = "") -> list[str]:
    """The hints for a field's ``constraints`` (a :class:`mrtrweb.gate.schema.Field`'s), each
    bound group once, in one phrase; a group whose every number ``description`` already states
    is left out (the description says it). Formats and patterns always get their hint."""
    c = constraints
    stated = stated_numbers(description)
    groups: list[tuple[list[Any], str | None]] = [
        ([c[k] for k in ("minLength", "maxLength") if k in c], _length(c)),
        ([c[k] for k in ("minimum", "maximum") if k in c], _range(c)),
        ([c["exclusiveMinimum"]] if "exclusiveMinimum" in c else [],
         gettext("greater than %(n)s") % {"n": number_text(c["exclusiveMinimum"])} if "exclusiveMinimum" in c
         else None),
        ([c["exclusiveMaximum"]] if "exclusiveMaximum" in c else [],
         gettext("less than %(n)s") % {"n": number_text(c["exclusiveMaximum"])} if "exclusiveMaximum" in c
         else None),
        ([c["multipleOf"]] if "multipleOf" in c else [],
         gettext("a multiple of %(n)s") % {"n": number_text(c["multipleOf"])} if "multipleOf" in c else None),
        ([c[k] for k in ("minItems", "maxItems") if k in c], _items(c)),
    ]
    hints = [text for numbers, text in groups if text and not _stated(numbers, stated)]
    fmt = c.get("format")
    if fmt:
        # inside the help's own parentheses: "a calendar date, YYYY-MM-DD", not "(a calendar date (YYYY-MM-DD))"
        described = formats.DESCRIPTIONS.get(fmt, fmt)
        if described.endswith(")") and " (" in described:
            described = described[:-1].replace(" (", ", ", 1)
        hints.append(format_description(described))
    if "pattern" in c:
        hints.append(gettext("must match the pattern the server gave"))
    return hints
