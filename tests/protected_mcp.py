"""A protected MCP server on loopback for the authorization tests: the demo ``MCPServer`` behind a
tiny ASGI middleware that demands ``Authorization: Bearer <token>`` with a token it accepts.

It stands for a resource server: no authorization server, no token introspection; the test says
which bearer tokens are valid (:attr:`BearerCheck.accepted`, changed while it runs). A request
without an accepted token is answered ``401`` with ``WWW-Authenticate: Bearer`` and never reaches
the MCP server. Every POST is recorded twice: by the demo's :class:`CountingMiddleware` (outside,
so refused requests count too: ``handle.calls``) and here with the SHA-256 of the bearer it carried
(:attr:`BearerCheck.seen`), never the token itself.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from mrtrweb.demo.server import build_demo_app, replaying, serve_asgi_in_thread


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class BearerCheck:
    """ASGI middleware: ``accepted`` bearer tokens pass; others get 401. ``seen``: one
    ``(token digest or "", method, tool, is_retry, accepted)`` per JSON-RPC request POSTed."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.accepted: set[str] = set()
        self._lock = threading.Lock()
        self._seen: list[tuple[str, str, str | None, bool, bool]] = []

    @property
    def seen(self) -> list[tuple[str, str, str | None, bool, bool]]:
        with self._lock:
            return list(self._seen)

    def tool_calls(self, tool: str) -> list[tuple[str, bool, bool]]:
        """``(token digest, is_retry, accepted)`` of each ``tools/call`` of ``tool``."""
        return [(d, retry, ok) for d, method, name, retry, ok in self.seen if method == "tools/call" and name == tool]

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        token = header[7:] if header[:7].lower() == "bearer " else ""
        ok = bool(token) and token in self.accepted
        body = b""
        if scope.get("method") == "POST":
            chunks, more = [], True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            self._record(token, body, ok)
        if not ok:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b'Bearer realm="mrtrweb-test"'),
                                    (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"error":"invalid_token"}'})
            return
        await self.app(scope, replaying(body, receive) if scope.get("method") == "POST" else receive, send)

    def _record(self, token: str, body: bytes, ok: bool) -> None:
        try:
            payload = json.loads(body)
        except ValueError:
            return
        for item in payload if isinstance(payload, list) else [payload]:
            if not isinstance(item, dict) or not isinstance(item.get("method"), str) or "id" not in item:
                continue
            params = item.get("params") if isinstance(item.get("params"), dict) else {}
            name = params.get("name") if item["method"] == "tools/call" else None
            retry = "inputResponses" in params or "requestState" in params
            with self._lock:
                self._seen.append((token_digest(token) if token else "", item["method"],
                                   name if isinstance(name, str) else None, retry, ok))


def serve_protected():
    """The demo server behind :class:`BearerCheck`, in a thread: ``(handle, check)``;
    ``handle.url`` is the endpoint, ``handle.calls`` counts every ``tools/call`` POSTed."""
    check = BearerCheck(build_demo_app())
    return serve_asgi_in_thread(check), check
