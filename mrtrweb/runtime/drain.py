"""Graceful shutdown of a worker (issue 14): drain, then exit.

* :func:`is_draining` -- whether this worker process is draining: readiness answers 503
  (:mod:`mrtrweb.runtime.health`) and new operations are refused (``worker_draining``, HTTP 503, nothing
  sent); answers to rounds are still taken (an answer the person gave is never refused for a
  restart).
* :func:`begin_draining` -- set the flag (idempotent).
* :data:`lifespan` -- the ASGI lifespan application: ``lifespan.startup`` writes the worker's
  lease and starts its heartbeat loop (:mod:`mrtrweb.runtime.workers`: lease renewal, reaper, expiry
  sweep); ``lifespan.shutdown`` runs :func:`drain`, then answers ``lifespan.shutdown.complete``.

:func:`drain`: the flag is set and the lease marked draining; the worker waits up to
``MRTRWEB["DRAIN_GRACE_S"]`` seconds for its operation tasks -- calls in flight, legacy servers'
calls held open for the person, retries being sent -- to finish (they keep pushing to the
person's pages, and a legacy round answered through another worker is still delivered). Rounds
waiting for the person are not this worker's: they are answerable through any worker and are
left untouched. What is still running after the grace is marked ``interrupted`` with its own
code :data:`WORKER_STOPPED` (a restart or deploy stopped it; nothing more is sent; run it
again): binding closed, ``failed`` event written, page pushed; then its task is cancelled (the
SDK tells the server ``notifications/cancelled`` where the transport allows). Finally the
heartbeat stops and the lease is deleted -- only when every operation was settled; else it goes
stale and the other workers' reapers settle what is left (``worker_lost``).

Wiring. The standalone site routes ``"lifespan"`` here (:mod:`mrtrweb.site.asgi`); run uvicorn
with ``--lifespan on``. A portal's ``asgi.py`` does the same::

    from channels.routing import ProtocolTypeRouter
    import mrtrweb.runtime.drain

    application = ProtocolTypeRouter({
        "http": django_asgi_app,
        "websocket": ...,
        "lifespan": mrtrweb.runtime.drain.lifespan,
    })

A portal with a lifespan application of its own awaits :func:`startup` and :func:`drain` from it.
Without lifespan (``--lifespan off``) the heartbeat starts with the first operation and a
SIGTERM interrupts calls in flight as before (they end ``worker_lost`` on another worker).

What uvicorn does on SIGTERM (0.54, ``Server.shutdown``): it closes its listening sockets (new
connections are refused at once), asks every connection to shut down (idle keep-alive HTTP
connections close, a request being answered finishes, WebSockets are closed with code 1012
"service restart", which the page treats as "reconnect"), waits for the connections and their
request tasks -- with no limit unless ``--timeout-graceful-shutdown N`` is given, after which it
cancels those request tasks -- and only then sends ``lifespan.shutdown`` and waits for it without a
limit. ``--timeout-graceful-shutdown`` therefore bounds only the wait for open requests; the
drain bounds itself with ``DRAIN_GRACE_S``. A process manager must allow more than both before it
sends SIGKILL (systemd ``TimeoutStopSec``, Kubernetes ``terminationGracePeriodSeconds``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .leases import begin_draining, end_draining, is_draining  # noqa: F401 -- the flag lives with the lease

logger = logging.getLogger("mrtrweb.drain")

#: the code of an operation a drain could not let finish
WORKER_STOPPED = "worker_stopped"
#: seconds the tasks get to wind down by themselves once their operations were marked
WIND_DOWN_S = 2.0


def reset() -> None:
    """Forget the draining flag (tests)."""
    end_draining()


def grace_s() -> float:
    """``MRTRWEB["DRAIN_GRACE_S"]``: the longest a drain waits for calls in flight, seconds."""
    from .. import conf

    return float(conf.get("DRAIN_GRACE_S"))


async def startup() -> None:
    """What ``lifespan.startup`` does: write the lease and start the heartbeat loop. Never raises
    (a database down at start-up is logged; the loop retries, readiness says not ready)."""
    from . import workers

    reset()
    await workers.ensure_heartbeat()
    logger.info("worker %s started", workers.WORKER_ID)


def _operation_tasks() -> list[asyncio.Task]:
    from ..operations import running_tasks

    loop = asyncio.get_running_loop()
    return [t for t in running_tasks if t.get_loop() is loop and not t.done()]


def _driven_ids() -> list[Any]:
    """Operations this worker still drives or holds open (sync)."""
    from ..models import Operation
    from .workers import WORKER_ID

    return list(Operation.objects.filter(status__in=Operation.LIVE, worker=WORKER_ID).values_list("pk", flat=True))


async def _stop_operation(op_id: Any) -> bool:
    """Mark one operation of this worker interrupted (``worker_stopped``) and settle it."""
    from ..models import Operation
    from ..operations import finish_operation, load_operation, message_for
    from .workers import WORKER_ID

    claimed = await Operation.objects.filter(pk=op_id, status__in=Operation.LIVE, worker=WORKER_ID).aupdate(
        status=Operation.Status.INTERRUPTED, error_code=WORKER_STOPPED, error_message=message_for(WORKER_STOPPED),
        worker="", round_expires_at=None)
    if not claimed:
        return False
    op = await load_operation(op_id)
    await finish_operation(op, Operation.Status.INTERRUPTED, code=WORKER_STOPPED, message=message_for(WORKER_STOPPED),
                  event="failed", already_marked=True)
    return True


async def drain(grace: float | None = None) -> dict[str, int]:
    """Drain this worker (see the module docstring); returns ``{"finished": n, "stopped": n,
    "cancelled": n}`` -- tasks that ended within the grace, operations marked ``worker_stopped``,
    tasks cancelled after. Never raises: a database outage leaves the lease to go stale."""
    from asgiref.sync import sync_to_async

    from . import workers

    begin_draining()
    grace = grace_s() if grace is None else grace
    started = time.monotonic()
    pending = _operation_tasks()
    logger.warning("worker %s draining: %s operation task(s) in flight, up to %gs", workers.WORKER_ID,
                   len(pending), grace)
    try:
        await workers.lease_call(workers.renew)  # the lease says draining
    except Exception as exc:  # noqa: BLE001
        logger.warning("worker %s: lease not marked draining (%s)", workers.WORKER_ID, exc.__class__.__name__)
    finished = 0
    while pending:
        left = grace - (time.monotonic() - started)
        if left <= 0:
            break
        done, _ = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finished += len(done)
        pending = _operation_tasks()  # a legacy answer or a state-only retry may have spawned one
    stopped = 0
    settled = True
    await workers.fresh_connections()  # the database may have been down meanwhile
    try:
        for op_id in await sync_to_async(_driven_ids)():
            stopped += await _stop_operation(op_id)
    except Exception as exc:  # noqa: BLE001 -- the other workers' reapers settle them (worker_lost)
        settled = False
        logger.warning("worker %s: operations left running could not be marked (%s)", workers.WORKER_ID,
                       exc.__class__.__name__)
    pending = _operation_tasks()
    if pending:  # marked: they wind down (a held legacy round tells its server cancel), else cancelled
        _, pending = await asyncio.wait(pending, timeout=WIND_DOWN_S)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5.0)
    await _close_connections()
    await workers.stop_heartbeat()
    if settled:
        await workers.lease_call(workers.release)
    logger.warning("worker %s drained in %.1fs: %s task(s) finished, %s operation(s) stopped (%s), %s task(s) "
                   "cancelled", workers.WORKER_ID, time.monotonic() - started, finished, stopped, WORKER_STOPPED,
                   len(pending))
    return {"finished": finished, "stopped": stopped, "cancelled": len(pending)}


async def _close_connections() -> None:
    """Close this loop's MCP sessions (each server sees its session end)."""
    from ..servers.connections import loop_pool

    pool = loop_pool()
    if pool is None:
        return
    try:
        await asyncio.wait_for(pool.close_all(), timeout=5.0)
    except Exception as exc:  # noqa: BLE001 -- the process exits anyway
        logger.info("MCP sessions not all closed cleanly (%s)", exc.__class__.__name__)


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI ``lifespan`` application (see the module docstring)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await startup()
            except Exception:  # noqa: BLE001 -- never keep the worker from starting
                logger.exception("worker start-up tasks failed; the worker serves anyway")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await drain()
            except Exception:  # noqa: BLE001
                logger.exception("drain failed; the worker exits")
            await send({"type": "lifespan.shutdown.complete"})
            return
