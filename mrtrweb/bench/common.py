"""Shared pieces of the benchmark suite: the standard round, statistics, the machine's description,
a private PostgreSQL database + Redis namespace per run, Django set up on production settings,
worker processes and the JSON result files."""

from __future__ import annotations

import copy
import json
import os
import platform
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: the standard round: the workplace's ``shared/bench/round.json`` beside the checkout when there is
#: one, else the copy shipped with this package (``tests/bench/test_bench.py`` checks they are the same)
ROUND_PATHS = [ROOT.parent / "shared" / "bench" / "round.json", Path(__file__).resolve().parent / "round.json"]
DEFAULT_OUT = ROOT / "var" / "bench"
DOCS_DIR = ROOT / "docs" / "benchmarks"
PG_ADMIN = os.environ.get("MRTRWEB_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
#: a dedicated Redis database; every key of a run is under the run's own prefixes
REDIS_URL = os.environ.get("MRTRWEB_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")

#: the bench users' password (their sessions are minted directly; the password is only for login tests)
PASSWORD = "bench-pw-0123"


# ---------------------------------------------------------------------------------------------- round
def standard_round() -> dict[str, Any]:
    """The standard round (``shared/bench/round.json``): request, input_required result, responses."""
    for path in ROUND_PATHS:
        if path.is_file():
            return json.loads(path.read_text())
    raise FileNotFoundError(f"the standard round is missing: none of {', '.join(map(str, ROUND_PATHS))}")


def round_copy(r: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(r)


# ---------------------------------------------------------------------------------------------- stats
def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def latency_summary(seconds: list[float]) -> dict[str, Any]:
    """p50/p90/p99/mean/max in milliseconds of a list of durations in seconds."""
    ms = [x * 1000.0 for x in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
        "max_ms": round(max(ms), 3) if ms else float("nan"),
    }


# ---------------------------------------------------------------------------------------------- machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return float("nan")


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _ram_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "django": _version("Django"),
        "mcp": _version("mcp"),
        "channels": _version("channels"),
        "channels_redis": _version("channels_redis"),
        "django_redis": _version("django-redis"),
        "uvicorn": _version("uvicorn"),
        "websockets": _version("websockets"),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import redis

        r = redis.Redis.from_url(REDIS_URL)
        info["redis"] = r.info("server").get("redis_version", "?")
        r.close()
    except Exception as exc:  # noqa: BLE001
        info["redis"] = f"unreachable ({exc.__class__.__name__})"
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            info["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
    except Exception as exc:  # noqa: BLE001
        info["postgresql"] = f"unreachable ({exc.__class__.__name__})"
    return info


# ---------------------------------------------------------------------------------------------- results
def write_result(out_dir: Path, name: str, data: dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    return path


def rss_kib(pid: int) -> int:
    """Resident set size of a process, KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores (``/proc/stat``)."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return (total - idle) / os.sysconf("SC_CLK_TCK"), total / os.sysconf("SC_CLK_TCK")


class CpuShare:
    """Where the machine's CPU went during a phase: cores busy in all, and the cores used by the
    named processes (the rest: PostgreSQL, Redis, the OS, other work). Use as a context manager;
    read :attr:`result` after."""

    def __init__(self, pids: dict[str, list[int]]) -> None:
        self.pids = pids
        self.result: dict[str, Any] = {}

    def _take(self) -> tuple[float, tuple[float, float], dict[str, float]]:
        return time.monotonic(), machine_cpu(), {k: sum(cpu_seconds(p) for p in v) for k, v in self.pids.items()}

    def __enter__(self) -> CpuShare:
        self._t0, self._m0, self._p0 = self._take()
        return self

    def __exit__(self, *exc: object) -> None:
        t1, m1, p1 = self._take()
        wall = max(1e-9, t1 - self._t0)
        busy = (m1[0] - self._m0[0]) / wall
        named = {k: round((p1[k] - self._p0[k]) / wall, 2) for k in self.pids}
        self.result = {"cores": os.cpu_count(), "cores_busy": round(busy, 2), "by_process_cores": named,
                       "other_cores": round(busy - sum(named.values()), 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 90.0, *, proc: subprocess.Popen | None = None,
              log: Path | None = None) -> None:
    """Wait until something listens on ``port``. A Django process needs ~2 s of CPU to start:
    on a two-core machine running a whole test suite that can be 30 s and more of wall time.

    Raises:
        RuntimeError: not within ``timeout_s``, or ``proc`` exited first; the message names ``log``
            and quotes its last lines (why the process did not start). A ``proc`` still running
            then is killed (and reaped), so that a start that came too late leaks no process."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.05)
    why = f"nothing listens on port {port}"
    if proc is not None and proc.poll() is not None:
        why += f" (the process exited with code {proc.returncode})"
    elif proc is not None:
        why += f" within {timeout_s:.0f} s (the process was killed)"
        proc.kill()
        proc.wait(timeout=30)
    if log is not None:
        try:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-8:])
        except OSError:
            tail = ""
        why += f"; its log, {log}, ends:\n{tail}"
    raise RuntimeError(why)


# ---------------------------------------------------------------------------------------------- the run's services
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


def tool_schema_fields(r: dict[str, Any]) -> dict[str, Any]:
    """The standard answer as the consent card's POST fields (``in-<key>-<field>``)."""
    data: dict[str, Any] = {}
    for key, answer in r["responses"].items():
        for name, value in answer.get("content", {}).items():
            if isinstance(value, bool):
                if value:
                    data[f"in-{key}-{name}"] = "on"
            else:
                data[f"in-{key}-{name}"] = str(value)
    return data
