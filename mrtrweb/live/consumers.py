"""The per-user WebSocket: operation updates pushed as server-rendered HTML.

Mounted behind ``SameOriginValidator(AuthMiddlewareStack(...))`` (:mod:`mrtrweb.live.origin`, see
:mod:`mrtrweb.routing`). An anonymous connection is closed with code 4401, an inactive user's with
4403. Each connection joins the group ``mrtrweb.user.<id>``; on ``operation.update`` it re-reads
the operation *for this user*, while they may still act on it (:mod:`mrtrweb.tenancy.access`: active,
member of its tenant, its server enabled), and sends ``{"type": "operation", "id", "status",
"html"}`` (``html`` null when the panel is over ``MAX_PUSH_BYTES``: the page then fetches
it); progress is pushed under the same check, and so is a server's listing change
(``{"type": "listing", "server", "kind"}``, :meth:`OperationsConsumer.server_listing`). On
``access.revoked`` (the user's access ended somewhere) the connection is closed with code 4403.
A page showing the navigation's "Waiting for you" sends ``{"type": "pending.watch"}``: its socket is
then sent the user's waiting rounds (``{"type": "pending", "count", "rounds"}``,
:mod:`mrtrweb.consent.pending`, re-read under the same access checks) at once and whenever one of their
operations enters or leaves ``awaiting_input``. A read resource's page sends ``{"type": "resource.watch"}``
and is told when the server updates it (:mod:`mrtrweb.live.resource_watch`).

A connection lives only as long as the sign-in session that opened it (:mod:`mrtrweb.live.sessions`):
it also joins its session's group, is closed with code 4401 on ``session.ended`` (sign-out), and
re-validates its session on ``session.check`` (the password changed), before every push and at
least every ``sessions.RECHECK_S`` seconds, closing with 4401 once the session no longer holds.
A session that cannot be *read* (its database down) is not one that is gone: nothing is pushed
on it and the socket closes as for any outage (1011), so the page keeps its card and reconnects.

A service outage never raises out of the ASGI application: when the channel layer (Redis
restarted, stopped or unreachable) or the database fails under a connection -- its channel
receive, a group join, a handler re-reading an operation -- the connection is closed with code
:data:`OUTAGE_CLOSE_CODE` (1011; the page shows "Live updates paused", reconnects with back-off
and re-reads its panel when the socket is back), its tasks are cancelled, and one WARNING line
is logged per connection, without a traceback (:meth:`OperationsConsumer.__call__`). A
channel-layer outage closes every other socket of the worker too, and so does a restart of the
layer's Redis that no socket noticed (:mod:`mrtrweb.live.layerwatch`): its groups are gone, so those
sockets would otherwise stay open and never get a push again.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import translation

from ..tenancy import access
from .. import conf
from . import layerwatch, sessions
from ..runtime import metrics, outage, push
from .languages import scope_language
from .csrf import form_token
from ..models import Operation
from ..consent.panels import record_pushed, render_push
from .pending_watch import PendingWatch
from .resource_watch import ResourceWatching
from .server_log import ServerLogPush
from .chat_push import ChatPush
from ..runtime.push import user_group

#: what a pushed task status may be (mrtrweb.mcp.tasks.STATUSES)
_TASK_STATUSES = frozenset({"working", "input_required", "completed", "failed", "cancelled"})
logger = logging.getLogger("mrtrweb.consumers")

#: close code of a connection ended by a service outage (RFC 6455 1011, "internal error": the
#: page reconnects; 4401/4403 are the codes it does not reconnect on)
OUTAGE_CLOSE_CODE = 1011
#: seconds one group join/leave may take (a channel layer that accepts connections but does not
#: answer would otherwise hold it for the layer's socket timeout)
GROUP_CALL_TIMEOUT_S = 5.0

#: at most this many push-group joins/leaves (``group_add``/``group_discard``) of one worker in
#: flight at once. Thousands of sockets closing together (a deploy, a network blip, a page-wide
#: reload) otherwise ask the channel layer for thousands of Redis connections at the same moment,
#: and channels-redis's pool fails at once beyond its ``max_connections`` (measured: 5,000 sockets
#: closing on one worker, pool of 1,000). Queued here, they finish in about a second.
GROUP_CALLS_MAX = 50
_group_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def group_slots() -> asyncio.Semaphore:
    """This event loop's semaphore bounding group joins/leaves (:data:`GROUP_CALLS_MAX`)."""
    loop = asyncio.get_running_loop()
    slots = _group_slots.get(loop)
    if slots is None:
        slots = _group_slots[loop] = asyncio.Semaphore(GROUP_CALLS_MAX)
    return slots


