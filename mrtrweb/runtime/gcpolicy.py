"""The worker's garbage-collector policy: freeze what start-up built, keep full collections rare.

CPython's cyclic collector stops the whole worker for a full (generation 2) collection, for a time
that grows with every object it has to walk: Django, the SDK and the app's modules (~10^5 objects
that live as long as the process) plus what each connected person holds. Two levers, applied once
by :func:`configure` after the application is loaded:

* ``MRTRWEB["GC_FREEZE"]`` (default ``True``): collect once, then :func:`gc.freeze` -- everything
  alive at start-up moves to the permanent generation, which no collection walks again. Only
  start-up objects are frozen (modules, classes, settings, URL resolvers, the app's singletons),
  never a request's or a person's, so nothing that later becomes garbage is kept by it beyond
  start-up leftovers. :func:`configure` is idempotent: a second call freezes nothing more.
* ``MRTRWEB["GC_THRESHOLDS"]`` (default ``(5_000, 4, 400)``): :func:`gc.set_threshold`. A young
  collection's pause is the young generation it walks plus the cyclic garbage it frees (~5 us an
  object in a worker: finalizers, frames, tracebacks). CPython 3.11 counts the young generation as
  allocations *minus deallocations of any generation*, so where old objects die by reference count
  (a worker's steady state: requests, timers and sessions that lived through a collection) the young
  generation grows past the threshold before it is collected: at 20,000, young collections walked
  18-152k objects (median 24k) at 1,000 users (``MRTRWEB_BENCH_GC_TRACE``, :mod:`mrtrweb.bench.worker_app`). Measured with the pending benchmark (``mrtrweb.bench.pending``, the
  collector's CPU of each pause; the 2-core machine shared, so wall-clock pauses were 2-5x that):
  at 5,000 users ``(20000, 4, 100)`` 247 ms, ``(5000, 4, 400)`` 119-147 ms, ``(5000, 2, 800)`` 190 ms
  (a generation-1 collection walks the objects that live seconds, not the young generation's
  garbage: fewer young collections between two do not make it shorter); ``(50000, 20, 100)`` had
  made 0.5-0.6 s generation-1 pauses at 1,000. The third threshold keeps full collections as rare
  in allocations as ``(20000, 4, 100)`` did (one after ~10^7 net allocations; none came due in
  any run filling 5,000 users). ``None`` keeps the interpreter's thresholds.

What it does not change: a full collection, when one comes due, still walks every object the
people connected to the worker keep (~215-230 per connected user with a waiting round, ~180 of
them the WebSocket's: uvicorn's and channels' tasks). Timed in the pending benchmark: 0.3-0.5 s
at 1,000 users and 1.0-2.5 s at 5,000 on the 2-core benchmark machine. The thresholds make it rare,
not short; spreading users over workers bounds it. A closed MCP session no longer adds to it: it
is freed by reference counting (:func:`mrtrweb.mcp.sending.end_reading`), where it used to leave
~170 objects (~35 KiB) in cycles until a full collection.

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
from typing import Any

__all__ = ["configure", "state"]

logger = logging.getLogger("mrtrweb.gcpolicy")

_applied: dict[str, Any] = {}


def configure() -> dict[str, Any]:
    """Apply ``MRTRWEB["GC_FREEZE"]`` and ``MRTRWEB["GC_THRESHOLDS"]`` to this process (once).

    Returns:
        :func:`state` after applying: ``{"frozen": <objects in the permanent generation>,
        "thresholds": (t0, t1, t2), "configured": True}``.

    Raises:
        django.core.exceptions.ImproperlyConfigured: a setting of the wrong shape (see
            :mod:`mrtrweb.conf`); raised before the collector is touched.
    """
    from .. import conf

    freeze = conf.get("GC_FREEZE")
    thresholds = conf.get("GC_THRESHOLDS")
    if _applied:
        return state()
    if thresholds is not None:
        gc.set_threshold(*thresholds)
    if freeze:
        gc.collect()  # what start-up left as garbage is freed, not frozen
        gc.freeze()
    _applied.update(freeze=bool(freeze), thresholds=gc.get_threshold())
    logger.info("garbage collector: %d start-up objects frozen, thresholds %s", gc.get_freeze_count(),
                gc.get_threshold())
    return state()


def state() -> dict[str, Any]:
    """What the collector is set to: ``{"frozen": int, "thresholds": (int, int, int), "configured":
    bool}`` (``configured``: :func:`configure` ran in this process)."""
    return {"frozen": gc.get_freeze_count(), "thresholds": gc.get_threshold(), "configured": bool(_applied)}


def reset() -> None:
    """Undo :func:`configure` (tests): unfreeze, the interpreter's default thresholds."""
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    _applied.clear()
