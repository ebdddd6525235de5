"""The worker's garbage-collector policy: freeze what start-up built, collections spaced in time,
full collections rare.

CPython's cyclic collector stops the whole worker for a full (generation 2) collection, for a time
that grows with every object it has to walk: Django, the SDK and the app's modules (~10^5 objects
that live as long as the process) plus what each connected person holds. Three levers, applied once
by :func:`configure` after the application is loaded:

* ``MRTRWEB["GC_FREEZE"]`` (default ``True``): collect once, then :func:`gc.freeze` -- everything
  alive at start-up moves to the permanent generation, which no collection walks again. Only
  start-up objects are frozen (modules, classes, settings, URL resolvers, the app's singletons),
  never a request's or a person's, so nothing that later becomes garbage is kept by it beyond
  start-up leftovers. :func:`configure` is idempotent: a second call freezes nothing more.
* ``MRTRWEB["GC_THRESHOLDS"]`` (default ``(5_000, 4, 1000)``): :func:`gc.set_threshold`. A young
  collection's pause is the young generation it walks plus the cyclic garbage it frees (~5 us an
  object in a worker: finalizers, frames, tracebacks). CPython 3.11 counts the young generation as
  allocations *minus deallocations of any generation* (never below 0), so where old objects die by
  reference count (a worker's steady state: requests, timers and sessions that lived through a
  collection) the young generation grows past the threshold before it is collected: at 20,000, young
  collections walked 18-152k objects (median 24k) at 1,000 users (``MRTRWEB_BENCH_GC_TRACE``,
  :mod:`mrtrweb.bench.worker_app`). Measured with the pending benchmark (``mrtrweb.bench.pending``,
  the collector's CPU of each pause; the 2-core machine shared, so wall-clock pauses were 2-5x that),
  without the spacer: at 5,000 users ``(20000, 4, 100)`` 247 ms, ``(5000, 4, 400)`` 114-147 ms,
  ``(5000, 2, 800)`` 190 ms, ``(1000, 4, 2000)`` 106 ms (36 KiB a pending round); ``(50000, 20,
  100)`` had made 0.5-0.6 s generation-1 pauses at 1,000. The third threshold keeps full
  collections about as rare per round as ``(5000, 4, 400)`` did without the spacer, which makes
  2.2-2.5x the generation-1 collections per round (174-195 against 75-79 while 5,000 rounds
  arrived). ``None`` keeps the interpreter's thresholds.
* ``MRTRWEB["GC_EVERY_S"]`` (default ``0.25``): the *spacer*, a daemon thread of the worker
  (``mrtrweb-gc-spacer``) that, whenever no collection ran for that many seconds, collects what the
  interpreter would were its count due -- the young generation; generation 1 once more young
  collections than the second threshold ran since its last; never a full collection: its
  generation-1 collections count towards the third threshold as the interpreter's do, and the
  interpreter makes the full collection by its own rule (the count over the third threshold *and*
  the objects promoted since the last one a quarter of those that survived it, a count Python does
  not show), so the spacer never adds a full pause an idle worker would not have had. A generation-1
  collection walks the objects made since the previous one that are still alive -- at 5,000
  users mostly seconds-lived ones: uvicorn's keepalive ping of every socket every 20 s (a timer, its
  context, the pong's frame: ~20k objects in 5 s), the MCP session a round keeps ~11 s
  (:func:`mrtrweb.servers.connections.release_after_s`), the rounds in flight -- so its pause is
  their rate times the time since the last one; with the allocation count alone that time was 4-5 s
  under load and unbounded while old objects die as fast as new ones are made (the count stays
  at 0: sockets pinging, a mass disconnect). Measured at 5,000 users (the pending benchmark,
  ``--pending-sizes 5000``, the 2-core machine shared with other runs, load average 3-9; one
  run each, alternated; without the spacer ``(5000, 4, 400)``): the longest pause while the level
  filled and was probed, in CPU (wall): without it 120.7 (651.6) and 150.0 ms (530.0; 4 and 6
  pauses over 100 ms of CPU); every 0.5 s 67.1 (197.1) and 63.7 (130.9); every 0.25 s (the
  default; the second run with ``(5000, 4, 1000)``) 35.8 (169.0) and 46.4 (57.3). Generation-1
  collections while the rounds arrived 75-79, 106-126, 174-195; the collector's CPU per round
  1.66-1.77, 1.63-1.82, 1.37-1.44 ms; memory per pending round 29.8-30.0, 29.4-30.0, 30.9-32.3
  KiB (more of the requests' cycles reach generation 2 before they are garbage: the timed full
  collection freed ~80k objects against 45-49k); the probes' push p99 28.0 and 122.4, 60.0 and
  49.6, 36.2 and 32.9 ms (50 probes: one pause more or less). The mass disconnect of the 5,000
  sockets at the end: 68-69 ms of CPU at most without it, 77-81 with it at 0.25 s. Idle, it
  wakes eight times a second and collects what a fraction of a second made. It stops while the
  collector is disabled (:func:`gc.disable`, or a first threshold of 0). ``None``: the interpreter's counts alone.

What it does not change: a full collection, when one comes due, still walks every object the
people connected to the worker keep (~215-230 per connected user with a waiting round, ~180 of
them the WebSocket's: uvicorn's and channels' tasks). Timed in the pending benchmark: 0.3-0.5 s
at 1,000 users and 1.0-3.0 s at 5,000 on the 2-core benchmark machine. The thresholds make it rare,
not short; spreading users over workers bounds it. With the spacer, generation-1 collections come
at least every ``(t1 + 1) * GC_EVERY_S`` seconds (1.25-1.9 s) and the third threshold's count is
passed after ~20-30 min (1,000 of them), but the full collection is still the interpreter's: only
when an allocation brings a collection and a quarter of the long-lived objects are new since the
last full one (sockets connected and idle do not). Not
changed either: uvicorn's keepalive (``--ws-ping-interval``, 20 s) makes most of the
seconds-lived objects at 5,000 sockets; a longer interval would make fewer in proportion, at the
cost of finding dead sockets later, and must stay under the proxies' idle timeouts (nginx's
``proxy_read_timeout``, 60 s by default; many load balancers' 60 s) -- not measured. A closed
MCP session no longer adds to it: it is freed by reference counting
(:func:`mrtrweb.mcp.sending.end_reading`), where it used to leave ~170 objects (~35 KiB) in cycles
until a full collection.

Where it runs: the standalone site's ``mrtrweb.site.asgi`` calls :func:`configure` at the end of
its import, once Django, the routing, the consumers and the operations are imported and before the
server accepts a connection (uvicorn imports the application before it binds; each of
``--workers N`` imports it in its own process). A portal embedding the app calls it at the end of
its own ``asgi.py``, after building its application::

    application = ProtocolTypeRouter({...})
    import mrtrweb.runtime.gcpolicy
    mrtrweb.runtime.gcpolicy.configure()

Never raises for the collector itself; a bad setting raises before anything is changed.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from typing import Any

__all__ = ["configure", "state"]

logger = logging.getLogger("mrtrweb.gcpolicy")

_applied: dict[str, Any] = {}
#: the running spacer thread and the event that stops it (:func:`_start_spacer`)
_spacer: dict[str, Any] = {}


def configure() -> dict[str, Any]:
    """Apply ``MRTRWEB["GC_FREEZE"]``, ``MRTRWEB["GC_THRESHOLDS"]`` and ``MRTRWEB["GC_EVERY_S"]``
    (the spacer thread started) to this process (once).

    Returns:
        :func:`state` after applying: ``{"frozen": <objects in the permanent generation>,
        "thresholds": (t0, t1, t2), "configured": True, "every_s": <seconds> | None}``.

    Raises:
        django.core.exceptions.ImproperlyConfigured: a setting of the wrong shape (see
            :mod:`mrtrweb.conf`); raised before the collector is touched.
    """
    from .. import conf

    freeze = conf.get("GC_FREEZE")
    thresholds = conf.get("GC_THRESHOLDS")
    every_s = conf.get("GC_EVERY_S")
    if _applied:
        return state()
    if thresholds is not None:
        gc.set_threshold(*thresholds)
    if freeze:
        gc.collect()  # what start-up left as garbage is freed, not frozen
        gc.freeze()
    _applied.update(freeze=bool(freeze), thresholds=gc.get_threshold(), every_s=every_s)
    if every_s is not None:
        _start_spacer(float(every_s))
    logger.info("garbage collector: %d start-up objects frozen, thresholds %s, a collection at least every %s s",
                gc.get_freeze_count(), gc.get_threshold(), every_s)
    return state()


def _collections() -> int:
    """Collections of any generation since the process started."""
    return sum(int(g["collections"]) for g in gc.get_stats())


def _due() -> int:
    """The young generation (0), or generation 1 when its count of young collections is over its
    threshold (``gc.get_count()``, the interpreter's rule). Never 2: a full collection stays the
    interpreter's, made only when it also finds a quarter of the long-lived objects new since the
    last (a count Python does not show); the spacer's generation-1 collections count towards it
    as the interpreter's own do (CPython's ``gc_collect_main``)."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    return 1 if counts[1] > thresholds[1] else 0