async def _group_call(call, group: str, channel: str) -> None:
    """``await call(group, channel)`` (a layer's ``group_add``/``group_discard``) in one of this
    loop's :func:`group_slots`, given up after :data:`GROUP_CALL_TIMEOUT_S` (TimeoutError)."""
    async with group_slots():
        await asyncio.wait_for(call(group, channel), GROUP_CALL_TIMEOUT_S)


class OperationsConsumer(PendingWatch, ResourceWatching, ServerLogPush, ChatPush, AsyncJsonWebsocketConsumer):
    async def __call__(self, scope, receive, send) -> None:
        """Channels' dispatch loop, with a service outage ending the connection cleanly.

        An outage (:func:`mrtrweb.runtime.outage.kind`: a Redis error of the channel layer, a database
        error, a connection refused or timed out) raised out of the loop -- by its channel
        receive (``await_many_dispatch``) or any handler -- closes the socket with
        :data:`OUTAGE_CLOSE_CODE` (a handshake not yet accepted is refused), cancels this
        connection's tasks, leaves its groups when the layer lets it, and logs one WARNING line.
        Anything else is a bug and still raises."""
        try:
            await super().__call__(scope, receive, send)
        except Exception as exc:
            what = outage.kind(exc, redis="channel layer")
            if what is None:
                raise
            await self._closed_by_outage(what, exc)

    async def _closed_by_outage(self, what: str, exc: BaseException) -> None:
        self.session_closed = True  # no re-check, no push from here on
        self._cancel_tasks()
        layerwatch.unwatch(self)
        if what == "channel layer":  # the others' groups may be gone with it
            await layerwatch.outage_seen(self, f"unavailable ({type(exc).__name__})")
        if getattr(self, "disconnected", False) or getattr(self, "closed_for_outage", False):
            # the browser had gone already, or the layer watch closed this socket: nothing to close
            logger.debug("websocket: user %s's connection ended; the %s failed meanwhile (%s)",
                         getattr(self, "user_id", None), what, type(exc).__name__)
            await self._leave_groups(quiet=True)
            return
        logger.warning("websocket: user %s's connection closed (code %s): the %s is unavailable (%s); "
                       "the page reconnects", getattr(self, "user_id", None), OUTAGE_CLOSE_CODE, what,
                       type(exc).__name__)
        try:
            await self.base_send({"type": "websocket.close", "code": OUTAGE_CLOSE_CODE})
        except Exception as close_exc:  # noqa: BLE001 -- the connection is gone either way
            logger.debug("websocket: close after an outage failed (%s)", type(close_exc).__name__)
        await self._leave_groups(quiet=True)

    async def close_for_outage(self) -> None:
        """Close this socket (code :data:`OUTAGE_CLOSE_CODE`) for a channel-layer outage another
        socket or the layer watch saw (:mod:`mrtrweb.live.layerwatch`, which logged it); the page
        reconnects and joins its groups again."""
        if getattr(self, "closed_for_outage", False) or getattr(self, "disconnected", False):
            return
        self.closed_for_outage = self.session_closed = True
        self._cancel_tasks()
        logger.debug("websocket: user %s's connection closed (code %s) for a channel-layer outage",
                     getattr(self, "user_id", None), OUTAGE_CLOSE_CODE)
        try:
            await self.close(code=OUTAGE_CLOSE_CODE)
        except Exception as exc:  # noqa: BLE001 -- the connection is gone either way
            logger.debug("websocket: close for an outage failed (%s)", type(exc).__name__)

    def _cancel_tasks(self) -> None:
        recheck = getattr(self, "recheck", None)
        for task in [recheck, *getattr(self, "checks", ())]:
            if task is not None and task is not asyncio.current_task():
                task.cancel()

    async def _leave_groups(self, *, quiet: bool = False) -> None:
        """Leave this connection's push and session groups; a failure is logged (at DEBUG when
        ``quiet``: the outage was logged already), never raised -- a layer's group entry expires
        by itself."""
        groups = [(self.group, "its push group")] if getattr(self, "group", None) else []
        if groups and getattr(self, "session_key", ""):
            groups.append((sessions.session_group(self.session_key), "its session's group"))
        self.group = None
        for group, what in groups:
            try:
                await _group_call(self.channel_layer.group_discard, group, self.channel_name)
            except Exception as exc:  # noqa: BLE001 -- the layer's group entry expires by itself
                (logger.debug if quiet else logger.warning)(
                    "websocket: user %s could not leave %s (%s)", self.user_id, what, type(exc).__name__)

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.user_id = user.pk
        self.language = scope_language(self.scope)
        if not await access.user_may_connect(user):
            logger.info("websocket: user %s is inactive or gone; connection refused", self.user_id)
            await self.close(code=access.CLOSE_CODE)
            return
        group = user_group(user.pk)
        try:
            await _group_call(self.channel_layer.group_add, group, self.channel_name)
        except Exception as exc:  # noqa: BLE001 -- the page reconnects later; never a crash
            logger.warning("websocket: user %s could not join its push group (%s); connection closed",
                           self.user_id, type(exc).__name__)
            await self.close(code=OUTAGE_CLOSE_CODE)
            return
        self.group = group
        # the session's key stays in this object only: its group is named by a digest of it
        self.session_key = getattr(self.scope.get("session"), "session_key", None) or ""
        if self.session_key:
            try:
                await _group_call(self.channel_layer.group_add, sessions.session_group(self.session_key),
                                  self.channel_name)
            except Exception as exc:  # noqa: BLE001 -- every push re-validates the session anyway
                logger.warning("websocket: user %s could not join its session's group (%s)", self.user_id,
                               type(exc).__name__)
        await self.accept()
        self.recheck = asyncio.create_task(self._recheck_periodically())
        layerwatch.watch(self)  # closed if the layer restarts under it (its groups gone)

    async def disconnect(self, code: int) -> None:
        self.disconnected = True
        layerwatch.unwatch(self)
        self._cancel_tasks()
        await self.unwatch_resources()  # a read resource's page stops following it (.resource_watch)
        await self._leave_groups(quiet=getattr(self, "closed_for_outage", False))

    async def dispatch(self, message) -> None:
        """Nothing is pushed once this connection's session ended; progress of an operation is
        pushed only while the user may see it (as updates are). An ``operation.update`` is
        handled whole in one thread hop (:meth:`operation_update`: the session re-validated in it)."""
        if message.get("type") == "operation.update":
            if not getattr(self, "session_closed", False):
                await self.operation_update(message)
            return
        if message.get("type") in ("operation.progress", "operation.log", "server.listing", "chat.delta", "chat.update") \
                and not await self._session_holds():
            return
        if message.get("type") in ("operation.progress", "operation.log") and \
                await access.visible_operation(self.user_id, message.get("operation_id")) is None:
            return
        await super().dispatch(message)

    async def _session_holds(self) -> bool:
        """Whether this connection's session still authenticates its user; if not, close (4401)."""
        if getattr(self, "session_closed", False):
            return False
        cause = await sync_to_async(sessions.session_denial)(getattr(self, "session_key", ""), self.user_id)
        if not cause:
            return True
        await self._end_session(cause)
        return False

    async def _end_session(self, cause: str) -> None:
        if getattr(self, "session_closed", False):
            return
        self.session_closed = True
        if cause == sessions.SESSION_UNREADABLE:  # cannot be read now, not gone: an outage (1011)
            self._cancel_tasks()
            layerwatch.unwatch(self)
            logger.warning("websocket: user %s's connection closed (code %s): its session cannot be read now; the "
                           "page keeps what it shows and reconnects", self.user_id, OUTAGE_CLOSE_CODE)
            self.closed_for_outage = True
            await self.close(code=OUTAGE_CLOSE_CODE)
            return
        if cause == sessions.USER_ENDED:  # the user is inactive or gone: access ended (4403)
            logger.info("websocket: user %s's access ended (%s); connection closed", self.user_id, cause)
            await self.close(code=access.CLOSE_CODE)
            return
        logger.info("websocket: user %s's session ended (%s); connection closed", self.user_id, cause)
        await self.close(code=sessions.CLOSE_CODE)

    async def _recheck_periodically(self) -> None:
        """Re-validate the session every ``sessions.RECHECK_S`` seconds, pushes or not."""
        try:
            while not getattr(self, "session_closed", False):
                await asyncio.sleep(sessions.RECHECK_S)
                await self._session_holds()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the next push re-validates anyway
            logger.warning("websocket: user %s's session re-check failed (%s)", self.user_id, type(exc).__name__)

    async def session_ended(self, event) -> None:
        """This connection's session signed out (on some worker): close."""
        await self._end_session(str(event.get("cause", sessions.SIGNED_OUT)))

    async def session_check(self, event) -> None:
        """The user's sessions may have ended (their password changed): re-validate this one, a
        moment later (``sessions.CHECK_DELAY_S``), so that the session that changed the password,
        whose auth hash Django updates just after the save, keeps its socket; pushes meanwhile are
        re-validated anyway."""
        task = asyncio.create_task(self._check_later())
        self.checks = getattr(self, "checks", set())
        self.checks.add(task)
        task.add_done_callback(self.checks.discard)

    async def _check_later(self) -> None:
        try:
            await asyncio.sleep(sessions.CHECK_DELAY_S)
            await self._session_holds()
        except Exception as exc:  # noqa: BLE001 -- the next push re-validates anyway
            logger.warning("websocket: user %s's session check failed (%s)", self.user_id, type(exc).__name__)

    async def access_revoked(self, event) -> None:
        """The user's access ended somewhere: close (the page reloads and sees what is left)."""
        logger.info("websocket: user %s's access ended (%s); connection closed", self.user_id, event.get("cause"))
        await self.close(code=access.CLOSE_CODE)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """Bad input from a browser is ignored (logged), never a crash of the connection."""
        if text_data is None or len(text_data) > 4096:
            logger.info("websocket: ignored a binary or oversized frame from user %s", self.user_id)
            return
        try:
            content = await self.decode_json(text_data)
        except (ValueError, RecursionError):  # RecursionError: nested past the decoder's depth
            logger.info("websocket: ignored a frame that is not JSON from user %s", self.user_id)
            return
        await self.receive_json(content)

    async def receive_json(self, content, **kwargs) -> None:
        # The browser only listens (answers go through CSRF-protected POSTs): a ping, or asking
        # for the navigation's waiting rounds
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})
        elif isinstance(content, dict) and content.get("type") == "pending.watch":
            await self.watch_pending()
        elif isinstance(content, dict) and content.get("type") == "resource.watch":
            self.start_watching(content.get("operation"))  # a task: a server's answer is never waited for here

    async def operation_progress(self, event) -> None:
        """Progress of a call in flight (numbers and the server's short message, shown escaped); for
        a task-augmented call its ``task_status`` too (one of the task statuses, else left out)."""
        out = {"type": "progress", "id": event.get("operation_id"), "progress": event.get("progress"),
               "total": event.get("total"), "message": event.get("message", "")}
        if event.get("task_status") in _TASK_STATUSES:
            out["task_status"] = event["task_status"]
        await self.send_json(out)

    async def server_listing(self, event) -> None:
        """A server said its tools, prompts or resources changed (:mod:`mrtrweb.servers.connections`): tell
        the page, while the user may see that server; ``{"type": "listing", "server": <int>,
        "kind": "tools" | "prompts" | "resources"}`` (no server text: an open server page re-reads
        its listing)."""
        server_id, kind = event.get("server_id"), event.get("kind")
        if not isinstance(server_id, int) or kind not in ("tools", "prompts", "resources"):
            return
        if not await access.visible_server(self.user_id, server_id):
            return
        await self.send_json({"type": "listing", "server": server_id, "kind": kind})

    async def operation_update(self, event) -> None:
        """Push the operation's panel, rendered for this user, in one thread hop
        (:meth:`_panel_for`: the session, the operation while they may see it, the panel); then,
        when it showed a round's card, write that card's consent receipt (a second hop, after
        the card went out: an answer to the round is refused until the receipt is written, and
        when it cannot be written)."""
        csrf = form_token(self.scope.get("cookies", {}).get(settings.CSRF_COOKIE_NAME, ""))
        # in the loop's thread pool, not the one thread all sync work shares (Channels runs a consumer in no
        # ThreadSensitiveContext): pushes render side by side (each hop closes its database connection)
        cause, op, html, rnd, waiting = await database_sync_to_async(self._panel_for, thread_sensitive=False)(
            event.get("operation_id"), csrf)
        if cause:
            await self._end_session(cause)
            return
        if op is None:  # not this user's, or their access to it ended
            await self._send_pending(waiting)
            return
        if len(html.encode("utf-8", "replace")) > int(conf.get("MAX_PUSH_BYTES")):
            # too large for a push: the page fetches the panel itself (``"html": null``), and its
            # fetch writes the receipt of the card it shows
            logger.info("websocket: panel of operation %s over MAX_PUSH_BYTES; the page fetches it", op.id)
            html = None
        sent = False
        try:
            await self.send_json({"type": "operation", "id": str(op.id), "status": op.status, "html": html})
            sent = html is not None  # a card that did not go out has no receipt
            metrics.observe_push(op, self.channel_name)  # a round's card: mrtrweb_push_latency_seconds
        finally:
            if rnd is not None:  # the receipt, and the mark _panel_for set taken down (one hop)
                await database_sync_to_async(_record_receipt, thread_sensitive=False)(op, rnd, sent)
        await self._send_pending(waiting)  # the navigation's count, after the card itself

    def _panel_for(self, op_id: Any, csrf: str) -> tuple[str, Operation | None, str, Any, dict[str, Any] | None]:
        """Sync: ``(cause, op, html, round, waiting)`` of one push. ``cause``: why this
        connection's session no longer holds (:func:`mrtrweb.live.sessions.session_denial`; the rest is
        then empty); ``op`` None: not this user's operation, or their access to it ended
        (:func:`_visible_operation`); else its panel and the round whose card it shows
        (:func:`mrtrweb.consent.panels.render_push`). ``waiting``: the navigation's waiting rounds when
        they changed (:meth:`_pending_after`), else None."""
        cause = sessions.session_denial(getattr(self, "session_key", ""), self.user_id)
        if cause:
            return cause, None, "", None, None
        op = access.visible_operation_sync(self.user_id, op_id)
        if op is None:
            return "", None, "", None, self._pending_after(op_id, None)
        with translation.override(getattr(self, "language", None) or settings.LANGUAGE_CODE):
            html, rnd = render_push(op, csrf)  # in the language of this person's pages
        if rnd is not None:  # an answer quicker than the receipt waits for it (views.answers)
            push.mark_receipt_pending(op.id, rnd.number, True)
        return "", op, html, rnd, self._pending_after(op.id, op)


def _record_receipt(op: Operation, rnd: Any, sent: bool) -> None:
    """Sync: the consent receipt of the card a push sent (``sent``: :func:`record_pushed`; a card
    too large to push is fetched by the page, whose fetch writes it), then the mark down."""
    try:
        if sent:
            record_pushed(op, rnd)
    finally:
        push.mark_receipt_pending(op.id, rnd.number, False)
