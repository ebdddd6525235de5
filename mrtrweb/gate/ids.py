"""JSON-RPC ids and canonical digests.

JSON-RPC ids are strings or numbers, compared with their JSON type: ``1`` and ``"1"`` differ,
``2`` and ``2.0`` are the same number. ``true``/``false``/``null`` are not ids.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

RequestId = str | int | float


def is_request_id(value: Any) -> bool:
    """True for a JSON-RPC id: a string, or a finite number that is not a boolean."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return True
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return False


def id_key(value: RequestId) -> str:
    """A string that identifies an id with its JSON type (``s:1`` vs ``n:1``).

    Raises:
        ValueError: ``value`` is not a JSON-RPC id.
    """
    if not is_request_id(value):
        raise ValueError("not a JSON-RPC id")
    if isinstance(value, str):
        return "s:" + value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return "n:" + repr(value)


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, no insignificant white space, UTF-8 kept as is, integral
    floats written as integers.

    Raises:
        ValueError/TypeError: the value is not JSON (NaN, a set, a non-string key...).
    """
    return json.dumps(_same_numbers(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _same_numbers(value: Any) -> Any:
    """``value`` with each integral float written as an integer: ``3`` and ``3.0`` are one JSON
    number (as for ids), so they must not give two digests of the same params."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _same_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_same_numbers(v) for v in value]
    return value


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value`` (surrogates kept, never raises on text;
    a non-finite number -- ``1e400`` parses as infinity -- is digested as ``Infinity``)."""
    text = json.dumps(_same_numbers(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def text_digest(text: str) -> str:
    """``sha256:<hex>`` of a string's UTF-8 bytes (lone surrogates kept via surrogatepass)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_strict_json(value: Any) -> bool:
    """Whether ``value`` can be sent as standard JSON (no NaN or infinity anywhere)."""
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return False
    return True
