"""Benchmark 5 -- growth: gate cost (register + receive + respond, in-process store) against the
size of the requested schema (1, 10, 50 fields) and of the ``requestState`` (64 B up to the cap,
``Policy.max_state_bytes``)."""

from __future__ import annotations

import copy
from typing import Any

from ..gate import Gate, InMemoryBindingStore, Policy
from .gate_core import profile_top, rounds_per_second

#: the five field kinds of the standard round, cycled to build bigger forms (schema, answer)
_KINDS: list[tuple[dict[str, Any], Any]] = [
    ({"type": "boolean", "title": "Confirm"}, True),
    ({"type": "string", "title": "Ticket", "minLength": 3, "maxLength": 32}, "CHG-1042"),
    ({"type": "string", "format": "email", "title": "Notify"}, "ops@example.test"),
    ({"type": "integer", "minimum": 1, "maximum": 24, "title": "Window"}, 2),
    ({"type": "string", "enum": ["eu-west", "us-east", "ap-south"], "title": "Region"}, "eu-west"),
]

SCHEMA_FIELDS = (1, 5, 10, 25, 50)
STATE_BYTES = (64, 256, 1024, 4096, 16384, 65536)


def round_with(base: dict[str, Any], fields: int | None = None, state_bytes: int | None = None) -> dict[str, Any]:
    """The standard round with ``fields`` generated fields (all required) and/or a ``requestState``
    of exactly ``state_bytes`` ASCII bytes."""
    r = copy.deepcopy(base)
    ((key, req),) = r["result"]["inputRequests"].items()
    if fields is not None:
        props, content = {}, {}
        for i in range(fields):
            schema, value = _KINDS[i % len(_KINDS)]
            props[f"f{i:02d}"] = dict(schema, title=f"{schema['title']} {i}")
            content[f"f{i:02d}"] = value
        req["params"]["requestedSchema"] = {"type": "object", "properties": props, "required": sorted(props)}
        r["responses"][key] = {"action": "accept", "content": content}
    if state_bytes is not None:
        seed = "eyJhbGciOiJIUzI1NiJ9.c3RhdGUtcGF5bG9hZC1vcGFxdWUtYmxvYi0xMjM0NTY3ODkw."
        r["result"]["requestState"] = (seed * (state_bytes // len(seed) + 1))[:state_bytes]
    return r


def run(ctx: Any) -> dict[str, Any]:
    from .common import standard_round

    base = standard_round()
    n = 60 if ctx.tiny else 300 if ctx.quick else 1000
    cap = Policy().max_state_bytes
    out: dict[str, Any] = {"benchmark": "growth", "quick": ctx.quick, "state_cap_bytes": cap,
                           "schema": [], "state": []}
    for k in SCHEMA_FIELDS:
        r = round_with(base, fields=k)
        gate = Gate(InMemoryBindingStore(), Policy())
        rounds_per_second(gate, r, max(50, n // 10), start=9_000_000)
        res = max((rounds_per_second(gate, r, n // 3, start=j * n) for j in range(3)),
                  key=lambda x: x["cpu_rounds_per_s"])
        out["schema"].append({"fields": k, **res})
    for size in STATE_BYTES:
        size = min(size, cap)
        r = round_with(base, state_bytes=size)
        gate = Gate(InMemoryBindingStore(), Policy())
        rounds_per_second(gate, r, max(50, n // 10), start=9_000_000)
        res = max((rounds_per_second(gate, r, n // 3, start=j * n) for j in range(3)),
                  key=lambda x: x["cpu_rounds_per_s"])
        out["state"].append({"state_bytes": size, **res})
    big = round_with(base, fields=50)
    n_prof = 30 if ctx.tiny else 300
    out["profile_50_fields"] = profile_top(
        lambda: rounds_per_second(Gate(InMemoryBindingStore(), Policy()), big, n_prof), limit=12)
    capped = round_with(base, state_bytes=cap)
    out["profile_state_cap"] = profile_top(
        lambda: rounds_per_second(Gate(InMemoryBindingStore(), Policy()), capped, n_prof), limit=12)
    return out


def summary(res: dict[str, Any]) -> list[str]:
    s = ", ".join(f"{x['fields']}f: {x['cpu_us_per_round']} us" for x in res["schema"])
    t = ", ".join(f"{x['state_bytes']} B: {x['cpu_us_per_round']} us" for x in res["state"])
    return [f"growth by schema size (CPU per round): {s}", f"growth by requestState size (CPU per round): {t}"]
