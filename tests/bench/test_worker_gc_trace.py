"""The benchmark worker's opt-in collector trace (:mod:`mrtrweb.bench.worker_app`,
``MRTRWEB_BENCH_GC_TRACE=1``): every collection's generation sizes at its start, and every 16th
young collection's garbage by type, and what each generation-1 collection walks by type -- how
issue 30's collector pauses were attributed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import gc
import mrtrweb.bench.worker_app
class Cycle:
    pass
from django.utils.functional import SimpleLazyObject
def boom():
    raise RuntimeError("evaluated")
async def job():
    pass
for _ in range(32):
    a = Cycle(); a.me = a; a.lazy = SimpleLazyObject(boom); a.coro = job(); a.coro.close()
    try:
        raise ValueError("x")
    except ValueError as exc:
        a.exc = exc
    del a
    gc.collect(0)
keep = [Cycle() for _ in range(50)]  # survives a young collection: generation 1 holds it
gc.collect(0)
gc.collect(1)
mrtrweb.bench.worker_app._census(0, None)
"""


def _run(trace: bool) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("MRTRWEB_BENCH_GC_TRACE", None)
    if trace:
        env["MRTRWEB_BENCH_GC_TRACE"] = "1"
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


def test_the_trace_names_each_collections_sizes_and_samples_the_garbage() -> None:
    err = _run(trace=True)
    traces = [x for x in err.splitlines() if x.startswith("GC trace gen 0 sizes ")]
    assert len(traces) >= 32
    garbage = [x for x in err.splitlines() if x.startswith("GC garbage ")]
    assert len(garbage) >= 2 and any("Cycle=" in x for x in garbage)
    # named by type, a lazy object never evaluated (that would raise inside the collector's callback)
    assert any("SimpleLazyObject=" in x and "exception:ValueError=" in x and "coroutine:job=" in x for x in garbage)
    assert "Exception ignored" not in err
    # before a generation-1 collection: what it walks, by type, young and generation 1 apart
    walks = [x for x in err.splitlines() if x.startswith("GC walks gen 1 ")]
    old = [x for x in walks if x.startswith("GC walks gen 1 old ")]
    assert any(x.startswith("GC walks gen 1 young ") for x in walks)
    assert old and re.search(r" Cycle=(\d+)", old[0]) and int(re.search(r" Cycle=(\d+)", old[0]).group(1)) >= 50


def test_off_by_default_and_the_census_counts_every_collection() -> None:
    err = _run(trace=False)
    assert "GC trace" not in err and "GC walks" not in err
    census = [x for x in err.splitlines() if x.startswith("GC census ")]
    m = re.search(r"collections (\d+),(\d+),(\d+) cpu_ms ([0-9.]+),([0-9.]+),([0-9.]+)$", census[-1])
    assert m and int(m.group(1)) >= 32, census  # the 32 young collections at least, by generation
