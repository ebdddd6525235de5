"""The demo MCP server as an OAuth-protected resource server, in front of the test AS.

:func:`serve_protected_demo` runs the product's real demo server (``build_demo_server``, every
tool that asks ``input_required``) with the ``mcp`` SDK's resource-server auth:
``AuthSettings(issuer_url=AS, resource_server_url=http://127.0.0.1:PORT/mcp,
required_scopes=["mcp"], validate_token_resource=True)`` and an :class:`IntrospectionVerifier`
(RFC 7662 at the AS, HTTP Basic as the AS's introspection client, no cache: a revoked token is
refused at once). The SDK then serves RFC 9728 protected resource metadata at
``/.well-known/oauth-protected-resource/mcp`` and answers a request without a valid token
``401`` with ``WWW-Authenticate: Bearer ..., resource_metadata="..."`` (``403
insufficient_scope`` without the scope). A token must be bound to this server by RFC 8707
``resource`` (introspection's ``aud``), so a client that omits ``resource`` is refused.

A step-up: ``tools/call admin_report`` also needs the scope ``mcp:admin`` (:class:`StepUp`
answers ``403`` with ``WWW-Authenticate: Bearer error="insufficient_scope", scope="mcp mcp:admin"``
without it). Three tools say whom the server saw (the token's username from introspection; the first
and the last are :func:`mrtrweb.demo.protected.add_identity_tools`, shared with the demo command):
``whoami`` (no round), ``admin_report`` (no round: ``"Admin report for USERNAME."``) and
``confirm_as_me(note)`` (one ``input_required`` form round asking
``confirm``, then ``"Confirmed NOTE for USERNAME."``). The handle's ``verifier.seen`` lists every
verification as ``(username or None, active)``, so a test can check whose tokens arrived.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import httpx2
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from mrtrweb.demo.protected import add_identity_tools, subject_of_token
from mrtrweb.demo.server import MCP_PATH, DemoServerHandle, build_demo_server, replaying, serve_built_in_thread
from tests.oauth_as import MCP_SCOPE, AuthServer


class IntrospectionVerifier:
    """``TokenVerifier`` by RFC 7662 introspection at the AS (``AccessToken`` with ``subject`` =
    the username, ``claims["iss"]`` = the issuer, ``resource`` = the ``aud`` entry naming this
    server, else the first, else None)."""

    def __init__(self, auth_server: AuthServer, resource_url: str) -> None:
        self._as = auth_server
        self._resource = resource_url
        self._lock = threading.Lock()
        self.seen: list[tuple[str | None, bool]] = []

    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx2.AsyncClient(timeout=10) as client:
            r = await client.post(self._as.introspect_url, data={"token": token},
                                  auth=(self._as.rs_client_id, self._as.rs_client_secret))
        body = r.json() if r.status_code == 200 else {}
        active = body.get("active") is True
        with self._lock:
            self.seen.append((body.get("username"), active))
        if not active:
            return None
        aud = body.get("aud") or []
        aud = [aud] if isinstance(aud, str) else list(aud)
        resource = next((a for a in aud if a.rstrip("/") == self._resource.rstrip("/")), aud[0] if aud else None)
        return AccessToken(token=token, client_id=str(body.get("client_id", "")),
                           scopes=str(body.get("scope", "")).split(), expires_at=body.get("exp"),
                           resource=resource, subject=body.get("username"), claims={"iss": self._as.issuer})

    def usernames(self) -> list[str | None]:
        """The usernames of the active tokens verified so far, in order."""
        with self._lock:
            return [u for u, active in self.seen if active]

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()


class StepUp:
    """ASGI middleware: a ``tools/call`` of ``admin_report`` whose token lacks ``mcp:admin`` gets
    ``403 insufficient_scope`` (RFC 6750 section 3.1) naming the scopes it needs."""

    SCOPE = "mcp:admin"

    def __init__(self, app: Any, verifier: IntrospectionVerifier, metadata_url: str) -> None:
        self.app, self.verifier, self.metadata_url = app, verifier, metadata_url

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if message.get("type") != "http.request" or not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            msg = json.loads(body)
        except ValueError:
            msg = None
        if isinstance(msg, dict) and msg.get("method") == "tools/call" and (msg.get("params") or {}).get("name") == "admin_report":
            header = dict(scope["headers"]).get(b"authorization", b"").decode()
            token = await self.verifier.verify_token(header[7:]) if header.lower().startswith("bearer ") else None
            if token is not None and self.SCOPE not in token.scopes:
                challenge = (f'Bearer error="insufficient_scope", scope="{MCP_SCOPE} {self.SCOPE}", '
                             f'resource_metadata="{self.metadata_url}"')
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"www-authenticate", challenge.encode()), (b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"error":"insufficient_scope"}'})
                return
        await self.app(scope, replaying(body, receive), send)


def build_protected_demo(auth_server: AuthServer, resource_url: str) -> tuple[Any, IntrospectionVerifier]:
    """The protected demo's ASGI app and its verifier (see the module docstring)."""
    verifier = IntrospectionVerifier(auth_server, resource_url)
    mcp = build_demo_server(
        auth=AuthSettings(issuer_url=auth_server.issuer, resource_server_url=resource_url,
                          required_scopes=[MCP_SCOPE], validate_token_resource=True),
        token_verifier=verifier)

    add_identity_tools(mcp)

    @mcp.tool(structured_output=False)
    async def admin_report() -> str:
        """A report that needs the extra scope mcp:admin (step-up)."""
        return f"Admin report for {subject_of_token()}."

    app = mcp.streamable_http_app(streamable_http_path=MCP_PATH, host="127.0.0.1")
    base, _, path = resource_url.rpartition(MCP_PATH)
    return StepUp(app, verifier, f"{base}/.well-known/oauth-protected-resource{MCP_PATH}"), verifier


@dataclasses.dataclass
class ProtectedDemo:
    """A running protected demo: ``handle`` (``url``, ``log``, ``stop()`` as for the ``demo_mcp``
    fixture), ``verifier`` (see :class:`IntrospectionVerifier`), ``resource_url`` (= ``handle.url``),
    ``metadata_url`` (its RFC 9728 document)."""

    handle: DemoServerHandle
    verifier: IntrospectionVerifier

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def metadata_url(self) -> str:
        return f"http://127.0.0.1:{self.handle.port}/.well-known/oauth-protected-resource{MCP_PATH}"

    def stop(self) -> None:
        self.handle.stop()


def serve_protected_demo(auth_server: AuthServer, start_timeout_s: float = 15.0) -> ProtectedDemo:
    """Serve the protected demo under uvicorn in a daemon thread on 127.0.0.1 (free port; the
    socket is bound first, so the resource URL names the real port).

    Raises:
        RuntimeError: it did not start within ``start_timeout_s`` seconds.
    """
    built: dict[str, IntrospectionVerifier] = {}

    def make_app(port: int) -> Any:
        app, built["verifier"] = build_protected_demo(auth_server, f"http://127.0.0.1:{port}{MCP_PATH}")
        return app

    handle = serve_built_in_thread(make_app, "127.0.0.1", 0, start_timeout_s=start_timeout_s)
    return ProtectedDemo(handle, built["verifier"])
