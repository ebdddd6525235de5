"""Everything a client POSTed to the legacy demo server (:mod:`.legacy`), in arrival order.

:class:`WireRecorder` (ASGI middleware, a :class:`~.recording.CountingMiddleware`) records into a
:class:`WireLog` (a :class:`~.recording.CallLog`, thread-safe): every JSON-RPC message with its
``Mcp-Session-Id`` (:class:`RecordedMessage`: requests, notifications, responses), the POSTs the
client closed before their response ended (:class:`ClosedPost`), and the notes tools write about
themselves (:class:`ToolNote`); one ``seq`` orders them all. Unparseable bodies are not recorded.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from collections.abc import Mapping
from typing import Any, Literal

from .recording import ASGIApp, CallLog, CountingMiddleware, Message, Receive, Scope, Send

__all__ = ["ClosedPost", "RecordedMessage", "ToolNote", "WireLog", "WireRecorder"]


@dataclasses.dataclass(frozen=True)
class RecordedMessage:
    """One JSON-RPC message the client POSTed, as received.

    ``seq`` orders it among everything the :class:`WireLog` recorded (messages, closed POSTs, tool
    notes); ``kind`` is ``"request"``, ``"notification"`` or ``"response"``; ``request_id`` is the
    wire id verbatim (``None`` for a notification); ``session_id`` is the ``Mcp-Session-Id`` header
    the POST carried (``None`` before the session exists, and at 2026-07-28).
    """

    seq: int
    kind: Literal["request", "notification", "response"]
    method: str | None
    request_id: str | int | None
    params: Mapping[str, Any]
    session_id: str | None

    @property
    def cancelled_id(self) -> str | int | None:
        """For a ``notifications/cancelled``: its ``params.requestId`` verbatim (else ``None``)."""
        return self.params.get("requestId") if self.method == "notifications/cancelled" else None


@dataclasses.dataclass(frozen=True)
class ClosedPost:
    """The client closed a POST carrying requests before the server had ended its response."""

    seq: int
    request_ids: tuple[str | int, ...]
    session_id: str | None


@dataclasses.dataclass(frozen=True)
class ToolNote:
    """What a tool handler noted about itself: ``event`` is ``"started"``, ``"cancelled"`` (its
    handler was cancelled at ``step``) or ``"finished"``; ``request_id`` is the call's wire id.
    ``cancel_requested``: whether the SDK had marked the call cancelled by the client's
    ``notifications/cancelled`` for its id (rather than the handler being cancelled for another
    reason, e.g. its session being closed); ``None`` when unknown."""

    seq: int
    tool: str
    request_id: str | int | None
    event: Literal["started", "cancelled", "finished"]
    step: int
    cancel_requested: bool | None = None


class WireLog(CallLog):
    """A :class:`~.recording.CallLog` (requests, and responses to the server's requests)
    that also keeps, in one arrival order (``seq``): every JSON-RPC message including
    notifications (:meth:`messages`), the POSTs the client closed early (:meth:`closed_posts`),
    and the notes tools write about themselves (:meth:`tool_notes`). Thread-safe."""

    def __init__(self) -> None:
        super().__init__()
        self._wire_lock = threading.Lock()
        self._seq = itertools.count(1)
        self._messages: list[RecordedMessage] = []
        self._closed: list[ClosedPost] = []
        self._notes: list[ToolNote] = []

    def add_message(self, kind: Literal["request", "notification", "response"], method: str | None,
                    request_id: str | int | None, params: Mapping[str, Any], session_id: str | None) -> None:
        with self._wire_lock:
            self._messages.append(RecordedMessage(next(self._seq), kind, method, request_id, params, session_id))

    def add_closed_post(self, request_ids: tuple[str | int, ...], session_id: str | None) -> None:
        with self._wire_lock:
            self._closed.append(ClosedPost(next(self._seq), request_ids, session_id))

    def note(self, tool: str, request_id: str | int | None, event: Literal["started", "cancelled", "finished"],
             step: int, cancel_requested: bool | None = None) -> None:
        """A tool notes what happened to its call (see :class:`ToolNote`)."""
        with self._wire_lock:
            self._notes.append(ToolNote(next(self._seq), tool, request_id, event, step, cancel_requested))

    def messages(self, *, after: int = 0) -> list[RecordedMessage]:
        """Every JSON-RPC message received (oldest first), optionally only those with ``seq > after``."""
        with self._wire_lock:
            return [m for m in self._messages if m.seq > after]

    def notifications(self, method: str | None = None) -> list[RecordedMessage]:
        """The notifications received (oldest first), optionally only those of ``method``."""
        return [m for m in self.messages() if m.kind == "notification" and (method is None or m.method == method)]

    def cancellations(self) -> list[RecordedMessage]:
        """The ``notifications/cancelled`` received (oldest first); see :attr:`RecordedMessage.cancelled_id`."""
        return self.notifications("notifications/cancelled")

    def closed_posts(self) -> list[ClosedPost]:
        """The POSTs carrying requests that the client closed before their response ended."""
        with self._wire_lock:
            return list(self._closed)

    def tool_notes(self, tool: str | None = None) -> list[ToolNote]:
        """The tools' notes (oldest first), optionally only those of ``tool``."""
        with self._wire_lock:
            return [n for n in self._notes if tool is None or n.tool == tool]

    def clear(self) -> None:
        super().clear()
        with self._wire_lock:
            self._messages.clear()
            self._closed.clear()
            self._notes.clear()


class WireRecorder(CountingMiddleware):
    """ASGI middleware recording into a :class:`WireLog`: what :class:`CountingMiddleware` records
    (requests, responses), plus every message in arrival order with its session, and POSTs the
    client closed (``http.disconnect``) before the app ended their response."""

    log: WireLog

    def __init__(self, app: ASGIApp, log: WireLog) -> None:
        super().__init__(app, log)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        session_id = next((v.decode("latin-1") for k, v in scope.get("headers", [])
                           if k.lower() == b"mcp-session-id"), None)
        self._record(body)  # CallLog: requests and responses
        request_ids = self._record_wire(body, session_id)
        sent_body, ended = False, False

        async def replay() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            event = await receive()
            if event.get("type") == "http.disconnect" and request_ids and not ended:
                self.log.add_closed_post(request_ids, session_id)
            return event

        async def watch(event: Message) -> None:
            nonlocal ended
            if event.get("type") == "http.response.body" and not event.get("more_body", False):
                ended = True
            await send(event)

        await self.app(scope, replay, watch)

    def _record_wire(self, body: bytes, session_id: str | None) -> tuple[str | int, ...]:
        """Record each JSON-RPC message of ``body``; return the ids of the requests among them."""
        try:
            payload = json.loads(body)
        except ValueError:
            return ()
        ids: list[str | int] = []
        for item in payload if isinstance(payload, list) else [payload]:
            if not isinstance(item, dict):
                continue
            params = item.get("params")
            params = params if isinstance(params, dict) else {}
            method = item.get("method") if isinstance(item.get("method"), str) else None
            if method is None:
                if "id" in item and ("result" in item or "error" in item):
                    self.log.add_message("response", None, item["id"], {}, session_id)
                continue
            if "id" in item:
                self.log.add_message("request", method, item["id"], params, session_id)
                ids.append(item["id"])
            else:
                self.log.add_message("notification", method, None, params, session_id)
        return tuple(ids)
