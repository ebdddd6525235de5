"""The benchmark's ASGI worker entry point: the product's application (``mrtrweb.site.asgi``,
which applies the start-up collector policy, :mod:`mrtrweb.runtime.gcpolicy`), unchanged, plus:

* a ``gc.callbacks`` hook that logs every garbage-collector pause of 20 ms or more
  (``GC pause <ms> ms gen <n> collected <k> cpu <ms> ms``: wall time, and the thread's CPU time in
  it -- less when the 2-core machine's other work took the core meanwhile) to the worker's log, where the benchmark counts them
  (:meth:`mrtrweb.bench.common.Services.worker_errors`): the evidence for latency outliers;
* a census on ``SIGUSR1``: ``GC census tracked <n> frozen <f> thresholds <t0>,<t1>,<t2> sessions
  <open> released <k>`` -- the objects the collector tracks (what a full collection walks) and
  those frozen at start-up, and the MCP sessions the worker's pool holds and has released
  (:meth:`mrtrweb.mcp.ConnectionPool.release`), then ``collections <g0>,<g1>,<g2> cpu_ms <g0>,<g1>,<g2>``:
  every collection since start-up by generation, and their CPU time (the censuses' own excluded). Young garbage is collected first
  (``gc.collect(1)``, not logged as a pause: the census's, not the product's), so the count is of
  what the worker keeps plus the old generation's garbage;
* a census by type on ``SIGUSR2``: ``GC types <n> <type>=<count> ...`` (the 30 most numerous),
  the profile of what a connected user and a pending round keep, and ``GC tasks <coroutine>=<count>
  ...``: the event loop's tasks by coroutine;
* a timed full collection on ``SIGRTMIN+1``: ``GC full <ms> ms collected <k> tracked <n>`` -- what
  one full collection costs the worker at this size (the pause a worker with this many people
  takes whenever one comes due), and the objects alive after it (not logged as a pause).

The censuses run on the event loop's thread between two bytecodes (a Python signal handler), with
the collector disabled meanwhile (:func:`gc.disable`, which also holds off the product's spacer,
:mod:`mrtrweb.runtime.gcpolicy`: a census holds every object in one list, which a collection
would walk -- once a 234 ms pause); the benchmark asks for them outside its timed windows
(:mod:`mrtrweb.bench.pending`)."""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import signal
import sys
import time
import types

from mrtrweb.site.asgi import application  # noqa: F401 -- re-exported for uvicorn

#: pauses at least this long are logged, milliseconds
GC_LOG_MS = 20.0
_started: list[float] = []
#: by generation: (collections, CPU ms) since start-up, the census's own excluded
_totals: list[tuple[int, float]] = [(0, 0.0), (0, 0.0), (0, 0.0)]
_in_census: list[bool] = []


#: ``MRTRWEB_BENCH_GC_TRACE=1``: every collection's generation sizes at its start (``GC trace``), and
#: every 16th young collection's garbage by type (``GC garbage``), and before each generation-1
#: collection what it walks by type (``GC walks gen 1 young|old <n> <type>=<count> ...``): what a
#: collection walks and frees
TRACE = os.environ.get("MRTRWEB_BENCH_GC_TRACE") == "1"
_trace: dict[str, object] = {"n": 0, "sizes": (), "saveall": False}


def _trace_start(info: dict) -> None:
    gen = info.get("generation", 0)
    _trace["sizes"] = tuple(len(gc.get_objects(g)) for g in range(gen + 1))
    if gen == 1 and not _in_census:
        _trace_walks()
    _trace["n"] = n = int(_trace["n"]) + 1
    _trace["saveall"] = gen < 2 and n % 16 == 0 and not _in_census
    if _trace["saveall"]:
        gc.set_debug(gc.DEBUG_SAVEALL)


def _trace_walks() -> None:
    """What a generation-1 collection is about to walk, by type (:func:`_name`): the young
    generation and generation 1 (the survivors of the young collections since the last one)."""
    for label, gen in (("young", 0), ("old", 1)):
        counts = collections.Counter(_name(o) for o in gc.get_objects(gen))
        print(f"GC walks gen 1 {label} {sum(counts.values())} "
              + " ".join(f"{k}={v}" for k, v in counts.most_common(40)), file=sys.stderr, flush=True)


def _trace_stop(info: dict, ms: float, cpu: float) -> None:
    print(f"GC trace gen {info.get('generation')} sizes {','.join(map(str, _trace['sizes']))} collected "
          f"{info.get('collected')} ms {ms:.1f} cpu {cpu:.1f} t {time.monotonic():.2f}", file=sys.stderr, flush=True)
    if _trace["saveall"]:
        gc.set_debug(0)
        try:
            counts = collections.Counter(_name(o) for o in gc.garbage)
        finally:
            gc.garbage.clear()  # freed by a later collection
        print(f"GC garbage {sum(counts.values())} " + " ".join(f"{k}={v}" for k, v in counts.most_common(40)),
              file=sys.stderr, flush=True)


