"""The services of one benchmark run (:class:`Services`): a private PostgreSQL database, Redis key
prefixes of its own, the environment of the production settings pointing at them, Django set up
on them, and the processes started for the run (the bench MCP server, ASGI workers), all removed
by :meth:`Services.close`. :func:`seed` creates the tenant, server and signed-in users a run needs.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import PASSWORD, PG_ADMIN, REDIS_URL, ROOT
from .machine import free_port, wait_port

__all__ = ["Services", "seed"]


@dataclass
class Services:
    """A private PostgreSQL database and Redis key prefixes for one run, the environment of the
    production settings that point at them, and the processes started for the run."""

    tag: str = field(default_factory=lambda: secrets.token_hex(4))
    db_name: str = ""
    db_url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    mcp_url: str = ""
    mcp_base: str = ""
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def cache_prefix(self) -> str:
        return f"bench-{self.tag}"

    @property
    def channels_prefix(self) -> str:
        return f"bench-asgi-{self.tag}"

    def create(self) -> "Services":
        import psycopg

        self.db_name = f"mrtrweb_bench_{self.tag}"
        parts = urllib.parse.urlsplit(PG_ADMIN)
        self.db_url = urllib.parse.urlunsplit(parts._replace(path="/" + self.db_name))
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.db_name}"')
        self.env = {
            "DJANGO_SETTINGS_MODULE": "mrtrweb.site.settings_prod",
            "DJANGO_SECRET_KEY": "bench-" + secrets.token_urlsafe(60),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DATABASE_URL": self.db_url,
            "REDIS_URL": REDIS_URL,
            "MRTRWEB_CACHE_PREFIX": self.cache_prefix,
            "MRTRWEB_CHANNELS_PREFIX": self.channels_prefix,
            "MRTRWEB_SSL_REDIRECT": "0",
            "MRTRWEB_BEHIND_PROXY": "0",
            "MRTRWEB_SECURE_COOKIES": "0",
            "MRTRWEB_HSTS_SECONDS": "0",
            "MRTRWEB_MAX_STARTS_PER_MINUTE": "1000000",
            "MRTRWEB_MAX_PENDING_ROUNDS": "1000000",
            "MRTRWEB_MAX_TENANT_PENDING_ROUNDS": "1000000",
            "MRTRWEB_MAX_TENANT_STARTS_PER_MINUTE": "1000000",
            "MRTRWEB_REDIS_TIMEOUT_S": "5",
            "MRTRWEB_LOG_LEVEL": "WARNING",
            "MRTRWEB_DB_POOL_SIZE": "10",
            "PYTHONUNBUFFERED": "1",
        }
        if os.environ.get("MRTRWEB_BENCH_REDIS_CHANNELS_URL"):  # e.g. "...?socket_timeout=30" (see the report)
            self.env["REDIS_CHANNELS_URL"] = os.environ["MRTRWEB_BENCH_REDIS_CHANNELS_URL"]
        return self

    def setup_django(self) -> None:
        """Configure this process on the run's production settings, migrate the private database."""
        os.environ.update(self.env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)

    # ------------------------------------------------------------------ processes
    def start_mcp_server(self) -> str:
        """The bench MCP server (an SDK ``MCPServer``) in its own process; returns its MCP URL."""
        port = free_port()
        log = ROOT / "var" / "bench" / f"mcp-server-{self.tag}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-m", "mrtrweb.bench.mcpserver", "--port", str(port)], cwd=ROOT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=log.open("w"),
                                stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.mcp_pid = proc.pid
        wait_port(port, proc=proc, log=log)
        self.mcp_base = f"http://127.0.0.1:{port}"
        self.mcp_url = self.mcp_base + "/mcp"
        return self.mcp_url

    def start_worker(self, name: str) -> tuple[str, subprocess.Popen]:
        """An ASGI worker (uvicorn, production settings) on the run's database and Redis."""
        port = free_port()
        log = ROOT / "var" / "bench" / f"worker-{name}-{self.tag}.log"
        self.logs[name] = log
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "mrtrweb.bench.worker_app:application", "--host", "127.0.0.1", "--port",
             str(port), "--ws", "websockets-sansio", "--lifespan", "on", "--log-level", "warning",
             "--no-access-log"],
            cwd=ROOT, env=dict(os.environ, **self.env), stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        wait_port(port, proc=proc, log=log)
        return f"http://127.0.0.1:{port}", proc

    def worker_errors(self, name: str) -> dict[str, int]:
        """What a worker's log shows: unhandled ASGI exceptions, and the Redis errors behind them."""
        try:
            text = self.logs[name].read_text(errors="replace")
        except (KeyError, OSError):
            return {}
        return {"asgi_exceptions": text.count("Exception in ASGI application"),
                "redis_read_timeouts": text.count("redis.exceptions.TimeoutError"),
                "redis_max_connections": text.count("MaxConnectionsError"),
                "push_group_failures": text.count("its push group ("),
                "gc_pauses_20ms": text.count("GC pause "),
                "gc_pause_max_ms": max((float(m) for m in re.findall(r"GC pause ([0-9.]+) ms", text)), default=0.0),
                "error_lines": sum(1 for line in text.splitlines() if line.startswith("ERROR"))}

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc in self.procs:
            self.procs.remove(proc)

    def mcp_counts(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.mcp_base + "/bench/counts", timeout=10) as resp:
            return json.loads(resp.read())

    def mcp_reset(self) -> None:
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(self.mcp_base + "/bench/reset", data=b"", method="POST"),
                               timeout=10).read()

    # ------------------------------------------------------------------ redis
    def redis(self):
        import redis

        return redis.Redis.from_url(REDIS_URL)

    def redis_bytes(self) -> dict[str, int]:
        """Keys and ``MEMORY USAGE`` bytes of this run's keys (cache and channel layer prefixes)."""
        r = self.redis()
        out = {"keys": 0, "bytes": 0}
        try:
            for pattern in (f"{self.cache_prefix}:*", f"{self.channels_prefix}*"):
                for key in r.scan_iter(match=pattern, count=1000):
                    out["keys"] += 1
                    out["bytes"] += int(r.memory_usage(key, samples=0) or 0)
        finally:
            r.close()
        return out

    def redis_used_memory(self) -> int:
        r = self.redis()
        try:
            return int(r.info("memory")["used_memory"])
        finally:
            r.close()

    def drop_redis_keys(self) -> None:
        r = self.redis()
        try:
            for pattern in (f"{self.cache_prefix}:*", f"{self.channels_prefix}*"):
                batch = []
                for key in r.scan_iter(match=pattern, count=1000):
                    batch.append(key)
                    if len(batch) >= 500:
                        r.delete(*batch)
                        batch = []
                if batch:
                    r.delete(*batch)
        finally:
            r.close()

    def close(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: BLE001
            pass
        try:
            self.drop_redis_keys()
        except Exception:  # noqa: BLE001
            pass
        if self.db_name:
            import psycopg

            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')


# ---------------------------------------------------------------------------------------------- seeding
def seed(mcp_url: str, n_users: int, *, prefix: str = "u") -> dict[str, Any]:
    """One tenant, one MCP server at ``mcp_url``, ``n_users`` member users (bulk-created, with a
    cheap password hash), each with a signed-in session. Returns ids and session keys."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model, load_backend
    from django.contrib.auth.hashers import make_password
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session

    from mrtrweb.models import McpServer, Membership, Tenant

    User = get_user_model()
    tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    server, _ = McpServer.objects.get_or_create(tenant=tenant, name="Bench server", defaults={"url": mcp_url})
    if server.url != mcp_url:
        server.url = mcp_url
        server.save()
    existing = set(User.objects.filter(username__startswith=prefix + "-").values_list("username", flat=True))
    pw = make_password(PASSWORD)  # hashed once, shared by every bench user
    new = [User(username=f"{prefix}-{i}", password=pw) for i in range(n_users) if f"{prefix}-{i}" not in existing]
    User.objects.bulk_create(new, batch_size=1000)
    users = list(User.objects.filter(username__startswith=prefix + "-").order_by("id"))[:n_users]
    have = set(Membership.objects.filter(tenant=tenant, user__in=users).values_list("user_id", flat=True))
    Membership.objects.bulk_create([Membership(tenant=tenant, user=u, role=Membership.Role.MEMBER)
                                    for u in users if u.pk not in have], batch_size=1000)
    sessions = []
    rows = []
    # the backend that restores a session's user, as force_login picks it (the throttling
    # backends listed before it have no get_user)
    backend = next(path for path in settings.AUTHENTICATION_BACKENDS if hasattr(load_backend(path), "get_user"))
    for u in users:
        store = SessionStore()
        data = {SESSION_KEY: str(u.pk), BACKEND_SESSION_KEY: backend, HASH_SESSION_KEY: u.get_session_auth_hash()}
        key = store._get_new_session_key()
        rows.append(Session(session_key=key, session_data=store.encode(data),
                            expire_date=store.get_expiry_date()))
        sessions.append(key)
    Session.objects.bulk_create(rows, batch_size=1000)
    return {"tenant_id": tenant.pk, "server_id": server.pk, "users": users, "sessions": sessions}
