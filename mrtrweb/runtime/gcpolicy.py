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
* ``MRTRWEB["GC_THRESHOLDS"]`` (default ``(20_000, 4, 100)``): :func:`gc.set_threshold`. A young
  collection every 20,000 net container allocations instead of 700 lets a request's short-lived
  objects die in generation 0 rather than being promoted (promotions are what make full
  collections come due); generation 1 is collected every 4 young collections, so it stays small
  (a larger one is itself a long pause: ``(50_000, 20, 100)`` measured 480-640 ms generation-1
  pauses at 1,000 users); a full collection needs 100 generation-1 collections (and, as always in
  CPython, the old generation grown by a quarter since the last one). Measured with the pending
  benchmark (``mrtrweb.bench.pending``) at 200 and 1,000 users: longest pause 74 ms instead of
  620 ms, no full collection during the run. ``None`` keeps the interpreter's thresholds.

What it does not change: a full collection, when one comes due, still walks every object the
people connected to the worker keep (~226-241 per connected user with a waiting round, ~180 of
them the WebSocket's: uvicorn's and channels' tasks), plus the old garbage of closed MCP sessions
(the SDK's anyio streams leave ~100 objects in cycles per closed session). Timed in the pending
benchmark: ~0.5 s at 1,000 users and ~2.1-2.2 s at 5,000 on the 2-core benchmark machine. The
thresholds make it rare -- none came due in three runs filling 5,000 users -- not short; spreading
users over workers bounds it.

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
