"""Checked ``requestedSchema`` values remembered: the same schema (by its exact JSON text) is
checked and digested once (:func:`check_requested_schema_cached`, an LRU bounded in count, in the
size of one schema and in the total size kept), each caller getting a copy it may change.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from .ids import digest
from .jsoncopy import json_copy
from .schema import CheckedSchema, Field, check_requested_schema


#: checked schemas kept (LRU), keyed by their exact JSON text; bounded in count, in the size of
#: one schema and in the total size of the schemas kept (their text; a few times that in objects)
CACHE_MAX_ENTRIES = 256


CACHE_MAX_KEY_CHARS = 16384


CACHE_MAX_TOTAL_CHARS = 1 << 20


#: nesting a cached schema may have (a deeper one is checked every time, as before the cache)
_CACHE_MAX_DEPTH = 32


_ATOM_TYPES = frozenset({str, int, float, bool, type(None)})


_cache: OrderedDict[str, tuple[CheckedSchema, str]] = OrderedDict()


_cache_lock = threading.Lock()


_cache_chars = 0


def _exact_key(schema: Any) -> str | None:
    """A text that identifies ``schema`` exactly -- key order, ``1`` vs ``1.0`` vs ``true`` --
    when it is plain JSON (``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``float``,
    ``bool``, ``None``, no subclass or tuple) at most :data:`_CACHE_MAX_DEPTH` deep; else ``None``.
    For such values ``json.dumps`` (unsorted) is injective, so equal keys mean equal schemas."""
    atoms = _ATOM_TYPES
    level = [schema]
    depth = 0
    while level:  # breadth first, one nesting level at a time
        depth += 1
        if depth > _CACHE_MAX_DEPTH:
            return None
        below: list[Any] = []
        for node in level:
            cls = type(node)
            if cls is dict:
                for k in node:
                    if type(k) is not str:
                        return None
                below.extend([v for v in node.values() if type(v) not in atoms])
            elif cls is list:
                below.extend([v for v in node if type(v) not in atoms])
            elif cls not in atoms:
                return None
        level = below
    try:
        return json.dumps(schema, ensure_ascii=False, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        return None


def _fresh(checked: CheckedSchema) -> CheckedSchema:
    """A copy of a cached :class:`CheckedSchema` that shares nothing mutable with it (what
    :func:`check_requested_schema` would have returned: each field's default is also the
    ``defaults`` value)."""
    fields = tuple(map(_fresh_field, checked.fields))
    defaults = {f.name: f.default for f in fields if f.has_default}
    return CheckedSchema(fields=fields, normalized=json_copy(checked.normalized), defaults=defaults)


def _fresh_field(f: Field) -> Field:
    copied = object.__new__(Field)  # a frozen dataclass: fill its __dict__ as __init__ would
    copied.__dict__.update(f.__dict__)
    copied.__dict__["constraints"] = dict(f.constraints)  # values are numbers, strings, booleans
    if f.has_default:
        copied.__dict__["default"] = json_copy(f.default)
    return copied


def check_requested_schema_cached(schema: Any, *, shared: bool = False) -> tuple[CheckedSchema, str | None]:
    """:func:`check_requested_schema` and :func:`ids.digest` of ``schema``, remembered for plain
    schemas in a bounded LRU (a round's schema is checked when it arrives, when it is shown and
    when it is answered).

    Returns a :class:`CheckedSchema` of its own (``shared=False``), or with ``shared=True`` the
    cached one -- for internal use only: it must not be handed out or mutated (answers validated
    against it reuse one compiled validator).

    The digest is ``None`` when computing it raised: the caller then calls :func:`ids.digest`
    itself (outside its handling of a refused schema), so that it raises where it always did.

    Raises:
        as :func:`check_requested_schema`.
    """
    key = _exact_key(schema)
    if key is not None:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
        if hit is not None:
            return (hit[0] if shared else _fresh(hit[0])), hit[1]
    checked = check_requested_schema(schema)
    try:
        schema_digest = digest(schema)
    except Exception:  # noqa: BLE001 -- the caller digests it again, raising as it always did
        return checked, None
    if key is not None and len(key) <= CACHE_MAX_KEY_CHARS:
        pristine = _fresh(checked)
        object.__setattr__(pristine, "_shared", True)
        global _cache_chars
        with _cache_lock:
            if key not in _cache:
                _cache_chars += len(key)
            _cache[key] = (pristine, schema_digest)
            _cache.move_to_end(key)
            while len(_cache) > CACHE_MAX_ENTRIES or _cache_chars > CACHE_MAX_TOTAL_CHARS:
                _cache_chars -= len(_cache.popitem(last=False)[0])
        if shared:
            return pristine, schema_digest
    return checked, schema_digest
