"""Who makes an outbound call: the *initiator* of an operation (``Operation.Initiator``).

The brief: every outbound call has an initiator -- the person, an MCP App on the person's page
(issue 31) or a model whose proposal the person approved (issue 32) -- and all of them go through
one path: :func:`mrtrweb.operations.start_operation`, the gate, access at every phase, consent,
audit. This module only checks what an initiator is called; it grants nothing.

``initiator_detail`` names the initiator with ids, names and digests only (never a secret, the text
of a conversation or an argument value): a dict of at most :data:`MAX_KEYS` string keys of the
:data:`KEY` form to strings of at most :data:`MAX_VALUE` characters, stored on the operation and in
every audit event of it.

May import: the models. Nothing else of the product.
"""

from __future__ import annotations

import re
from typing import Any

from ..models import Operation

MAX_KEYS = 8
MAX_VALUE = 200
KEY = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class InitiatorError(ValueError):
    """An initiator or its detail is not one this product knows (a programming error: the caller
    built it, not the outside)."""


def checked(initiator: Any, detail: dict[str, Any] | None) -> tuple[str, dict[str, str]]:
    """``(initiator, detail)`` checked: ``initiator`` one of ``Operation.Initiator``; ``detail``
    empty for a person, else at most :data:`MAX_KEYS` keys matching :data:`KEY`, each value a
    string cut to :data:`MAX_VALUE` characters.

    Raises:
        InitiatorError: an unknown initiator, a person with a detail, a bad key or a non-string value.
    """
    if initiator not in Operation.Initiator.values:
        raise InitiatorError(f"unknown initiator {initiator!r}")
    detail = dict(detail or {})
    if initiator == Operation.Initiator.PERSON:
        if detail:
            raise InitiatorError("a person's own call has no initiator detail")
        return str(initiator), {}
    if len(detail) > MAX_KEYS:
        raise InitiatorError(f"initiator detail has {len(detail)} keys (at most {MAX_KEYS})")
    out: dict[str, str] = {}
    for key, value in detail.items():
        if not isinstance(key, str) or not KEY.match(key):
            raise InitiatorError(f"bad initiator detail key {key!r}")
        if not isinstance(value, str):
            raise InitiatorError(f"initiator detail {key!r} is not a string")
        out[key] = value[:MAX_VALUE]
    return str(initiator), out
