"""Where the machine's CPU goes during a suite run, by program (issue 25): ``tests/run_suite.py``
samples every process once a second and prints the CPU seconds of each kind of program
(PostgreSQL, Redis, Chromium, Node, the pytest workers, uvicorn workers, ``manage.py`` commands,
pip...), because a test's own accounting (``os.times``, :mod:`tests.scheduling`) never sees the
machine's PostgreSQL and Redis, nor a process it has not reaped.

Linux ``/proc`` only (elsewhere: nothing is sampled). A process that lives less than a second is
missed, and the last second of each one: the total says how much the samples account for.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _kind(pid: str, comm: str) -> str:
    """The kind of program ``pid`` runs: its command name, and for Python what it runs."""
    if not comm.startswith("python"):
        return {"chrome": "chromium", "chromium": "chromium", "headless_shell": "chromium"}.get(comm, comm)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "python"
    line = b" ".join(argv).decode(errors="replace")
    if "import sys;exec(eval(sys.stdin.readline()))" in line:
        return "python: pytest-xdist worker"
    for needle, kind in (("-m pytest", "python: pytest"), ("uvicorn", "python: uvicorn worker"),
                         ("manage.py", "python: manage.py"), ("-m pip", "python: pip"),
                         ("mrtrweb.bench", "python: benchmark"), ("tests.peers", "python: peers")):
        if needle in line:
            return kind
    return "python: other"


class CpuByProgram:
    """A daemon thread sampling ``/proc/<pid>/stat`` every ``interval_s``; :meth:`stop` returns
    ``{kind: CPU seconds}`` for the time it ran."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._seen: dict[str, tuple[str, float, float]] = {}  # pid -> (kind, ticks at first sight, ticks now)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-by-program", daemon=True)

    def start(self) -> CpuByProgram:
        if Path("/proc/self/stat").exists():
            self._sample(first=True)
            self._thread.start()
        return self

    def _sample(self, first: bool = False) -> None:
        for entry in os.scandir("/proc"):
            pid = entry.name
            if not pid.isdigit():
                continue
            try:
                raw = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            comm = raw[raw.find("(") + 1:raw.rfind(")")]
            fields = raw[raw.rfind(")") + 2:].split()
            try:
                ticks = float(fields[11]) + float(fields[12])  # utime + stime
            except (IndexError, ValueError):
                continue
            if pid in self._seen:
                kind, start, _ = self._seen[pid]
                self._seen[pid] = (kind, start, ticks)
            else:  # a process started since the last sample counts from 0; one there at the start, from now
                self._seen[pid] = (_kind(pid, comm), ticks if first else 0.0, ticks)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        totals: Counter[str] = Counter()
        for kind, start, now in self._seen.values():
            totals[kind] += max(0.0, now - start) / _TICK
        return dict(totals)
