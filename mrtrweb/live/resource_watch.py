"""A read resource's page follows that resource on the person's WebSocket (issue 28, item 4).

The page of a completed ``resources/read`` sends ``{"type": "resource.watch", "operation": "<id>"}``
when its socket opens; it is followed in a task of its own (the socket never waits for a server). If the person may still see that operation
(:func:`mrtrweb.tenancy.access.visible_operation`) and its server declares ``resources.subscribe``,
the person's pooled connection to the server (:func:`mrtrweb.servers.connections.connection_for`)
follows the URI that was read (:mod:`mrtrweb.mcp.resource_watch`: ``resources/subscribe`` or
``subscriptions/listen``) and the socket is sent ``{"type": "resource.watching", "operation":
"<id>"}``; when the server says it changed, this socket is sent
``{"type": "resource", "operation": "<id>"}`` -- no server text -- after the session and the
access are checked again, and the page shows "A newer version is available" with its "Read
again" button (a POST of ``operations/<id>/rerun/``, CSRF: a new ``resources/read``). When the socket
closes, its watches end (the last page of a URI unsubscribes).

At most :data:`MAX_WATCHES_PER_SOCKET` operations per socket. Mixed into
:class:`mrtrweb.live.consumers.OperationsConsumer`, which supplies ``user_id``, ``scope``,
``send_json`` and ``_session_holds``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from ..mcp import McpCallError
from ..models import Operation
from ..servers import connections
from ..tenancy import access
from ..text import results

__all__ = ["MAX_WATCHES_PER_SOCKET", "ResourceWatching"]

logger = logging.getLogger("mrtrweb.consumers")

#: the most read resources one socket follows
MAX_WATCHES_PER_SOCKET: Final = 4


class ResourceWatching:
    """The resource-following half of the person's socket (see the module docstring)."""

    user_id: Any
    scope: Any
    resource_watches: dict[str, tuple[Any, str, Any]]  # operation id -> (connection, uri, listener)

    def start_watching(self, op_id: Any) -> None:
        """Follow the resource operation ``op_id`` read, for this socket, in a task of its own: the
        socket's other messages and pushes never wait for a server (a subscribe is answered, or
        given up, within :data:`mrtrweb.mcp.resource_watch.ASK_TIMEOUT_S`). The watch is claimed
        here, before anything is awaited, so repeated messages neither follow it twice nor pass
        :data:`MAX_WATCHES_PER_SOCKET`."""
        watches = self.__dict__.setdefault("resource_watches", {})
        if not isinstance(op_id, str) or len(op_id) > 64 or op_id in watches or getattr(self, "session_closed", False) \
                or getattr(self, "disconnected", False):
            return
        if len(watches) >= MAX_WATCHES_PER_SOCKET:
            logger.info("websocket: user %s follows %d resources on one socket already", self.user_id, len(watches))
            return
        watches[op_id] = (None, None, None)  # claimed
        tasks = self.__dict__.setdefault("resource_watch_tasks", set())
        task = asyncio.get_running_loop().create_task(self.watch_resource(op_id), name="websocket resource watch")
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def watch_resource(self, op_id: str) -> None:
        """Follow the resource operation ``op_id`` read (claimed by :meth:`start_watching`; see the
        module doc). Anything else (not the person's, not a completed read, no subscribe, a server
        fault) is ignored and logged, the claim let go; never raises for it."""
        watches = self.__dict__.setdefault("resource_watches", {})
        followed = False
        try:
            followed = await self._follow(op_id, watches)
        finally:
            if not followed:
                watches.pop(op_id, None)

    async def _follow(self, key: str, watches: dict[str, tuple[Any, Any, Any]]) -> bool:
        op = await access.visible_operation(self.user_id, key)
        if op is None or str(op.id) != key or op.method != "resources/read" or op.status != Operation.Status.COMPLETED:
            return False
        params = results.stored_params(op.params)
        uri = params.get("uri") if isinstance(params, dict) else None
        if not isinstance(uri, str):
            return False
        listener = self._resource_listener(key)
        watches[key] = (None, uri, listener)
        try:
            conn = await connections.connection_for(self.scope["user"], op.server)
            followed = await conn.watch_resource(uri, listener)
        except McpCallError as exc:
            logger.info("websocket: user %s: server %s not reachable to follow a resource (%s)", self.user_id,
                        op.server_id, exc.code)
            return False
        except Exception as exc:  # noqa: BLE001 -- its credentials unreadable now, say: only the hint is lost
            logger.warning("websocket: user %s: a resource of server %s not followed (%s)", self.user_id,
                           op.server_id, type(exc).__name__)
            return False
        if not followed:
            return False
        watches[key] = (conn, uri, listener)
        if getattr(self, "disconnected", False):  # the socket closed while the server was asked
            await self.unwatch_resources()
            return True
        await self.send_json({"type": "resource.watching", "operation": key})
        return True

    def _resource_listener(self, key: str):
        async def updated(_uri: str) -> None:
            if getattr(self, "disconnected", False) or not await self._session_holds():
                return
            if await access.visible_operation(self.user_id, key) is None:  # access ended meanwhile
                return
            await self.send_json({"type": "resource", "operation": key})

        return updated

    async def unwatch_resources(self) -> None:
        """The socket closed: it follows nothing any more. Never raises."""
        watches = self.__dict__.get("resource_watches") or {}
        for key, (conn, uri, listener) in list(watches.items()):
            if conn is None:
                continue
            watches.pop(key, None)
            try:
                await conn.unwatch_resource(uri, listener)
            except Exception as exc:  # noqa: BLE001 -- the connection forgets it when it closes anyway
                logger.info("websocket: user %s: a resource's watch did not end cleanly (%s)", self.user_id,
                            type(exc).__name__)
