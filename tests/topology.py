"""A production-like cluster for tests: ASGI worker processes (uvicorn, production settings) on
real PostgreSQL and Redis, a private database and key prefixes per run, and a small HTTP client
that signs in and drives the app like a browser would (CSRF included)."""

from __future__ import annotations

import html
import http.cookiejar
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg

from mrtrweb.bench.common import free_port, wait_port

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get("MRTRWEB_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("MRTRWEB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


class PrivateDatabase:
    """A fresh PostgreSQL database for one test module, dropped afterwards."""

    def __init__(self) -> None:
        self.name = f"mrtrweb_topo_{os.getpid()}_{secrets.token_hex(3)}"
        parts = urllib.parse.urlsplit(PG_ADMIN)
        self.url = urllib.parse.urlunsplit(parts._replace(path="/" + self.name))
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def query(self, sql: str, *args):
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, args).fetchall()

    def drop(self) -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Cluster:
    """Worker processes sharing one database and one Redis (``redis_url``)."""

    def __init__(self, db: PrivateDatabase, mcp_url: str, redis_url: str = REDIS_URL, **extra_env: str) -> None:
        tag = secrets.token_hex(4)
        self.env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="mrtrweb.site.settings_prod",
            DJANGO_SECRET_KEY=secrets.token_urlsafe(60),
            DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
            DATABASE_URL=db.url,
            REDIS_URL=redis_url,
            MRTRWEB_CACHE_PREFIX=f"topo-{tag}",
            MRTRWEB_CHANNELS_PREFIX=f"topo-asgi-{tag}",
            MRTRWEB_SSL_REDIRECT="0",
            MRTRWEB_BEHIND_PROXY="0",
            MRTRWEB_SECURE_COOKIES="0",
            MRTRWEB_HSTS_SECONDS="0",
            MRTRWEB_HEARTBEAT_S="1",
            MRTRWEB_MAX_STARTS_PER_MINUTE="10000",
            MRTRWEB_MAX_PENDING_ROUNDS="10000",
            MRTRWEB_REDIS_TIMEOUT_S="1",
            MRTRWEB_LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
        )
        self.env.update(extra_env)
        self.db = db
        self.workers: dict[str, tuple[subprocess.Popen, int]] = {}
        self.logs: dict[str, Path] = {}
        out = subprocess.run([sys.executable, "manage.py", "mrtrweb_demo", "--seed-only", mcp_url], cwd=ROOT,
                             env=self.env, capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RuntimeError(out.stdout + out.stderr)

    def start(self, name: str) -> str:
        port = free_port()
        log = ROOT / "var" / f"topology-{name}-{port}.log"
        self.logs[name] = log
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "mrtrweb.site.asgi:application", "--host", "127.0.0.1", "--port",
             str(port), "--ws", "websockets-sansio", "--lifespan", "on", "--log-level", "warning"],
            cwd=ROOT, env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.workers[name] = (proc, port)
        wait_port(port, proc=proc, log=log)
        return self.url(name)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.workers[name][1]}"

    def kill(self, name: str) -> None:
        proc, _ = self.workers.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for name in list(self.workers):
            proc, _ = self.workers.pop(name)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def status(self, op_id: str) -> str:
        return self.db.query("SELECT status FROM mrtrweb_operation WHERE id = %s", op_id)[0][0]

    def wait_status(self, op_ids, statuses, timeout_s: float = 60.0) -> None:
        want = {statuses} if isinstance(statuses, str) else set(statuses)
        ids = [op_ids] if isinstance(op_ids, str) else list(op_ids)
        deadline = time.monotonic() + timeout_s
        while True:
            rows = self.db.query("SELECT id::text, status FROM mrtrweb_operation WHERE id::text = ANY(%s)", ids)
            pending = [(i, s) for i, s in rows if s not in want]
            if not pending and len(rows) == len(ids):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(pending)} operation(s) not in {want}: {pending[:5]}")
            time.sleep(0.1)

    def server_id(self, tenant: str = "acme") -> int:
        return self.db.query("SELECT s.id FROM mrtrweb_mcpserver s JOIN mrtrweb_tenant t ON t.id = s.tenant_id "
                             "WHERE t.slug = %s", tenant)[0][0]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class WebSession:
    """A signed-in user, talking HTTP to any worker (cookies are shared across ports of 127.0.0.1)."""

    def __init__(self) -> None:
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect)

    def request(self, url: str, data: dict | None = None, timeout: float = 30.0) -> tuple[int, str, str]:
        body = None
        headers = {}
        if data is not None:
            payload = dict(data)
            payload["csrfmiddlewaretoken"] = self.csrf()
            body = urllib.parse.urlencode(payload, doseq=True).encode()
            headers["Referer"] = url
        req = urllib.request.Request(url, data=body, headers=headers)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                return resp.status, resp.headers.get("Location", ""), resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("Location", ""), err.read().decode()

    def csrf(self) -> str:
        for cookie in self.jar:
            if cookie.name == "csrftoken":
                return cookie.value
        return ""

    def login(self, base: str, username: str, password: str) -> None:
        status, _, _ = self.request(base + "/accounts/login/")
        assert status == 200
        status, location, body = self.request(base + "/accounts/login/", {"username": username, "password": password})
        assert status == 302, body[:300]

    def start(self, base: str, server_id: int, tool: str, args: dict[str, str]) -> str:
        status, location, body = self.request(f"{base}/mcp/servers/{server_id}/tools/{tool}/",
                                              {f"arg-{k}": v for k, v in args.items()})
        assert status == 302, (status, body[:500])
        return location.rstrip("/").split("/")[-1]

    def answer(self, base: str, op_id: str, round_no: int, action: str = "accept", **fields) -> tuple[int, str]:
        """Answer a round as a person does; Accept goes through the review, then Send (the
        response to Accept is returned when it is no review: a refusal, an outage...)."""
        if action == "accept":
            status, token, body = self.review(base, op_id, round_no, **fields)
            if token is None:
                return status, body
            return self.send(base, op_id, round_no, token, **fields)
        data = {"action": action, "round": str(round_no), **fields}
        status, _, body = self.request(f"{base}/mcp/operations/{op_id}/answer/", data)
        return status, body

    def review(self, base: str, op_id: str, round_no: int, **fields) -> tuple[int, str | None, str]:
        """Accept: ``(status, review token or None, body)``; nothing is sent yet."""
        data = {"action": "accept", "round": str(round_no), **fields}
        status, _, body = self.request(f"{base}/mcp/operations/{op_id}/answer/", data)
        m = re.search(r'<input type="hidden" name="review_token" value="([^"]*)">', body) if status == 200 else None
        return status, (html.unescape(m.group(1)) if m else None), body

    def send(self, base: str, op_id: str, round_no: int, token: str, **fields) -> tuple[int, str]:
        """Send the reviewed answer (``fields`` must be the reviewed ones)."""
        data = {"action": "send", "round": str(round_no), "review_token": token, **fields}
        status, _, body = self.request(f"{base}/mcp/operations/{op_id}/answer/", data)
        return status, body

    def page(self, base: str, op_id: str) -> str:
        status, _, body = self.request(f"{base}/mcp/operations/{op_id}/")
        assert status == 200, status
        return body


def status_in(body: str) -> str | None:
    m = re.search(r'data-status="([a-z_]+)"', body)
    return m.group(1) if m else None


class Log:
    """The worker's log from the moment this was made."""

    def __init__(self, cluster: Cluster, name: str = "A") -> None:
        self.path = cluster.logs[name]
        self.offset = self.path.stat().st_size

    def text(self) -> str:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            return f.read().decode("utf-8", "replace")

    def assert_clean(self) -> None:
        text = self.text()
        assert "Traceback" not in text and "Exception in ASGI application" not in text, text[-4000:]
        assert "Internal Server Error" not in text, text[-4000:]
