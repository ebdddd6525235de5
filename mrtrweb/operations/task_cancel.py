"""Cancelling an operation's task from wherever the operation ended without the worker that
follows it (:mod:`.tasks`): a Stop while the task's round waits for the person (no worker drives
it then), and the reaper settling an operation whose worker died. ``tasks/cancel`` goes out on the
owner's connection to the server (the task id kept on the row, ``Operation.task_id``), best
effort: a failure is logged, never raised, and the operation has ended either way.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from ..servers.connections import connection_for, declared, server_key
from ..mcp import McpCallError
from ..mcp import tasks as wire
from .runtime import load_operation, new_request_id

logger = logging.getLogger("mrtrweb.operations")

#: how long a ``tasks/cancel`` may take, seconds
CANCEL_TIMEOUT_S: Final = 5.0


async def cancel_detached(op_id: Any) -> bool:
    """``tasks/cancel`` the task of operation ``op_id`` (if it has one and the server declares
    tasks). Returns whether the server acknowledged it."""
    try:
        op = await load_operation(op_id)
        if not op.task_id:
            return False
        declare, _suffix = declared(op.server)
        conn = await connection_for(op.user, op.server, key=server_key(op.server), declare=declare)
        flavor = wire.flavor(conn.server_capabilities)
        if flavor is None:
            return False
        await conn.send("tasks/cancel", {"taskId": op.task_id}, new_request_id(), timeout_s=CANCEL_TIMEOUT_S,
                        extensions={wire.TASKS_EXTENSION: {}} if flavor == "v2" else None)
    except McpCallError as exc:
        logger.info("operation %s: tasks/cancel failed (%s)", op_id, exc.code)
        return False
    except Exception:  # noqa: BLE001 -- best effort: the operation has ended either way
        logger.exception("operation %s: tasks/cancel could not be sent", op_id)
        return False
    logger.info("operation %s: its task was cancelled (tasks/cancel acknowledged)", op_id)
    return True
