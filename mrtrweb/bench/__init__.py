"""The benchmark suite (issue "Benchmarks"): ``python -m mrtrweb.bench``.

Modules, one per benchmark, each with ``run(ctx) -> dict`` and ``summary(result) -> list[str]``:

* :mod:`.gate_core` -- gate rounds/s (in-process store, Django cache on Redis) and memory held per
  finished round;
* :mod:`.vs_sdk` -- the bare SDK's manual loop vs the product's headless path vs the browser path
  simulated over WebSockets, against a real ``MCPServer`` on loopback (:mod:`.mcpserver`);
* :mod:`.pending` -- N users each holding a pending round on one worker: memory, push latency;
* :mod:`.scaleout` -- 1 vs 2 ASGI workers on shared Redis + PostgreSQL, answers lost/duplicated;
* :mod:`.growth` -- gate cost against schema size and ``requestState`` size;
* :mod:`.audit_append` -- chained audit appends/s (read back) in one tenant on PostgreSQL with
  1 to 40 concurrent writers (processes x threads), and over 4 tenants; chains verified after;
* :mod:`.audit_threads` -- the same appends from 8 and 40 threads of ONE process (issue 30): the
  rate and where an append's time goes (client CPU, the statement holding the chain head, the read-back);
* :mod:`.loopstall` -- the event loop's longest gap while the product reads a hostile server's huge
  listing, result of many blocks and round of very many input requests (:mod:`.hostile`).

Shared by them: :mod:`.common` (the standard round, statistics, result files; re-exporting
:mod:`.config`, :mod:`.machine` and :mod:`.services`, the run's private database, Redis and processes);
:mod:`.spans` -- where a round's time goes (component spans, cProfile).

Results go to ``var/bench/<name>.json`` (plus ``machine.json``); :mod:`.report` renders
``docs/benchmarks/README.md`` and its plots. Every run uses a private PostgreSQL database and its
own Redis key prefixes (database 12 by default), removed at the end.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: in run order: pending goes last, it adapts its biggest N to the time left in the budget
BENCHMARKS = ("gate_core", "growth", "loopstall", "audit_append", "audit_threads", "vs_sdk", "scaleout", "pending")
#: benchmarks that need the MCP server, users and ASGI workers
NEEDS_SERVER = {"vs_sdk", "pending", "scaleout"}


@dataclass
class Context:
    quick: bool
    tiny: bool
    services: Any
    out_dir: Path
    seeded: dict[str, Any] | None = None
    deadline: float | None = None
    pending_sizes: list[int] | None = None

    def time_left(self) -> float | None:
        """Seconds left of the suite's time budget (``None``: no budget)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def users(self, n: int) -> dict[str, Any]:
        """At least ``n`` seeded users with sessions (seeded once, grown on demand)."""
        from .common import seed

        if self.seeded is None or len(self.seeded["users"]) < n:
            self.seeded = seed(self.services.mcp_url, n)
        return self.seeded


def run_suite(names: list[str], *, out_dir: Path, quick: bool = False, tiny: bool = False,
              budget_s: float = 0.0, pending_sizes: list[int] | None = None) -> dict[str, Any]:
    """Run the named benchmarks in one process on fresh services; write one JSON file each.
    ``budget_s`` (> 0): the pending-capacity benchmark skips a level that would not fit in it."""
    t_start = time.monotonic()
    from .common import Services, machine, write_result

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    info = machine()
    services = Services().create()
    results: dict[str, Any] = {}
    try:
        services.setup_django()
        if NEEDS_SERVER & set(names):
            services.start_mcp_server()
        ctx = Context(quick=quick, tiny=tiny, services=services, out_dir=out_dir,
                      deadline=t_start + budget_s if budget_s > 0 else None, pending_sizes=pending_sizes)
        for name in sorted(names, key=BENCHMARKS.index):
            module = importlib.import_module(f".{name}", __name__)
            t0 = time.monotonic()
            print(f"== {name} ...", flush=True)
            try:
                res = module.run(ctx)
                if asyncio.iscoroutine(res):
                    res = asyncio.run(res)
            except Exception as exc:  # noqa: BLE001 -- one failing benchmark must not hide the others
                traceback.print_exc()
                res = {"benchmark": name, "error": f"{exc.__class__.__name__}: {exc}"}
            res["seconds"] = round(time.monotonic() - t0, 1)
            res["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            res["mode"] = "tiny" if tiny else "quick" if quick else "full"
            results[name] = res
            write_result(out_dir, name, res)
            if "error" not in res:
                for line in module.summary(res):
                    print("  " + line, flush=True)
            print(f"   ({res['seconds']} s)", flush=True)
    finally:
        services.close()
    info["started"] = started
    info["mode"] = "tiny" if tiny else "quick" if quick else "full"
    info["budget_s"] = budget_s
    info["suite_seconds"] = round(time.monotonic() - t_start, 1)
    info["loadavg_at_end"] = [round(x, 2) for x in __import__("os").getloadavg()]
    write_result(out_dir, "machine", info)
    return results
