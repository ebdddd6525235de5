"""The protected demo MCP server: the demo ``MCPServer`` as an OAuth 2.1 resource server in front of
the demo's own authorization server (:mod:`mrtrweb.demo.oauth`), on loopback (development only).

It is the product's demo server (``build_demo_server``: every tool that asks ``input_required``)
with the ``mcp`` SDK's resource-server auth: ``AuthSettings(issuer_url=AS,
resource_server_url=http://127.0.0.1:PORT/mcp, required_scopes=["mcp:demo"],
validate_token_resource=True)`` and a :class:`ProviderVerifier` that looks tokens up in the
authorization server's memory (the two share a process). The SDK then serves RFC 9728 protected
resource metadata at ``/.well-known/oauth-protected-resource/mcp`` and answers a request without a
valid token ``401`` with ``WWW-Authenticate: Bearer ..., resource_metadata="..."``; a token
issued for another ``resource`` (RFC 8707) is refused.

:func:`add_identity_tools` adds the tools that say whom the server saw (also used by the tests'
django-oauth-toolkit server, ``tests/oauth_as/mcp_server.py``): ``whoami`` (no round: ``"You are
WHO."``) and ``confirm_as_me(note)`` (one ``input_required`` form round asking ``confirm``, then
``"Confirmed NOTE for WHO."``), WHO being what the ``who`` callable makes of the request's access
token -- here the token's subject and its client: ``alice (client mrtrweb)``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from .oauth import DEMO_SCOPE, DEMO_SCOPES, DemoAuthServer, DemoProvider, serve_auth_server
from .server import MCP_PATH, DemoServerHandle, build_demo_server, serve_built_in_thread

CONFIRM_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
                  "required": ["confirm"]}


def subject_of_token() -> str:
    """The request's access token's subject (else ``client CLIENT_ID``; ``nobody`` without one)."""
    token = get_access_token()
    return (token.subject or f"client {token.client_id}") if token is not None else "nobody"


def add_identity_tools(mcp: MCPServer, who: Callable[[], str] = subject_of_token) -> None:
    """Add ``whoami`` and ``confirm_as_me`` to ``mcp`` (see the module docstring)."""

    @mcp.tool(structured_output=False)
    async def whoami() -> str:
        """Say whom this server sees (the access token's person and client)."""
        return f"You are {who()}."

    @mcp.tool(structured_output=False)
    async def confirm_as_me(note: str, ctx: Context) -> str | InputRequiredResult:
        """Ask for a confirmation, then say for whom the note was confirmed."""
        response = (ctx.input_responses or {}).get("confirm")
        if response is None:
            form = ElicitRequest(params=ElicitRequestFormParams(message=f"Confirm the note {note!r}?",
                                                                requested_schema=CONFIRM_SCHEMA))
            return InputRequiredResult(input_requests={"confirm": form},
                                       request_state=json.dumps({"tool": "confirm_as_me"}))
        content = getattr(response, "content", None) or {}
        if getattr(response, "action", None) != "accept" or content.get("confirm") is not True:
            return f"Not confirmed for {who()}."
        return f"Confirmed {note} for {who()}."


class ProviderVerifier:
    """The SDK's ``TokenVerifier`` over a :class:`~mrtrweb.demo.oauth.DemoProvider` (unexpired,
    unrevoked tokens it issued). ``seen``: ``(subject or None, client_id)`` of each accepted token."""

    def __init__(self, provider: DemoProvider) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._seen: list[tuple[str | None, str]] = []

    async def verify_token(self, token: str) -> AccessToken | None:
        found = await self.provider.load_access_token(token)
        if found is not None:
            with self._lock:
                self._seen.append((found.subject, found.client_id))
        return found

    @property
    def seen(self) -> list[tuple[str | None, str]]:
        with self._lock:
            return list(self._seen)

    def who(self) -> str:
        """``SUBJECT (client NAME)`` of the request's token (NAME: its DCR ``client_name``, else id)."""
        token = get_access_token()
        if token is None:
            return "nobody"
        client = self.provider.clients.get(token.client_id)
        name = (client.client_name if client is not None else None) or token.client_id
        return f"{token.subject or 'no subject'} (client {name})"


def build_protected_app(issuer: str, resource_url: str, verifier: ProviderVerifier, *, host: str = "127.0.0.1") -> Any:
    """The protected demo's ASGI app for ``resource_url`` (``http://HOST:PORT/mcp``) served on ``host``."""
    mcp = build_demo_server(
        auth=AuthSettings(issuer_url=issuer, resource_server_url=resource_url, required_scopes=[DEMO_SCOPE],
                          validate_token_resource=True),
        token_verifier=verifier)
    add_identity_tools(mcp, verifier.who)
    return mcp.streamable_http_app(streamable_http_path=MCP_PATH, host=host)


@dataclasses.dataclass
class ProtectedDemo:
    """The running pair: ``auth`` (the authorization server: ``auth.url``, ``auth.provider``),
    ``handle`` (the MCP server: ``url``, ``log``), ``verifier``."""

    auth: DemoAuthServer
    handle: DemoServerHandle
    verifier: ProviderVerifier

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def as_url(self) -> str:
        return self.auth.url

    def stop(self) -> None:
        self.handle.stop()
        self.auth.stop()


def serve_protected_demo(*, host: str = "127.0.0.1", port: int = 0, as_port: int = 0,
                         auto_approve: bool = False) -> ProtectedDemo:
    """Start the demo authorization server (scopes :data:`~mrtrweb.demo.oauth.DEMO_SCOPES`, RFC
    9207 ``iss`` advertised) and the protected demo MCP server, each in a daemon thread
    (``port``/``as_port`` 0: any free port). ``auto_approve``: no consent page (tests).

    Raises:
        RuntimeError: a server did not start in time. OSError: an address could not be bound.
    """
    auth = serve_auth_server(host=host, port=as_port, auto_approve=auto_approve, scopes=DEMO_SCOPES,
                             metadata_overrides={"authorization_response_iss_parameter_supported": True})
    verifier = ProviderVerifier(auth.provider)

    def make_app(bound: int) -> Any:
        netloc = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        return build_protected_app(auth.url, f"http://{netloc}{MCP_PATH}", verifier, host=host)

    try:
        handle = serve_built_in_thread(make_app, host, port)
    except BaseException:
        auth.stop()
        raise
    return ProtectedDemo(auth, handle, verifier)
