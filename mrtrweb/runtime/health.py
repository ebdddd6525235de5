"""Liveness and readiness of a worker, for load balancers and orchestrators.

Two endpoints, no authentication, ``GET``/``HEAD`` only (405 otherwise), ``Cache-Control:
no-store``, a JSON body that names no service, version or error:

* **live** (``/healthz``) -- 200 ``{"status": "live"}``: the process serves requests. It touches no
  service: a database or Redis outage never makes an orchestrator kill healthy workers.
* **ready** (``/readyz``) -- 200 ``{"status": "ready"}`` when this worker can do its work: the
  database answers (``SELECT 1``), the binding store answers (a read of a record that does not
  exist), the cache alias ``MRTRWEB["BINDING_CACHE"]`` answers (a ``get``), the channel layer
  answers (a ``PING`` of each channels-redis host; another layer: a ``group_send`` to a group
  nobody is in; the in-memory layer is always up), and the worker is not draining
  (:func:`mrtrweb.runtime.drain.is_draining`). Otherwise 503 ``{"status": "unavailable"}`` or
  ``{"status": "draining"}`` (``Retry-After: 5``). The checks run concurrently, each within
  :data:`CHECK_TIMEOUT_S` seconds (all of them together too); probes arriving together share a
  check's run, and a check whose previous run is blocked (a database that does not answer, a run
  older than :data:`CHECK_TIMEOUT_S`) counts as failing rather than piling up threads. The
  reason (which checks fail, with the exceptions' classes) is logged in one WARNING line when
  readiness or its cause (the set of failing checks, or draining) changes; while it stays the
  same, one reminder line ("still not ready for N s: ...") at most every :data:`REMIND_EVERY_S`
  seconds, however often the probes come; the return to ready in one INFO line
  (:class:`ReadinessLog`).

The standalone site (:mod:`mrtrweb.site.settings`) has :class:`HealthMiddleware` FIRST in its
``MIDDLEWARE``: it answers ``/healthz`` and ``/readyz`` (with or without a trailing slash)
before host validation (``ALLOWED_HOSTS``) and the TLS redirect, since load balancers probe by IP
address over plain http. Nothing else is answered there; every other request goes on unchanged.

A portal that embeds mrtrweb picks one:

* the middleware, first in its ``MIDDLEWARE`` (the same root paths, the same exemptions)::

      MIDDLEWARE = ["mrtrweb.runtime.health.HealthMiddleware", ...]

* or the URL patterns under a prefix of its own (then ``ALLOWED_HOSTS``, the TLS redirect and
  the portal's other middleware apply to the probes as to any request)::

      path("mcp/", include("mrtrweb.health")),   # /mcp/healthz, /mcp/readyz

The views are async (concurrent checks); under WSGI Django runs them in a loop of their own.

Draining and uvicorn: on SIGTERM uvicorn closes its listening sockets *before* the drain starts
(:mod:`mrtrweb.runtime.drain`), so from that moment probes of a draining uvicorn worker are refused at
the TCP level -- which load balancers and orchestrators count as "not ready" as well. The
``{"status": "draining"}`` answer is what a probe sees on a server that keeps listening while it
drains, or in a process that called :func:`mrtrweb.runtime.drain.begin_draining` itself. Because the
refusal comes first, a balancer cannot learn from ``/readyz`` that a worker is *about* to stop:
the production recipe (docs/deploy/) takes a worker out of nginx's rotation before the SIGTERM
(``deploy/rolling-restart``) and lets nginx pass what a stopped worker refuses to another
(``proxy_next_upstream error``; docs/deploy/production.md, step 8, "What a load balancer sees").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.urls import path

logger = logging.getLogger("mrtrweb.health")

#: seconds each readiness check may take, and all of them together (they run concurrently)
CHECK_TIMEOUT_S = 1.5
#: seconds between two reminder lines while readiness fails for the same cause (5 minutes: a
#: probe every few seconds never repeats the line; a long outage still shows in a log tail). A
#: change of readiness or of its cause is logged at once, whatever this says.
REMIND_EVERY_S = 300.0
#: the paths :class:`HealthMiddleware` answers
LIVE_PATHS = ("/healthz", "/healthz/")
READY_PATHS = ("/readyz", "/readyz/")

_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
#: the blocking checks (database, cache, store) run here, never in the request's sync thread
_executor = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="mrtrweb-health")
_running: dict[str, concurrent.futures.Future] = {}
_running_lock = threading.Lock()


class CheckStillRunning(Exception):
    """The previous run of this check has not returned yet (its service does not answer)."""


# -- the checks -----------------------------------------------------------------------------------

def _database() -> None:
    """``SELECT 1`` on the default database, in a health thread (its connection closed after)."""
    from django.db import connections

    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connections.close_all()  # this thread's only (with a pool: handed back)


def _cache() -> None:
    """A ``get`` on ``MRTRWEB["BINDING_CACHE"]`` (a key nobody writes)."""
    from django.core.cache import caches

    from .. import conf

    caches[conf.get("BINDING_CACHE")].get(f"{conf.get('BINDING_KEY_PREFIX')}:health")


def _binding_store() -> None:
    """A read of a record that does not exist, through the configured binding store."""
    from django.db import connections

    from ..bindings import configured_store

    try:
        configured_store().load("mrtrweb-health", "health")
    finally:
        connections.close_all()


async def _in_thread(name: str, fn: Callable[[], None]) -> None:
    """Run ``fn`` in a health thread. A probe arriving while a run of the same check started less
    than :data:`CHECK_TIMEOUT_S` ago joins that run (its outcome is this probe's: probes from
    several load balancers at once read the same answer, and start one thread); a run older than
    that is blocked: :class:`CheckStillRunning` at once, no new thread."""
    with _running_lock:
        previous = _running.get(name)
        if previous is not None and not previous.done():
            if time.monotonic() - getattr(previous, "mrtrweb_started", float("-inf")) >= CHECK_TIMEOUT_S:
                raise CheckStillRunning(name)
            future = previous
        else:
            future = _running[name] = _executor.submit(fn)
            future.mrtrweb_started = time.monotonic()  # type: ignore[attr-defined]
    # shielded: a probe that gives up (its deadline) never cancels the run another probe awaits;
    # the outcome of a run nobody awaits any more is read (never "exception was never retrieved")
    wrapped = asyncio.wrap_future(future)
    wrapped.add_done_callback(_read_outcome)
    await asyncio.shield(wrapped)


def _read_outcome(future: "asyncio.Future[Any]") -> None:
    """Mark a check's outcome as read (its failure is reported by the probe that awaited it)."""
    if not future.cancelled():
        future.exception()