def _space(every_s: float, stop: threading.Event) -> None:
    """The spacer's loop: every half of ``every_s``, when no collection ran for ``every_s``
    seconds, collect what the interpreter would collect were its count due (:func:`_due`); nothing
    while the collector is disabled (:func:`gc.disable`, or a first threshold of 0)."""
    seen, last = _collections(), time.monotonic()
    while not stop.wait(every_s / 2):
        now, count = time.monotonic(), _collections()
        if count != seen:
            seen, last = count, now
        elif now - last >= every_s and gc.isenabled() and gc.get_threshold()[0]:  # gc.disable() or a 0 threshold stops it
            gc.collect(_due())
            seen, last = _collections(), time.monotonic()


def _start_spacer(every_s: float) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=_space, args=(every_s, stop), name="mrtrweb-gc-spacer", daemon=True)
    _spacer.update(thread=thread, stop=stop, every_s=every_s)
    thread.start()


def _stop_spacer() -> None:
    stop, thread = _spacer.pop("stop", None), _spacer.pop("thread", None)
    _spacer.clear()
    if stop is not None:
        stop.set()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=5)


def _after_fork_in_child() -> None:
    """A forked child has no thread of its parent's: its own spacer, when the parent ran one."""
    every_s = _spacer.get("every_s")
    _spacer.clear()
    if every_s is not None and _applied:
        _start_spacer(every_s)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def state() -> dict[str, Any]:
    """What the collector is set to: ``{"frozen": int, "thresholds": (int, int, int), "configured":
    bool, "every_s": float | None}`` (``configured``: :func:`configure` ran in this process;
    ``every_s``: the running spacer's period, seconds, ``None`` when none runs)."""
    thread = _spacer.get("thread")
    return {"frozen": gc.get_freeze_count(), "thresholds": gc.get_threshold(), "configured": bool(_applied),
            "every_s": _spacer.get("every_s") if thread is not None and thread.is_alive() else None}


def reset() -> None:
    """Undo :func:`configure` (tests): the spacer stopped, unfreeze, the interpreter's default thresholds."""
    _stop_spacer()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    _applied.clear()
