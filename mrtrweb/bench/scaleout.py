"""Benchmark 4 -- scale-out: the same load (K simulated browsers doing whole rounds back to back
for a fixed time, through the tool form, the pushed card and ``operation_answer``) on 1 and on 2
ASGI workers (uvicorn
processes, production settings) sharing Redis and PostgreSQL; users are spread round-robin.

The MCP server counts retries per operation (nonce in its sealed ``requestState``): every
operation's answer must arrive exactly once. A last phase races each answer: the same answer
POSTed at the same moment to both workers (a double submit across processes), still expecting
exactly one retry per operation."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from .common import CpuShare, latency_summary, standard_round, tool_schema_fields


async def _load(bases: list[str], sessions: list[str], server_id: int, duration_s: float) -> dict[str, Any]:
    """Every browser does whole rounds back to back for ``duration_s`` (rounds in flight then finish)."""
    from .browser import new_http, open_users

    r = standard_round()
    args, fields = r["request"]["params"]["arguments"], tool_schema_fields(r)
    http = new_http(64)
    users = await open_users(bases, sessions, server_id, http=http, fetch_page=False)
    try:
        await asyncio.gather(*(u.round(args, fields) for u in users), return_exceptions=True)  # warm up
        lat: list[float] = []
        errors: list[str] = []

        async def worker(u: Any) -> None:
            while time.perf_counter() < t_end:
                try:
                    lat.append((await u.round(args, fields, timeout_s=120))["total"])
                except Exception as exc:  # noqa: BLE001 -- counted, reported
                    errors.append(f"{exc.__class__.__name__}: {str(exc)[:120]}")

        t0 = time.perf_counter()
        t_end = t0 + duration_s
        await asyncio.gather(*(worker(u) for u in users))
        elapsed = time.perf_counter() - t0
    finally:
        await asyncio.gather(*(u.close() for u in users), return_exceptions=True)
        await http.aclose()
    return {"workers": len(bases), "users": len(sessions), "duration_s": round(elapsed, 1), "rounds": len(lat),
            "errors": len(errors),
            "ws_reconnects": sum(u.reconnects for u in users),
            "fallback_panel_fetches": sum(u.fallback_fetches for u in users),
            "error_samples": errors[:5], "throughput_rounds_per_s": round(len(lat) / elapsed, 2),
            "latency": latency_summary(lat)}


async def _race(bases: list[str], sessions: list[str], server_id: int, rounds: int) -> dict[str, Any]:
    """Each round's answer POSTed at once to every worker (same user, same session)."""
    from .browser import BrowserUser, answer_post, new_http, open_users

    r = standard_round()
    args, fields = r["request"]["params"]["arguments"], tool_schema_fields(r)
    http = new_http(64)
    users = await open_users(bases[0], sessions, server_id, http=http, fetch_page=False)
    statuses: dict[str, int] = {}
    try:
        sem = asyncio.Semaphore(len(users))

        async def one(i: int) -> None:
            u = users[i % len(users)]
            async with sem:
                op_id = await u.start(args)
                await u.wait_status(op_id, "awaiting_input", timeout_s=120)
                twins = []
                for b in bases:
                    t = BrowserUser(b, u.session_key, server_id, http)
                    t.cookies, t.csrf = dict(u.cookies), u.csrf
                    twins.append(t)
                res = await asyncio.gather(*(answer_post(t, op_id, "1", fields) for t in twins),
                                           return_exceptions=True)
                for x in res:
                    key = "accepted" if x is None else str(x).split(":")[1].strip() if ":" in str(x) else "error"
                    statuses[key] = statuses.get(key, 0) + 1
                await u.wait_status(op_id, "completed", timeout_s=120)
                u.pushes.pop(op_id, None)

        await asyncio.gather(*(one(i) for i in range(rounds)))
    finally:
        await asyncio.gather(*(u.close() for u in users), return_exceptions=True)
        await http.aclose()
    return {"rounds": rounds, "answer_posts": statuses}


async def _run(ctx: Any) -> dict[str, Any]:
    from asgiref.sync import sync_to_async

    s = ctx.services
    k = 4 if ctx.tiny else 16
    duration = 4.0 if ctx.tiny else 15.0 if ctx.quick else 25.0
    race_rounds = 4 if ctx.tiny else 20 if ctx.quick else 32
    seeded = await sync_to_async(ctx.users)(k)
    sessions, server_id = seeded["sessions"][:k], seeded["server_id"]
    out: dict[str, Any] = {"benchmark": "scaleout", "quick": ctx.quick, "users": k, "duration_s": duration}
    for n_workers in (1, 2):
        procs = [s.start_worker(f"scale{n_workers}-{i}") for i in range(n_workers)]
        try:
            s.mcp_reset()
            pids = {"ASGI workers": [p.pid for _, p in procs], "benchmark client (browsers)": [os.getpid()],
                    "MCP server": [s.mcp_pid]}
            with CpuShare(pids) as cpu:
                res = await _load([b for b, _ in procs], sessions, server_id, duration)
            res["cpu"] = cpu.result
            res["mcp_server_counts"] = s.mcp_counts()
            out[f"workers_{n_workers}"] = res
            if n_workers == 2:
                s.mcp_reset()
                race = await _race([b for b, _ in procs], sessions, server_id, race_rounds)
                race["mcp_server_counts"] = s.mcp_counts()
                out["double_submit_race"] = race
        finally:
            for _, p in procs:
                s.stop(p)
            out.setdefault(f"workers_{n_workers}", {})["worker_errors"] = [s.worker_errors(f"scale{n_workers}-{i}")
                                                           for i in range(n_workers)]
    one, two = out["workers_1"], out["workers_2"]
    out["throughput_ratio"] = round(two["throughput_rounds_per_s"] / one["throughput_rounds_per_s"], 2)
    counts = [one["mcp_server_counts"], two["mcp_server_counts"], out["double_submit_race"]["mcp_server_counts"]]
    out["lost"] = sum(c["lost"] for c in counts)
    out["duplicated"] = sum(c["duplicated"] for c in counts)
    out["goals"] = {"ratio_goal": 1.8, "ratio_met": out["throughput_ratio"] >= 1.8,
                    "nothing_lost_or_duplicated": out["lost"] == 0 and out["duplicated"] == 0}
    return out


def run(ctx: Any):
    return _run(ctx)


def summary(res: dict[str, Any]) -> list[str]:
    one, two, race = res["workers_1"], res["workers_2"], res["double_submit_race"]
    return [
        f"1 worker: {one['throughput_rounds_per_s']} rounds/s (p50 {one['latency']['p50_ms']} ms, errors "
        f"{one['errors']}); 2 workers: {two['throughput_rounds_per_s']} rounds/s (p50 {two['latency']['p50_ms']} ms, "
        f"errors {two['errors']}); ratio {res['throughput_ratio']}x (goal >= 1.8)",
        f"cores busy (of {one['cpu']['cores']}): 1 worker {one['cpu']['cores_busy']}, 2 workers "
        f"{two['cpu']['cores_busy']}; by process with 2 workers {two['cpu']['by_process_cores']}, other "
        f"{two['cpu']['other_cores']}",
        f"answers lost {res['lost']}, sent twice {res['duplicated']} (MCP server counts); double-submit race: "
        f"{race['answer_posts']} -> {race['mcp_server_counts']}",
    ]
