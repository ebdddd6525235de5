"""The benchmark's ASGI worker entry point: the product's application (``mrtrweb.site.asgi``),
unchanged, plus a ``gc.callbacks`` hook that logs every garbage-collector pause of 20 ms or more
(``GC pause <ms> ms gen <n> collected <k>``) to the worker's log, where the benchmark counts them
(:meth:`mrtrweb.bench.common.Services.worker_errors`): the evidence for latency outliers."""

from __future__ import annotations

import gc
import sys
import time

from mrtrweb.site.asgi import application  # noqa: F401 -- re-exported for uvicorn

#: pauses at least this long are logged, milliseconds
GC_LOG_MS = 20.0
_started: list[float] = []


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
        return
    if not _started:
        return
    ms = (time.perf_counter() - _started.pop()) * 1000
    if ms >= GC_LOG_MS:
        print(f"GC pause {ms:.1f} ms gen {info.get('generation')} collected {info.get('collected')}",
              file=sys.stderr, flush=True)


gc.callbacks.append(_on_gc)