def _name(o: object) -> str:
    """The type's name; a code object's name for functions, coroutines, generators, frames and
    tracebacks; ``exception:`` before an exception's. By type only: no attribute of the object
    is read through its own class (a lazy object would evaluate)."""
    t = type(o)
    if issubclass(t, BaseException):
        return f"exception:{t.__qualname__}"
    code = None
    if t is types.FunctionType:
        code = o.__code__  # type: ignore[attr-defined]
    elif t is types.CoroutineType:
        code = o.cr_code  # type: ignore[attr-defined]
    elif t is types.GeneratorType:
        code = o.gi_code  # type: ignore[attr-defined]
    elif t is types.FrameType:
        code = o.f_code  # type: ignore[attr-defined]
    elif t is types.TracebackType:
        code = o.tb_frame.f_code  # type: ignore[attr-defined]
    return f"{t.__qualname__}:{code.co_qualname}" if code is not None else t.__qualname__


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        if TRACE:
            _trace_start(info)
        _started.append((time.perf_counter(), time.thread_time()))
        return
    if not _started:
        return
    wall0, cpu0 = _started.pop()
    ms = (time.perf_counter() - wall0) * 1000
    cpu = (time.thread_time() - cpu0) * 1000  # the collector's own work; wall - cpu: the machine's other load
    if not _in_census:  # every collection's CPU and count, by generation (the census reports them)
        gen = int(info.get("generation", 0))
        _totals[gen] = (_totals[gen][0] + 1, _totals[gen][1] + cpu)
    if TRACE:
        _trace_stop(info, ms, cpu)
    if ms >= GC_LOG_MS and not _in_census:
        print(f"GC pause {ms:.1f} ms gen {info.get('generation')} collected {info.get('collected')} cpu {cpu:.1f} ms",
              file=sys.stderr, flush=True)


def _still(handler):
    """``handler`` with automatic collections and the product's spacer held off
    (:func:`gc.disable`): a census holds every object in one list, which a collection would walk."""
    def run(signum: int, frame: object) -> None:
        enabled = gc.isenabled()
        gc.disable()
        try:
            handler(signum, frame)
        finally:
            if enabled:
                gc.enable()
    return run


def _young_collected() -> None:
    _in_census.append(True)
    try:
        gc.collect(1)
    finally:
        _in_census.pop()


def _census(_signum: int, _frame: object) -> None:
    from mrtrweb.servers.connections import loop_pools

    _young_collected()
    tracked = len(gc.get_objects())
    t = ",".join(str(v) for v in gc.get_threshold())
    pools = list(loop_pools.values())
    print(f"GC census tracked {tracked} frozen {gc.get_freeze_count()} thresholds {t} sessions "
          f"{sum(len(p) for p in pools)} released {sum(p.released for p in pools)} collections "
          f"{','.join(str(n) for n, _ in _totals)} cpu_ms {','.join(f'{c:.1f}' for _, c in _totals)}",
          file=sys.stderr, flush=True)


def _census_types(_signum: int, _frame: object) -> None:
    _young_collected()
    objects = gc.get_objects()
    counts = collections.Counter(type(o).__qualname__ for o in objects)
    top = " ".join(f"{name}={n}" for name, n in counts.most_common(30))
    del objects
    try:  # the running tasks by coroutine: what each connected socket keeps running
        tasks = collections.Counter(getattr(t.get_coro(), "__qualname__", "?") for t in asyncio.all_tasks())
        print("GC tasks " + " ".join(f"{name}={n}" for name, n in tasks.most_common(12)), file=sys.stderr, flush=True)
    except RuntimeError:  # no running loop in this thread
        pass
    print(f"GC types {sum(counts.values())} {top}", file=sys.stderr, flush=True)


def _full(_signum: int, _frame: object) -> None:
    _in_census.append(True)
    try:
        t0 = time.perf_counter()
        collected = gc.collect()
        ms = (time.perf_counter() - t0) * 1000
    finally:
        _in_census.pop()
    print(f"GC full {ms:.1f} ms collected {collected} tracked {len(gc.get_objects())}", file=sys.stderr, flush=True)


#: the signal of the timed full collection
FULL_SIGNAL = signal.SIGRTMIN + 1

gc.callbacks.append(_on_gc)
signal.signal(signal.SIGUSR1, _still(_census))
signal.signal(signal.SIGUSR2, _still(_census_types))
signal.signal(FULL_SIGNAL, _still(_full))
