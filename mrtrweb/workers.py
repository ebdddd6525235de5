"""Workers that come and go.

Each ASGI worker process has an id and, while it drives operations, a heartbeat in the shared
cache (``<prefix>:worker:<id>``, refreshed every ``HEARTBEAT_S`` seconds, expiring after three
missed beats). What happens when a worker dies:

* **during a tool call** (the operation is ``running`` on that worker): any other worker's reaper
  -- run with every heartbeat, and when the operation is viewed -- sees the owner's heartbeat gone
  and marks the operation ``interrupted`` (code ``worker_lost``): its binding is closed, so a late
  result can never be accepted, and the person sees that and may run it again;
* **while a legacy (2025-11-25) server holds its call open for the person** (the operation awaits
  input, but the server's request is held by that worker): the same -- the reaper marks it
  ``interrupted``; the server's call died with the worker, so no answer could reach it;
* **while a round waits for the person**: nothing is lost. The binding lives in the shared cache,
  the operation row in the database; the answer may come through any worker, which builds the
  retry and sends it over its own MCP session (MRTR needs no server-side session).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import caches
from django.utils import timezone

from . import conf

logger = logging.getLogger("mrtrweb.workers")

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
WORKER_LOST = "worker_lost"

_beats: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}


def _key(worker_id: str) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:worker:{worker_id}"


def _ttl() -> float:
    return float(conf.get("HEARTBEAT_S")) * 3


def beat() -> None:
    """Write this worker's heartbeat (sync)."""
    caches[conf.get("BINDING_CACHE")].set(_key(WORKER_ID), time.time(), timeout=max(1, int(_ttl() + 0.999)))


def is_alive(worker_id: str) -> bool:
    """Whether that worker's heartbeat is fresh. A worker that cannot be checked counts as alive
    (never interrupt on a cache outage)."""
    if not worker_id or worker_id == WORKER_ID:
        return True
    try:
        return caches[conf.get("BINDING_CACHE")].get(_key(worker_id)) is not None
    except Exception:  # noqa: BLE001
        logger.warning("cannot read the heartbeat of worker %s; assuming it is alive", worker_id)
        return True


async def ensure_heartbeat() -> None:
    """Start this worker's heartbeat loop on the running event loop (idempotent)."""
    loop = asyncio.get_running_loop()
    task = _beats.get(loop)
    if task is not None and not task.done():
        return
    try:
        await sync_to_async(beat)()
    except Exception:  # noqa: BLE001
        logger.warning("heartbeat write failed")
    _beats[loop] = loop.create_task(_heartbeat_loop())


async def _heartbeat_loop() -> None:
    period = float(conf.get("HEARTBEAT_S"))
    while True:
        await asyncio.sleep(period)
        try:
            await sync_to_async(beat)()
            await reap_interrupted()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the loop must survive outages
            logger.warning("heartbeat/reaper round failed: %s", exc.__class__.__name__)


def _legacy_held(op_id: Any) -> bool:
    """Whether a worker holds a legacy server's call open for this operation's round (sync)."""
    from .operations import _hold_key

    try:
        return caches[conf.get("BINDING_CACHE")].get(_hold_key(op_id)) is not None
    except Exception:  # noqa: BLE001 -- never interrupt on a cache outage
        return False


async def reap_interrupted(operation_id: Any = None) -> int:
    """Mark ``running`` operations whose worker's heartbeat is gone as ``interrupted``.

    Args:
        operation_id: check only this operation (the operation page does that on view).

    Returns:
        how many operations were marked.
    """
    from .models import Operation
    from .operations import finish_interrupted, message_for

    grace = timezone.now() - timezone.timedelta(seconds=_ttl())
    qs = Operation.objects.filter(status=Operation.Status.RUNNING, updated_at__lt=grace).exclude(worker="")
    if operation_id is not None:
        qs = qs.filter(pk=operation_id)
    held = Operation.objects.filter(status=Operation.Status.AWAITING_INPUT, updated_at__lt=grace).exclude(worker="")
    if operation_id is not None:
        held = held.filter(pk=operation_id)
    candidates = [op async for op in qs.select_related("server", "tenant")[:200]]
    candidates += [op async for op in held.select_related("server", "tenant")[:200]
                   if await sync_to_async(_legacy_held)(op.id)]
    count = 0
    for op in candidates:
        alive = await sync_to_async(is_alive)(op.worker)
        if alive:
            continue
        claimed = await Operation.objects.filter(pk=op.pk, status=op.status, worker=op.worker).aupdate(
            status=Operation.Status.INTERRUPTED, error_code=WORKER_LOST,
            error_message=message_for(WORKER_LOST))
        if claimed:
            count += 1
            logger.info("operation %s interrupted: worker %s stopped during the call", op.id, op.worker)
            await finish_interrupted(op)
    return count
