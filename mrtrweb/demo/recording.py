"""What reached a demo server: an ASGI middleware (:class:`CountingMiddleware`) recording every
JSON-RPC request POSTed to the app, and every response the client sent to the server's own requests,
into a thread-safe :class:`CallLog`; and the ASGI shapes (:data:`Scope`, :data:`Receive`, ...) and
body helpers (:func:`replaying`, :func:`read_body`) the demo and test servers share.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["ASGIApp", "CallLog", "CountingMiddleware", "Message", "Receive", "RecordedRequest", "RecordedResponse",
           "Scope", "Send", "read_body", "replaying"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One JSON-RPC request as the server received it.

    ``request_id`` is the wire id verbatim (str or int); ``tool`` is ``params.name`` for
    ``tools/call`` (else ``None``); ``params`` is the params object as received (sealed state
    included).
    """

    request_id: str | int | None
    method: str
    tool: str | None
    has_input_responses: bool
    has_request_state: bool
    params: Mapping[str, Any]

    @property
    def is_retry(self) -> bool:
        """Whether the request carried ``inputResponses`` or ``requestState``."""
        return self.has_input_responses or self.has_request_state


@dataclasses.dataclass(frozen=True)
class RecordedResponse:
    """One JSON-RPC response the client POSTed to the server (an answer to a server-to-client
    request, e.g. an ``ElicitResult``): its id, and its ``result`` or ``error`` object."""

    request_id: str | int | None
    result: Mapping[str, Any] | None
    error: Mapping[str, Any] | None


class CallLog:
    """Thread-safe record of the JSON-RPC requests the demo server received (and of the responses
    the client sent to the server's own requests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._responses: list[RecordedResponse] = []

    def add(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)

    def add_response(self, response: RecordedResponse) -> None:
        with self._lock:
            self._responses.append(response)

    def responses(self) -> list[RecordedResponse]:
        """The client's responses to the server's requests, oldest first."""
        with self._lock:
            return list(self._responses)

    def records(self, method: str | None = None) -> list[RecordedRequest]:
        """All records (oldest first), optionally only those of ``method``."""
        with self._lock:
            return [r for r in self._records if method is None or r.method == method]

    def tool_calls(self, tool: str | None = None) -> list[RecordedRequest]:
        """The ``tools/call`` records, optionally only those for ``tool``."""
        return [r for r in self.records("tools/call") if tool is None or r.tool == tool]

    def ids(self, method: str | None = None) -> list[str | int | None]:
        """The wire ids received, in order."""
        return [r.request_id for r in self.records(method)]

    def counts(self) -> collections.Counter[tuple[str | None, bool]]:
        """``tools/call`` counts keyed by ``(tool name, is_retry)``."""
        return collections.Counter((r.tool, r.is_retry) for r in self.tool_calls())

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._responses.clear()


class CountingMiddleware:
    """ASGI middleware recording every JSON-RPC request POSTed to the app into a :class:`CallLog`.

    It buffers the request body, records what parses (a single message or a batch; anything
    unparseable is ignored), and replays the body to the wrapped app unchanged.
    """

    def __init__(self, app: ASGIApp, log: CallLog) -> None:
        self.app = app
        self.log = log

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole request body; ``None`` when the client went away before it was complete (the
        wrapped app has then been called with that event passed on as-is)."""
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message.get("type") != "http.request":
                replayed = False

                async def replay_disconnect() -> Message:
                    nonlocal replayed
                    if not replayed:
                        replayed = True
                        return message
                    return await receive()

                await self.app(scope, replay_disconnect, send)
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = await self._read_body(scope, receive, send)
        if body is None:
            return
        self._record(body)
        await self.app(scope, replaying(body, receive), send)

    def _record(self, body: bytes) -> None:
        try:
            payload = json.loads(body)
        except ValueError:
            return
        for item in payload if isinstance(payload, list) else [payload]:
            if isinstance(item, dict) and "method" not in item and "id" in item and ("result" in item or "error" in item):
                result, error = item.get("result"), item.get("error")
                self.log.add_response(RecordedResponse(item["id"], result if isinstance(result, dict) else None,
                                                       error if isinstance(error, dict) else None))
                continue
            if not isinstance(item, dict) or not isinstance(item.get("method"), str) or "id" not in item:
                continue  # notifications are not requests
            params = item.get("params")
            params = params if isinstance(params, dict) else {}
            name = params.get("name") if item["method"] == "tools/call" else None
            self.log.add(
                RecordedRequest(
                    request_id=item.get("id"),
                    method=item["method"],
                    tool=name if isinstance(name, str) else None,
                    has_input_responses="inputResponses" in params,
                    has_request_state="requestState" in params,
                    params=params,
                )
            )


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands an app ``body`` (already read by a middleware) as one
    ``http.request`` message, then defers to the real ``receive`` (a disconnect, later)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def read_body(receive: Receive) -> bytes:
    """The whole body of an HTTP request (every ``http.request`` message until ``more_body`` is false)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body
