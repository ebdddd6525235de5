"""Shared pieces of the benchmark suite: the standard round, statistics, the machine's description,
a private PostgreSQL database + Redis namespace per run, Django set up on production settings,
worker processes and the JSON result files.

Here: the standard round, statistics, result files, the consent card's fields of the standard
answer. The rest lives in :mod:`.config` (paths, URLs), :mod:`.machine` (the machine, its
processes, ports) and :mod:`.services` (:class:`Services`, :func:`seed`), re-exported here.
"""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path
from typing import Any

# re-exported: the names this module held before the split (issue 27)
from .config import DEFAULT_OUT, DOCS_DIR, PASSWORD, PG_ADMIN, REDIS_URL, ROOT, ROUND_PATHS
from .machine import CpuShare, cpu_seconds, free_port, machine, machine_cpu, rss_kib, wait_port
from .services import Services, seed


# ---------------------------------------------------------------------------------------------- round
def standard_round() -> dict[str, Any]:
    """The standard round (``shared/bench/round.json``): request, input_required result, responses."""
    for path in ROUND_PATHS:
        if path.is_file():
            return json.loads(path.read_text())
    raise FileNotFoundError(f"the standard round is missing: none of {', '.join(map(str, ROUND_PATHS))}")


def round_copy(r: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(r)


# ---------------------------------------------------------------------------------------------- stats
def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def latency_summary(seconds: list[float]) -> dict[str, Any]:
    """p50/p90/p99/mean/max in milliseconds of a list of durations in seconds."""
    ms = [x * 1000.0 for x in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
        "max_ms": round(max(ms), 3) if ms else float("nan"),
    }


# ---------------------------------------------------------------------------------------------- results
def write_result(out_dir: Path, name: str, data: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    return path


def tool_schema_fields(r: dict[str, Any]) -> dict[str, Any]:
    """The standard answer as the consent card's POST fields (``in-<key>-<field>``)."""
    data: dict[str, Any] = {}
    for key, answer in r["responses"].items():
        for name, value in answer.get("content", {}).items():
            if isinstance(value, bool):
                if value:
                    data[f"in-{key}-{name}"] = "on"
            else:
                data[f"in-{key}-{name}"] = str(value)
    return data
