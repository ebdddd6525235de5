"""A real OAuth 2.1 authorization server on loopback for the authorization tests (issue 13).

A second, minimal Django project (:mod:`tests.oauth_as.settings`, :mod:`tests.oauth_as.urls`)
built on django-oauth-toolkit: a login page (Django's ``LoginView``), DOT's consent page
(``/o/authorize/``, shown every time), authorization code with PKCE required (S256 only), refresh
tokens (rotated, reuse-protected), RFC 8707 ``resource`` binding, RFC 7009 revocation
(``/o/revoke_token/``), RFC 7662 introspection (``/o/introspect/``, for the MCP server), RFC 8414
metadata at ``/.well-known/oauth-authorization-server`` (with ``revocation_endpoint``,
``code_challenge_methods_supported: ["S256"]``, ``scopes_supported: ["mcp", "mcp:admin", "offline_access"]``)
and the RFC 9207 ``iss`` on every authorization response
(``authorization_response_iss_parameter_supported: true``). Users :data:`USERS` (alice, bob:
accounts at the AS, with passwords other than the product's).

It cannot share the test process (one Django settings module per process), so
:func:`start_auth_server` runs it as a subprocess: the parent binds a free port on 127.0.0.1 and
hands the listening socket down (no port race), the child migrates a fresh SQLite file under the
given directory (about a second), seeds the users and the MCP server's introspection client, and
serves under uvicorn. Start it once per module or session (``auth_server`` fixtures); stop it with
:meth:`AuthServer.stop`. Cookies do not separate ports, so its cookies have their own names.

The test drives it through :class:`AuthServer`: clients registered like an admin would
(:meth:`AuthServer.create_client`), the token lifetime changed for the next tokens
(:meth:`AuthServer.set_access_ttl`), the endpoint log (:meth:`AuthServer.events`, nothing
secret in it), and introspection as the resource server (:meth:`AuthServer.introspect`).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

ROOT = Path(__file__).resolve().parents[2]
#: the AS's own accounts: username -> password (not the product's passwords)
USERS = {"alice": "alice-at-the-as", "bob": "bob-at-the-as"}
#: the scope the protected MCP server requires
MCP_SCOPE = "mcp"


class AuthServer:
    """A running test authorization server (see the module docstring).

    Attributes: ``issuer`` (``http://127.0.0.1:PORT``, also the origin), ``port``,
    ``metadata_url``, ``authorize_url``, ``token_url``, ``introspect_url``, ``revoke_url``,
    ``rs_client_id`` / ``rs_client_secret`` (the introspection client the MCP server uses).
    """

    def __init__(self, proc: subprocess.Popen, port: int, control_secret: str, rs_client: tuple[str, str],
                 log_path: Path) -> None:
        self._proc = proc
        self.port = port
        self.issuer = f"http://127.0.0.1:{port}"
        self.metadata_url = f"{self.issuer}/.well-known/oauth-authorization-server"
        self.authorize_url = f"{self.issuer}/o/authorize/"
        self.token_url = f"{self.issuer}/o/token/"
        self.introspect_url = f"{self.issuer}/o/introspect/"
        self.revoke_url = f"{self.issuer}/o/revoke_token/"
        self.rs_client_id, self.rs_client_secret = rs_client
        self._secret = control_secret
        self.log_path = log_path

    # -- control -----------------------------------------------------------------------------

    def _control(self, method: str, path: str, body: dict[str, Any] | None = None, **params: str) -> dict[str, Any]:
        r = httpx2.request(method, f"{self.issuer}/_test/{path}", json=body, params=params or None,
                           headers={"X-Control-Secret": self._secret}, timeout=10)
        r.raise_for_status()
        return r.json()

    def create_client(self, *, redirect_uris: list[str], name: str = "mrtrweb", client_type: str = "confidential",
                      grant_type: str = "authorization-code") -> tuple[str, str]:
        """Register a client as the AS's admin would; returns ``(client_id, client_secret)``
        (secret ``""`` for a public client)."""
        out = self._control("POST", "clients", {"name": name, "redirect_uris": redirect_uris,
                                                "client_type": client_type, "grant_type": grant_type})
        return out["client_id"], out["client_secret"]

    def set_access_ttl(self, seconds: int) -> None:
        """Access tokens issued from now on live ``seconds`` seconds (``expires_in``)."""
        self._control("POST", "settings", {"access_token_ttl_s": seconds})

    def tokens(self, username: str) -> dict[str, int]:
        """``{"access": n, "refresh": n}``: the user's unexpired access and unrevoked refresh tokens."""
        return self._control("GET", "tokens", username=username)

    def expire(self, username: str) -> int:
        """Expire every access token of ``username`` at the AS now; returns how many."""
        return self._control("POST", "expire", {"username": username})["expired"]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The endpoint log, oldest first (see :class:`tests.oauth_as.control.EventMiddleware`)."""
        events = self._control("GET", "events")["events"]
        return [e for e in events if kind is None or e["kind"] == kind]

    def clear_events(self) -> None:
        self._control("POST", "events/clear")

    def introspect(self, token: str) -> dict[str, Any]:
        """RFC 7662 introspection of ``token`` as the resource server (HTTP Basic client auth)."""
        r = httpx2.post(self.introspect_url, data={"token": token},
                        auth=(self.rs_client_id, self.rs_client_secret), timeout=10)
        r.raise_for_status()
        return r.json()

    # -- lifetime ----------------------------------------------------------------------------

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout_s)

    def __enter__(self) -> AuthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_auth_server(directory: Path, *, access_ttl_s: int = 3600, timeout_s: float = 30.0) -> AuthServer:
    """Start the test authorization server in a subprocess; returns once its metadata answers.

    ``directory`` holds its SQLite file and its stderr log (``as.log``).

    Raises:
        RuntimeError: it exited or did not answer within ``timeout_s`` seconds (the log's tail
        is in the message).
    """
    directory.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    control_secret = secrets.token_urlsafe(24)
    rs_client = (f"mcp-rs-{secrets.token_hex(4)}", secrets.token_urlsafe(32))
    db = directory / "as.sqlite3"
    db.unlink(missing_ok=True)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.oauth_as.settings", "OAUTH_AS_DB": str(db),
           "OAUTH_AS_ISSUER": f"http://127.0.0.1:{port}", "OAUTH_AS_CONTROL_SECRET": control_secret,
           "OAUTH_AS_ACCESS_TTL_S": str(access_ttl_s), "OAUTH_AS_FD": str(sock.fileno()),
           "OAUTH_AS_RS_CLIENT_ID": rs_client[0], "OAUTH_AS_RS_CLIENT_SECRET": rs_client[1],
           "OAUTH_AS_USERS": json.dumps(USERS), "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log_path = directory / "as.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.oauth_as.serve"], cwd=ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                pass_fds=(sock.fileno(),))
    sock.close()  # the child holds its own copy
    server = AuthServer(proc, port, control_secret, rs_client, log_path)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the test authorization server did not start (exit {proc.returncode}):\n{tail}")
        try:
            if httpx2.get(server.metadata_url, timeout=2).status_code == 200:
                return server
        except httpx2.TransportError:
            pass
        time.sleep(0.05)
