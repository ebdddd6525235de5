"""An MCP server whose authorization discovery points where a client must not go.

Every ``/<case>/mcp`` answers ``401`` with ``WWW-Authenticate: Bearer resource_metadata="..."``
chosen by the case (:data:`CASES`); the server also answers its own well-known URLs as the case
says. :attr:`HostileDiscovery.requests` records ``(host header, path)`` of every request, so a
test sees what the client fetched (e.g. never the redirect's other host).

Cases (``AS`` is the real test authorization server, so only the hostile step fails):

``wrong-resource``  its metadata names another resource (RFC 9728 §3.3: must match the server)
``cloud-metadata``  ``resource_metadata`` is ``http://169.254.169.254/latest/meta-data/``
``private``         ``resource_metadata`` is ``http://10.0.0.1/.well-known/oauth-protected-resource``
``zero-address``    ``resource_metadata`` is ``http://0.0.0.0:PORT/...``: on Linux that reaches this
                    very server (a known bypass of loopback-only checks), so a guard that let it
                    through is seen in :attr:`HostileDiscovery.requests` (host ``0.0.0.0:PORT``)
``file``            ``resource_metadata`` is ``file:///etc/passwd``
``redirect``        its metadata URL answers ``302`` to the same path on ``localhost`` (another host)
``as-private``      good metadata, but the authorization server is ``http://10.1.2.3``
"""

from __future__ import annotations

import json
import threading
from typing import Any

CASES = ("wrong-resource", "cloud-metadata", "private", "zero-address", "file", "redirect", "as-private")
WELL_KNOWN = "/.well-known/oauth-protected-resource"
#: the refusal each case gets. ``redirect`` is not refused: the redirect to another host is not
#: followed, the well-known URLs then find no metadata, and a client may fall back (MCP 2025-03-26
#: back-compat) to the default endpoints at the MCP server's own origin -- never to another host.
#: Tests check for every case that only this server's host was fetched.
DETERMINED_CODES = {"wrong-resource": "authorization_failed", "cloud-metadata": "outbound_refused",
                    "private": "outbound_refused", "zero-address": "outbound_refused",
                    "file": "outbound_refused", "as-private": "outbound_refused"}
SAME_ORIGIN_FALLBACK = frozenset({"redirect"})


class HostileDiscovery:
    """ASGI app (see the module docstring); ``base`` (``http://127.0.0.1:PORT``) is set once served."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self.base = ""
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []

    def url(self, case: str) -> str:
        return f"{self.base}/{case}/mcp"

    def _metadata_url(self, case: str) -> str:
        return {"cloud-metadata": "http://169.254.169.254/latest/meta-data/",
                "private": "http://10.0.0.1/.well-known/oauth-protected-resource",
                "file": "file:///etc/passwd",
                "zero-address": f"{self.base.replace('127.0.0.1', '0.0.0.0')}{WELL_KNOWN}/{case}/mcp",
                }.get(case, f"{self.base}{WELL_KNOWN}/{case}/mcp")

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        host = dict(scope["headers"]).get(b"host", b"").decode()
        path = scope["path"]
        with self._lock:
            self.requests.append((host, path))
        while (await receive()).get("more_body"):
            pass
        status, headers, body = self._answer(host, path)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})
        await send({"type": "http.response.body", "body": body})

    def _answer(self, host: str, path: str) -> tuple[int, dict[str, str], bytes]:
        parts = path.strip("/").split("/")
        if path.startswith(WELL_KNOWN + "/") and len(parts) == 4 and parts[2] in CASES:
            case = parts[2]
            if case == "redirect" and not host.startswith("localhost"):
                port = host.rpartition(":")[2]
                return 302, {"location": f"http://localhost:{port}{path}"}, b""
            resource = f"{self.base}/elsewhere/mcp" if case == "wrong-resource" else f"{self.base}/{case}/mcp"
            servers = ["http://10.1.2.3"] if case == "as-private" else [self.issuer]
            doc = {"resource": resource, "authorization_servers": servers, "scopes_supported": ["mcp"]}
            return 200, {"content-type": "application/json"}, json.dumps(doc).encode()
        if len(parts) == 2 and parts[0] in CASES and parts[1] == "mcp":
            challenge = f'Bearer error="invalid_token", resource_metadata="{self._metadata_url(parts[0])}"'
            return 401, {"www-authenticate": challenge, "content-type": "application/json"}, b'{"error":"invalid_token"}'
        return 404, {"content-type": "text/plain"}, b"not found"


def serve_hostile_discovery(issuer: str):
    """Serve a :class:`HostileDiscovery` on 127.0.0.1; returns ``(handle, app)`` (``handle.stop()``)."""
    from mrtrweb.demo.server import serve_asgi_in_thread

    app = HostileDiscovery(issuer)
    handle = serve_asgi_in_thread(app)
    app.base = f"http://127.0.0.1:{handle.port}"
    return handle, app