async def _channel_layer() -> None:
    """A round trip to the channel layer: ``PING`` each channels-redis host, else a ``group_send``
    to a group nobody is in; nothing for the in-memory layer (always up) or no layer."""
    from channels.layers import InMemoryChannelLayer, get_channel_layer

    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return
    if hasattr(layer, "connection") and isinstance(getattr(layer, "ring_size", None), int):
        await asyncio.gather(*(layer.connection(i).ping() for i in range(layer.ring_size)))
        return
    await layer.group_send("mrtrweb.health", {"type": "health.ping"})


def _store_backend() -> str:
    """Which check the binding store depends on: "database" or "cache"."""
    from .. import conf

    return "cache" if conf.get("BINDING_STORE") == "cache" else "database"


async def _checks() -> dict[str, str]:
    """Run every check concurrently within :data:`CHECK_TIMEOUT_S`; ``{check: exception class}``
    of those that failed (empty: ready). The binding store is read once the service it lives on
    (database or cache) answered, so an outage is reported (and logged) once."""
    failed: dict[str, str] = {}
    deadline = time.monotonic() + CHECK_TIMEOUT_S

    async def run(name: str, check: Callable[[], Awaitable[None]]) -> bool:
        try:
            await asyncio.wait_for(check(), max(0.05, deadline - time.monotonic()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- every failure is a "not ready", by class name
            failed[name] = "TimeoutError" if isinstance(exc, asyncio.TimeoutError) else exc.__class__.__name__
            return False
        return True

    backend = _store_backend()

    async def service_then_store(name: str, fn: Callable[[], None]) -> None:
        if await run(name, lambda: _in_thread(name, fn)) and backend == name:
            await run("binding store", lambda: _in_thread("binding store", _binding_store))

    checks = [lambda: service_then_store("database", _database), lambda: service_then_store("cache", _cache),
              lambda: run("channel layer", _channel_layer)]
    global _warm
    if not _warm:
        # The first probe of a process imports the backends (django-redis, channels-redis, both
        # importing redis-py) -- in a health thread and in the event loop: run concurrently, the
        # two imports deadlock (ImportError, _DeadlockError) and a healthy worker reads unready.
        for check in checks:
            await check()
        _warm = True
        return failed
    await asyncio.gather(*(check() for check in checks))
    return failed


#: whether the checks ran once in this process (their modules are imported): see :func:`_checks`
_warm = False


# -- reporting ----------------------------------------------------------------------------------

class ReadinessLog:
    """What the worker's log says about readiness (thread-safe; ``clock``: seconds, monotonic).

    :meth:`report` is given each probe's outcome: ``key`` names what fails ("database",
    "cache+channel layer", "draining"; ``""``: ready), ``line`` says it with the exceptions'
    classes. A new ``key`` (a change of readiness, or of its cause) is logged at once: WARNING
    ``not ready: <line>``, or INFO ``ready again after N s (was: <line>)``. The same failing
    ``key`` again is logged as a reminder, WARNING ``still not ready for N s: <line>``, at most
    every :data:`REMIND_EVERY_S` seconds. A check failing with another exception class is the
    same cause (a blocked database is a ``TimeoutError``, then a ``CheckStillRunning``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, remind_every_s: float = REMIND_EVERY_S) -> None:
        self.clock = clock
        self.remind_every_s = remind_every_s
        self._lock = threading.Lock()
        self._key, self._line = "", ""
        self._since = self._logged = float("-inf")

    def report(self, key: str, line: str = "") -> None:
        now = self.clock()
        line = line or key
        with self._lock:
            key_was, line_was, since = self._key, self._line, self._since
            if key == key_was and (not key or now - self._logged < self.remind_every_s):
                return
            if key != key_was:
                self._key, self._since = key, now
            self._line, self._logged = line, now
        if key and key == key_was:
            logger.warning("still not ready for %d s: %s", now - since, line)
        elif key:
            logger.warning("not ready: %s", line)
        elif key_was:
            logger.info("ready again after %d s (was: %s)", now - since, line_was)


_readiness_log = ReadinessLog()


def _report(key: str, line: str = "") -> None:
    """Log why readiness fails (:meth:`ReadinessLog.report` of this process's log)."""
    _readiness_log.report(key, line)


def reset() -> None:
    """Forget what was reported and which checks run (tests)."""
    global _readiness_log
    _readiness_log = ReadinessLog()
    with _running_lock:
        _running.clear()


def _response(request: HttpRequest, status: int, state: str) -> HttpResponse:
    body = b"" if request.method == "HEAD" else json.dumps({"status": state}).encode()
    headers = dict(_HEADERS)
    if status == 503:
        headers["Retry-After"] = "5"
    response = HttpResponse(body, status=status, content_type="application/json", headers=headers)
    response._has_been_logged = True  # a probe every second: never one "Service Unavailable" line each
    return response


def _not_allowed(request: HttpRequest) -> HttpResponse | None:
    if request.method in ("GET", "HEAD"):
        return None
    response = HttpResponse(b"", status=405, headers=dict(_HEADERS, Allow="GET, HEAD"))
    response._has_been_logged = True
    return response


# -- views and middleware -----------------------------------------------------------------------

async def live(request: HttpRequest) -> HttpResponse:
    """200 ``{"status": "live"}``; touches no service."""
    return _not_allowed(request) or _response(request, 200, "live")


async def ready(request: HttpRequest) -> HttpResponse:
    """200 ``{"status": "ready"}``, or 503 ``{"status": "draining"}`` / ``{"status": "unavailable"}``
    (see the module docstring); at most about :data:`CHECK_TIMEOUT_S` seconds."""
    refused = _not_allowed(request)
    if refused is not None:
        return refused
    from .drain import is_draining

    if is_draining():
        _report("draining")
        return _response(request, 503, "draining")
    failed = await _checks()
    if is_draining():  # began while the checks ran
        _report("draining")
        return _response(request, 503, "draining")
    _report("+".join(sorted(failed)), ", ".join(f"{name} failed ({cls})" for name, cls in sorted(failed.items())))
    return _response(request, 503, "unavailable") if failed else _response(request, 200, "ready")


urlpatterns = [
    path("healthz", live, name="mrtrweb-healthz"),
    path("readyz", ready, name="mrtrweb-readyz"),
]


class HealthMiddleware:
    """Answers :data:`LIVE_PATHS` and :data:`READY_PATHS` itself, before any other middleware
    (put it first); passes every other request on. Sync and async capable."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    @staticmethod
    def _view(request: HttpRequest):
        if request.path_info in LIVE_PATHS:
            return live
        if request.path_info in READY_PATHS:
            return ready
        return None

    def __call__(self, request: HttpRequest):
        if self.async_mode:
            return self.__acall__(request)
        view = self._view(request)
        return self.get_response(request) if view is None else async_to_sync(view)(request)

    async def __acall__(self, request: HttpRequest):
        view = self._view(request)
        return await self.get_response(request) if view is None else await view(request)
