"""The machine the figures are measured on (:func:`machine`), what its processes use (RSS in KiB,
CPU seconds; :class:`CpuShare`: cores busy during a phase, by process), and local ports
(:func:`free_port`, :func:`wait_port`, which raises :class:`RuntimeError` quoting the log of a
process that did not start). Linux ``/proc`` only.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from .config import PG_ADMIN, REDIS_URL

__all__ = ["CpuShare", "cpu_seconds", "free_port", "machine", "machine_cpu", "rss_kib", "wait_port"]


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


#: the ports :func:`free_port` hands out: below Linux's default ephemeral range (32768-60999,
#: ``net.ipv4.ip_local_port_range``), from which the kernel picks the local port of every outgoing
#: connection and of every ``bind(port 0)``; a port taken from *that* range and bound a moment later
#: by a child process can meanwhile have become some connection's source port, or another process's
#: "free" port (ci11: a worker bound to a port another process had just been given, and the
#: readiness wait connected to that other listener)
PORTS = range(20000, 32000)
#: ports per slice: a test process draws from its own slice of :data:`PORTS`
_SLICE = 1000
_RUNS = {"suite-a": 0, "suite-b": 1}
_next_port: list[int] = []


def _own_slice() -> range:
    """The slice of :data:`PORTS` this process draws from: one per pytest-xdist worker of each of
    ``./dev test``'s two runs (``MRTRWEB_TEST_RUN``, ``PYTEST_XDIST_WORKER``: slices 0-7), so no two
    processes of one suite ever draw the same port; any other process (a developer's pytest, the
    benchmark) one of slices 8-11 by its pid."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
    run = _RUNS.get(os.environ.get("MRTRWEB_TEST_RUN", ""))
    count = len(PORTS) // _SLICE
    if run is not None and worker.isdigit() and int(worker) < 4:
        index = run * 4 + int(worker)
    else:
        index = 8 + os.getpid() % (count - 8)
    start = PORTS.start + index * _SLICE
    return range(start, start + _SLICE)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a process started next to bind.

    Drawn in turn (from a random start) from this process's own slice of :data:`PORTS` (see
    :func:`_own_slice`), skipping any port that cannot be bound right now; the same port comes
    back only after the whole slice (1,000 ports) has been handed out.

    Raises:
        RuntimeError: no port of the slice can be bound.
    """
    own = _own_slice()
    if not _next_port:
        _next_port.append(own.start + int.from_bytes(os.urandom(2), "big") % len(own))
    for _ in range(len(own)):
        port = _next_port[0]
        _next_port[0] = own.start + (port + 1 - own.start) % len(own)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {own.start}-{own.stop - 1}")


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
