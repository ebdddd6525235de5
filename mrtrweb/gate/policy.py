"""Gate policy: lifetimes, caps and the deprecated-method exception (mrtr-gate.md §1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

#: The deprecated client requests a server may ask for only when a policy allows them.
DEPRECATED_METHODS = frozenset({"sampling/createMessage", "roots/list"})
#: Methods whose result may be ``input_required`` (SEP-2322).
INPUT_REQUIRED_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the gate allows for one operation.

    Attributes:
        ttl_s: lifetime in seconds of a binding and of a round (default 600).
        max_state_bytes: cap on ``requestState`` in UTF-8 bytes, inclusive (default 65536).
        max_rounds: rounds one operation may take before ``mrtr_round_limit_exceeded`` (default 10).
        allow_deprecated: deprecated methods (``sampling/createMessage``, ``roots/list``) this
            server may ask for; empty by default (the deployed default allows none).
        state_only_backoff_s: first pause before retrying a ``requestState``-only round; doubles
            for each consecutive state-only round up to ``state_only_backoff_cap_s``.
        version: an identifier of this policy, recorded in audit rows.
    """

    ttl_s: float = 600.0
    max_state_bytes: int = 65536
    max_rounds: int = 10
    allow_deprecated: frozenset[str] = frozenset()
    state_only_backoff_s: float = 0.05
    state_only_backoff_cap_s: float = 1.0
    version: str = "mrtr-gate/1"

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_deprecated", frozenset(self.allow_deprecated))
        if not (self.ttl_s > 0):
            raise ValueError("ttl_s must be > 0")
        if int(self.max_state_bytes) < 1:
            raise ValueError("max_state_bytes must be >= 1")
        if int(self.max_rounds) < 1:
            raise ValueError("max_rounds must be >= 1")
        unknown = set(self.allow_deprecated) - DEPRECATED_METHODS
        if unknown:
            raise ValueError(f"allow_deprecated accepts only {sorted(DEPRECATED_METHODS)}, got {sorted(unknown)}")

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> "Policy":
        """A copy with keys of the verification-case ``policy`` object applied
        (``ttl_s``, ``max_state_bytes``, ``max_rounds``, ``allow_deprecated``)."""
        if not overrides:
            return self
        known = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known:
                raise ValueError(f"unknown policy key {key!r}")
            if key == "allow_deprecated":
                value = frozenset(_as_str_list(value))
            changes[key] = value
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        d = self.__dict__.get("_as_dict")  # per instance: equal policies may differ in 1 vs 1.0
        if d is None:
            d = dataclasses.asdict(self)
            d["allow_deprecated"] = sorted(self.allow_deprecated)
            object.__setattr__(self, "_as_dict", d)
        return {**d, "allow_deprecated": list(d["allow_deprecated"])}  # a new dict, as asdict gave

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Policy":
        key = _plain_key(data) if cls is Policy else None
        if key is not None:
            hit = _FROM_DICT.get(key)
            if hit is not None:
                return hit  # frozen, so one instance can serve every equal record
        policy = cls().with_overrides(data)
        if key is not None:
            _remember(_FROM_DICT, key, policy)
        return policy


#: bounded memo of ``from_dict`` (an operation's policy is read on every call)
_FROM_DICT: dict[tuple[Any, ...], Policy] = {}
_MEMO_MAX = 256
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= _MEMO_MAX:
        memo.clear()
    memo[key] = value


def _plain_key(data: Any) -> tuple[Any, ...] | None:
    """``data`` as a hashable key that keeps each value's exact type and text (``1``, ``1.0``,
    ``True`` and ``-0.0`` vs ``0.0`` differ), when it is a plain ``dict`` of atoms and lists of
    atoms; else ``None`` (not memoized)."""
    if type(data) is not dict:
        return None
    items = []
    for k, v in data.items():
        if type(v) is list:
            if not all(type(x) in _PLAIN for x in v):
                return None
            v = ("list", tuple((type(x), repr(x)) for x in v))
        elif type(v) not in _PLAIN:
            return None
        items.append((type(k), k, type(v), repr(v) if type(v) is float else v))  # -0.0 is not 0.0
    return tuple(items)


def _as_str_list(value: Iterable[Any]) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError("allow_deprecated must be a list of method names")
    out = list(value)
    if not all(isinstance(v, str) for v in out):
        raise ValueError("allow_deprecated must be a list of method names")
    return out
