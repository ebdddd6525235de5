"""The navigation's "Waiting for you" on a person's WebSocket: a page that shows it sends
``{"type": "pending.watch"}``; its socket is then sent the person's waiting rounds
(``{"type": "pending", "count": int, "rounds": [{id, server, tool, method, expires, url}]}``,
:func:`mrtrweb.consent.pending.payload`, re-read under :mod:`mrtrweb.tenancy.access`'s checks) at once, and again
whenever one of their operations enters or leaves ``awaiting_input``. Mixed into
:class:`mrtrweb.live.consumers.OperationsConsumer`, which supplies ``user_id``, ``session_key``,
``send_json`` and ``_end_session``.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from ..consent import pending
from . import sessions
from ..models import Operation


class PendingWatch:
    """The pending-round half of the person's socket (see the module docstring)."""

    async def watch_pending(self) -> None:
        """The page shows the navigation's "Waiting for you": send it the user's waiting rounds
        now (:func:`mrtrweb.consent.pending.payload`, one hop with the session's check) and again
        whenever one of their operations enters or leaves ``awaiting_input``
        (:meth:`operation_update`)."""
        if getattr(self, "session_closed", False) or getattr(self, "pending_watch", False):
            return  # (asked again on the same socket: nothing new to send, no query)
        self.pending_watch = True
        cause, out = await database_sync_to_async(self._pending_for, thread_sensitive=False)()
        if cause:
            await self._end_session(cause)
            return
        await self._send_pending(out)

    def _pending_for(self) -> tuple[str, dict[str, Any] | None]:
        """Sync: ``(cause, payload)``: why the session no longer holds, or the waiting rounds."""
        cause = sessions.session_denial(getattr(self, "session_key", ""), self.user_id)
        return (cause, None) if cause else ("", pending.payload(self.user_id))

    def _pending_after(self, op_id: Any, op: Operation | None) -> dict[str, Any] | None:
        """Sync: the waiting rounds to push after operation ``op_id`` changed (``op``: it, as
        this user may see it, or None), when this socket watches them and the operation entered
        ``awaiting_input`` or was among the rounds last sent (it left, or access to it ended);
        else None (no query)."""
        if not getattr(self, "pending_watch", False):
            return None
        entered = op is not None and op.status == Operation.Status.AWAITING_INPUT
        if not entered and str(op_id) not in getattr(self, "pending_ids", ()):
            return None
        return pending.payload(self.user_id)

    async def _send_pending(self, out: dict[str, Any] | None) -> None:
        if out is None:
            return
        self.pending_ids = frozenset(r["id"] for r in out["rounds"])
        await self.send_json(out)
