"""Pushes to browsers over the channel layer that never raise.

Every ``group_send`` of mrtrweb (operation updates, progress, a session ended, access revoked)
goes through :func:`group_send`: a push is a hint -- each page re-reads what it shows when its
socket reopens, and every push is re-validated by the receiving socket -- so a channel layer that
is down (Redis restarted or unreachable) or stuck costs the push, never the request or background
task that sent it. The failure is logged as one WARNING line per kind of push and
:data:`LOG_EVERY_S` seconds (:class:`mrtrweb.runtime.outage.LogLimiter`), no traceback.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .outage import LogLimiter

logger = logging.getLogger("mrtrweb.push")

#: seconds one push may take before it is given up (a channel layer that accepts connections
#: but does not answer would otherwise hold the sender for its socket timeout, 30 s)
PUSH_TIMEOUT_S = 3.0
#: seconds between two log lines about failing pushes of one kind
LOG_EVERY_S = 30.0

_log = LogLimiter(logger, LOG_EVERY_S)


async def group_send(group: str, message: dict[str, Any], *, what: str) -> bool:
    """Send ``message`` to the channel layer group ``group``; never raises (but cancellation).

    Args:
        group: a group name (``mrtrweb.user.<id>``, a session's group...).
        message: the event (``{"type": "operation.update", ...}``).
        what: the kind of push, for the log line ("operation update", "progress"...): a fixed
            phrase, never data.

    Returns:
        True when the layer took it; False when there is no channel layer or it failed (logged).
    """
    from channels.layers import get_channel_layer

    try:
        layer = get_channel_layer()
    except Exception as exc:  # noqa: BLE001 -- a misconfigured layer: logged, like an outage
        _log.warning(what, "%s push failed: no channel layer (%s); pages catch up when they reconnect", what,
                     exc.__class__.__name__)
        return False
    if layer is None:
        return False
    try:
        async with asyncio.timeout(PUSH_TIMEOUT_S):  # (no task of its own, as wait_for would make)
            await layer.group_send(group, message)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 -- a lost push is recovered when the page reconnects
        _log.warning(what, "%s push failed: the channel layer is unavailable (%s); pages catch up when they "
                     "reconnect", what, exc.__class__.__name__)
        return False
    return True


def user_group(user_id: Any) -> str:
    """The Channels group of one user's browser connections: ``mrtrweb.user.<id>``."""
    return f"mrtrweb.user.{user_id}"


async def operation_changed(user_id: Any, operation_id: Any) -> None:
    """Tell the user's browsers that an operation changed (they re-render it server-side; the
    push carries its id only). Never raises (see :func:`group_send`)."""
    await group_send(user_group(user_id), {"type": "operation.update", "operation_id": str(operation_id)},
                     what="operation update")


#: seconds a pushed card's "receipt being written" mark lives (longer than the receipt's write)
RECEIPT_MARK_S = 10.0


def _receipt_key(op_id: Any, round_number: int) -> str:
    return f"mrtrweb:receipt-pending:{op_id}:{int(round_number)}"


def mark_receipt_pending(op_id: Any, round_number: int, pending: bool) -> None:
    """Say that a socket is sending round ``round_number``'s card of ``op_id`` and will write its
    consent receipt (``pending``), or is done (sync: called inside the push's own thread hops;
    never raises: without the mark an answer simply does not wait for the receipt,
    :func:`mrtrweb.views.answers._await_receipt`)."""
    from django.core.cache import caches

    from .. import conf

    try:
        cache = caches[conf.get("BINDING_CACHE")]
        key = _receipt_key(op_id, round_number)
        if pending:
            cache.set(key, 1, timeout=RECEIPT_MARK_S)
        else:
            cache.delete(key)
    except Exception as exc:  # noqa: BLE001
        logger.info("receipt mark of operation %s not written (%s)", op_id, exc.__class__.__name__)


async def receipt_pending(op_id: Any, round_number: int) -> bool:
    """Whether a socket is writing round ``round_number``'s consent receipt of ``op_id`` now."""
    from django.core.cache import caches

    from .. import conf

    try:
        return bool(await caches[conf.get("BINDING_CACHE")].aget(_receipt_key(op_id, round_number)))
    except Exception:  # noqa: BLE001 -- a cache outage: no wait
        return False
