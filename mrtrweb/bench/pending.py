"""Benchmark 3 -- pending capacity: N users, each with the operations page's WebSocket open on one
ASGI worker, each holding one pending round (started through the tool form POST, the consent card
pushed). Measures the worker's RSS and this run's Redis keys (``MEMORY USAGE``; ``INFO memory``
delta too, noisy on a shared Redis) per pending round, and the push latency: from the round being
received (the audit ``received`` row's timestamp, written by the worker right after the gate
accepted the round) to the WebSocket client holding the pushed card.

The worker's RSS and the collector's tracked objects (``gc_objects_per_*``, a census of the
worker, :mod:`mrtrweb.bench.worker_app`) are read once the rounds have waited longer than the
worker keeps a waiting round's MCP session (:func:`mrtrweb.servers.connections.release_after_s`, ~11 s):
a person takes longer than that to answer. The collector's pauses of 20 ms or more are counted
per level (``gc_pause_max_ms_level``); at the end of each level one full collection is timed
(``gc_full_collection``: the pause whenever one comes due at this N, whatever the thresholds) and
the objects alive after it give ``gc_live_objects_per_user`` (connected socket and pending round
together, over the warm worker's), and the RSS then ``rss_per_user_after_full_collection_kib``
(what a user costs once the garbage of closed sessions is freed; pymalloc keeps arenas that are
not wholly empty, so it is an upper bound). That collection also frees the level's old garbage before the
next level starts.

Two latency figures: while the N rounds arrive in a burst (``fill``), and for probe rounds
arriving one at a time while the N rounds are pending (``probe``, the figure the goal is about).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from .common import latency_summary, rss_kib, standard_round, tool_schema_fields


async def _full_collection(proc: Any, log: Any, timeout_s: float = 120.0) -> dict[str, Any]:
    """A timed full collection in the worker (:mod:`mrtrweb.bench.worker_app`, ``SIGRTMIN+1``):
    ``{"ms": float, "collected": int, "tracked_after": int}``, ``{}`` without an answer."""
    import re
    import signal

    seen = log.read_text(errors="replace").count("GC full ")
    proc.send_signal(signal.SIGRTMIN + 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        found = re.findall(r"GC full ([0-9.]+) ms collected (\d+) tracked (\d+)", log.read_text(errors="replace"))
        if len(found) > seen:
            ms, collected, tracked = found[-1]
            return {"ms": float(ms), "collected": int(collected), "tracked_after": int(tracked)}
    return {}


async def _census(proc: Any, log: Any, *, by_type: bool = False, timeout_s: float = 60.0) -> dict[str, Any]:
    """The worker's collector census (:mod:`mrtrweb.bench.worker_app`: ``SIGUSR1`` / ``SIGUSR2``):
    ``{"tracked": int, "frozen": int, "sessions": int, "released": int}`` (MCP sessions open in the
    worker's pool, and released by it so far) or, ``by_type``, ``{"tracked": int, "top": {type: count}}``;
    ``{}`` if the worker did not answer within ``timeout_s`` seconds."""
    import re
    import signal

    prefix = "GC types " if by_type else "GC census "
    seen = log.read_text(errors="replace").count(prefix)
    proc.send_signal(signal.SIGUSR2 if by_type else signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.startswith(prefix)]
        if len(lines) > seen:
            line = lines[-1]
            if by_type:
                words = line[len(prefix):].split()
                return {"tracked": int(words[0]), "top": {k: int(v) for k, v in (w.rsplit("=", 1) for w in words[1:])}}
            m = re.match(r"GC census tracked (\d+) frozen (\d+) .* sessions (\d+) released (\d+)"
                         r"(?: collections ([0-9,]+) cpu_ms ([0-9.,]+))?", line)
            if not m:
                return {}
            out = {"tracked": int(m.group(1)), "frozen": int(m.group(2)), "sessions": int(m.group(3)),
                   "released": int(m.group(4))}
            if m.group(5):
                out["collections"] = [int(x) for x in m.group(5).split(",")]
                out["cpu_ms"] = [float(x) for x in m.group(6).split(",")]
            return out
    return {}


def _pauses_since(log: Any, offset: int) -> tuple[list[tuple[float, float, int]], int]:
    """The collector pauses of 20 ms or more the worker logged after byte ``offset`` of its log as
    ``(wall ms, CPU ms, generation)``, and the log's new end offset."""
    import re

    data = log.read_bytes()
    text = data[offset:].decode(errors="replace")
    found = re.findall(r"GC pause ([0-9.]+) ms gen (\d+) collected \d+ cpu ([0-9.]+) ms", text)
    return [(float(w), float(c), int(g)) for w, g, c in found], len(data)


def _type_delta(before: dict[str, int], after: dict[str, int], per: int) -> dict[str, float]:
    """Objects per unit (``per``) by type between two censuses by type (the 15 largest growths)."""
    names = set(before) | set(after)
    delta = {k: (after.get(k, 0) - before.get(k, 0)) / max(1, per) for k in names}
    return dict(sorted(((k, round(v, 1)) for k, v in delta.items() if v > 0), key=lambda kv: -kv[1])[:15])


async def _received_times(op_ids: list[str]) -> dict[str, float]:
    from ..models import AuditEvent

    rows = AuditEvent.objects.filter(operation_id__in=op_ids, event="received").values_list("operation_id",
                                                                                             "created_at")
    return {str(op): ts.timestamp() async for op, ts in rows}


def _limit_query_plans(tenant_id: Any, user_id: Any) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the per-start limit check with the pending rounds in place: the one
    query of :func:`mrtrweb.operations.starting.check_limits_sync` (its four counts), captured
    as it runs and explained: how its cost grows with N."""
    import re

    from django.contrib.auth import get_user_model
    from django.db import connection

    from ..operations.starting import check_limits_sync
    from ..operations.messages import OperationRefused

    captured: list[tuple[str, Any]] = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    user = get_user_model().objects.get(pk=user_id)
    with connection.execute_wrapper(capture):
        try:
            check_limits_sync(user, tenant_id)
        except OperationRefused:
            pass  # a limit reached still ran the query
    out = {}
    for sql, params in captured[:1]:
        with connection.cursor() as cur:
            cur.execute("EXPLAIN ANALYZE " + sql, params)
            plan = "\n".join(row[0] for row in cur.fetchall())
        m = re.search(r"Execution Time: ([0-9.]+) ms", plan)
        first = plan.splitlines()[0].strip() if plan else ""
        out["user_and_tenant_limits"] = {"execution_ms": float(m.group(1)) if m else None, "plan_top": first[:160]}
    return out


async def grow(ctx: Any, sizes: list[int], seeded: dict[str, Any], n_probe: int,
               closing: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One worker; users are added level by level (N = sizes[0], then sizes[1]...), each new user
    opening the WebSocket and then starting one round that stays pending; measured at each level
    (per-user figures are deltas from the previous level). At the end every socket closes at once
    (a mass disconnect); ``closing`` gets the worker's errors after it."""
    from ..servers.connections import release_after_s
    from .browser import new_http, open_users

    s = ctx.services
    r = standard_round()
    args = r["request"]["params"]["arguments"]
    base, proc = s.start_worker("pending")
    log = s.logs["pending"]
    http = new_http(32)
    users: list[Any] = []
    results = []
    try:
        # warm the worker (imports, template cache, first connections) with a user outside the N
        (warm,) = await open_users(base, [seeded["sessions"][-1]], seeded["server_id"], http=http, fetch_page=False)
        users.append(warm)
        await warm.round(args, tool_schema_fields(r))
        await asyncio.sleep(0.5)
        first_tracked = (await _full_collection(proc, log)).get("tracked_after", 0)  # the warm worker's live objects
        prev_rss_full = rss_kib(proc.pid)
        census0 = await _census(proc, log)
        types_prev = (await _census(proc, log, by_type=True)).get("top", {})
        _, log_offset = _pauses_since(log, 0)
        prev_rss = rss_kib(proc.pid)
        prev_redis = s.redis_bytes()
        prev_used = s.redis_used_memory()
        prev_n = 0
        fill_rate = None
        for n in sizes:
            delta = n - prev_n
            left = ctx.time_left()
            if results and left is not None and fill_rate:
                need = delta / fill_rate * 1.3 + 20  # the fill slows down as N grows
                if need > left:
                    results.append({"pending": n, "skipped": f"not run: filling {delta} more rounds at "
                                    f"{fill_rate:.1f} rounds/s needs ~{need:.0f} s, {left:.0f} s left of the "
                                    f"suite's time budget (--budget-s 0 lifts it)"})
                    break
            t0 = time.monotonic()
            new = await open_users(base, seeded["sessions"][prev_n:n], seeded["server_id"], concurrency=32,
                                   http=http, fetch_page=False)
            users += new
            t_open = time.monotonic() - t0
            rss_ws = rss_kib(proc.pid)
            census_ws = await _census(proc, log)
            types_ws = (await _census(proc, log, by_type=True)).get("top", {})
            sem = asyncio.Semaphore(16)

            async def hold(u: Any) -> tuple[Any, str | None]:
                # 16 rounds outstanding at a time (start .. card pushed): the worker is kept busy,
                # not flooded with hundreds of calls in flight
                async with sem:
                    try:
                        op_id = await u.start(args)
                        await u.wait_status(op_id, "awaiting_input", timeout_s=300, fallback_s=30)
                    except Exception as exc:  # noqa: BLE001 -- counted
                        fill_errors.append(f"{exc.__class__.__name__}: {str(exc)[:120]}")
                        return u, None
                return u, op_id

            def pushed_at(u: Any, op_id: str) -> float:
                """Wall time the card's push arrived (NaN: no push, only the page's fallback fetch saw it)."""
                for _t, status, _html, wall, pushed in u.pushes.get(op_id, []):
                    if pushed and status == "awaiting_input":
                        return wall
                return float("nan")

            fill_errors: list[str] = []
            t0 = time.monotonic()
            started = await asyncio.gather(*(hold(u) for u in new))
            t_fill = time.monotonic() - t0
            # late pushes still count as pushes; and a round waits for its person longer than the
            # worker keeps its MCP session (connections.release_after_s): measured as it then is
            await asyncio.sleep(max(2.0, release_after_s() + 1.0))
            held = [(op_id, pushed_at(u, op_id)) for u, op_id in started if op_id]
            rss_pending = rss_kib(proc.pid)
            census_pending = await _census(proc, log)
            types_pending = (await _census(proc, log, by_type=True)).get("top", {})
            redis1 = s.redis_bytes()
            used1 = s.redis_used_memory()
            received = await _received_times([op for op, _ in held])
            fill = [max(0.0, wall - received[op]) for op, wall in held if op in received and not math.isnan(wall)]
            missed = sum(1 for _, wall in held if math.isnan(wall))
            fill_rate = delta / t_fill
            rss_before_probes = rss_kib(proc.pid)
            probes = []
            for i in range(n_probe):
                u = users[1 + (i * 7919) % n]
                op_id = await u.start(args)
                await u.wait_status(op_id, "awaiting_input", timeout_s=60)
                await asyncio.sleep(0.05)
                wall = pushed_at(u, op_id)
                got = await _received_times([op_id])
                if math.isnan(wall):
                    missed += 1
                else:
                    probes.append(max(0.0, wall - got[op_id]))
            await asyncio.sleep(0.5)
            rss_probe_delta = rss_kib(proc.pid) - rss_before_probes
            pauses, log_offset = _pauses_since(log, log_offset)
            from asgiref.sync import sync_to_async

            plans = await sync_to_async(_limit_query_plans)(seeded["tenant_id"], seeded["users"][0].pk)
            results.append({
                "limit_query_plans": plans,
                "pending": n,
                "added": delta,
                "open_users_s": round(t_open, 2),
                "fill_s": round(t_fill, 2),
                "fill_rounds_per_s": round(delta / t_fill, 1),
                "worker_rss_kib": {"before": prev_rss, "connected": rss_ws, "pending": rss_pending},
                "rss_per_connected_user_kib": round((rss_ws - prev_rss) / delta, 2),
                "rss_per_pending_round_kib": round((rss_pending - rss_ws) / delta, 2),
                # the probes are second rounds of users whose MCP session is already open
                "rss_per_extra_round_same_user_kib": round(rss_probe_delta / max(1, n_probe), 2),
                "redis_bytes_per_pending_round": round((redis1["bytes"] - prev_redis["bytes"]) / delta, 1),
                "redis_keys_per_pending_round": round((redis1["keys"] - prev_redis["keys"]) / delta, 2),
                "redis_info_used_memory_delta_per_round": round((used1 - prev_used) / delta, 1),
                "pushes_missed": missed,
                "fill_errors": len(fill_errors),
                "fill_error_samples": fill_errors[:5],
                "ws_reconnects": sum(u.reconnects for u in users),
                "worker_errors_so_far": s.worker_errors("pending"),
                # the collector: pauses of 20 ms or more while this level filled and probed, and
                # the objects it tracks (walks in a full collection) per connected user / pending round
                "gc_pauses_20ms_level": len(pauses),
                "gc_pause_max_ms_level": max((w for w, _c, _g in pauses), default=0.0),
                # the same pauses in the worker thread's CPU time (the collector's own work)
                "gc_pause_max_cpu_ms_level": max((c for _w, c, _g in pauses), default=0.0),
                "gc_full_collections_level": sum(1 for _w, _c, g in pauses if g == 2),
                # every collection while the level's rounds arrived (fill; probes excluded), by
                # generation, and the collector's CPU per round added (what the thresholds trade)
                "gc_collections_fill": _gc_delta(census_ws, census_pending, "collections"),
                "gc_cpu_ms_fill": _gc_delta(census_ws, census_pending, "cpu_ms"),
                "gc_cpu_ms_per_round_fill": (round(sum(_gc_delta(census_ws, census_pending, "cpu_ms")) / delta, 2)
                                             if _gc_delta(census_ws, census_pending, "cpu_ms") else None),
                "gc_frozen": census_pending.get("frozen"),
                "mcp_sessions_open": census_pending.get("sessions"),
                "mcp_sessions_released": census_pending.get("released"),
                "gc_tracked": {"before": census0.get("tracked"), "connected": census_ws.get("tracked"),
                               "pending": census_pending.get("tracked")},
                "gc_objects_per_connected_user": _per(census0, census_ws, delta),
                "gc_objects_per_pending_round": _per(census_ws, census_pending, delta),
                "gc_types_per_connected_user": _type_delta(types_prev, types_ws, delta),
                "gc_types_per_pending_round": _type_delta(types_ws, types_pending, delta),
                "push_latency_fill": latency_summary(fill),
                "push_latency_probe": latency_summary(probes),
            })
            # the probes' rounds stay pending too: the next level's baseline includes them
            prev_rss, prev_redis, prev_used, prev_n = rss_kib(proc.pid), s.redis_bytes(), s.redis_used_memory(), n
            # what a full collection costs at this N (the pause whenever one comes due), and the
            # objects alive after it; then the next level starts from a collected heap
            full = await _full_collection(proc, log)
            results[-1]["gc_full_collection"] = full
            rss_full = rss_kib(proc.pid)  # what the worker holds once its old garbage is freed
            results[-1]["worker_rss_kib"]["after_full_collection"] = rss_full
            results[-1]["rss_per_user_after_full_collection_kib"] = round((rss_full - prev_rss_full) / delta, 2)
            prev_rss_full = rss_full
            if full.get("tracked_after"):
                results[-1]["gc_live_objects_per_user"] = round((full["tracked_after"] - first_tracked) / n, 1)
            census0 = await _census(proc, log)  # the probes' rounds are in the next level's baseline
            types_prev = (await _census(proc, log, by_type=True)).get("top", {})
        return results
    finally:
        t0 = time.monotonic()
        await asyncio.gather(*(u.close() for u in users), return_exceptions=True)
        await http.aclose()
        await asyncio.sleep(2.0)  # the worker runs the consumers' disconnects
        if closing is not None:
            closing.update({"sockets": len(users), "close_s": round(time.monotonic() - t0, 2),
                            "worker_errors": s.worker_errors("pending")})
        s.stop(proc)


async def _run(ctx: Any) -> dict[str, Any]:
    from asgiref.sync import sync_to_async

    sizes = ctx.pending_sizes or ([5, 10] if ctx.tiny else [50, 200] if ctx.quick else [100, 1000, 5000])
    n_probe = 5 if ctx.tiny else 20 if ctx.quick else 50
    seeded = await sync_to_async(ctx.users)(max(sizes) + 1)
    out: dict[str, Any] = {"benchmark": "pending", "quick": ctx.quick, "sizes": sizes}
    closing: dict[str, Any] = {}
    out["results"] = await grow(ctx, sizes, seeded, n_probe, closing)
    out["mass_disconnect"] = closing
    await sync_to_async(_end_pending)()
    at = {x["pending"]: x for x in out["results"] if "skipped" not in x}
    goal_n = 1000 if 1000 in at else max(at)
    out["goals"] = {"push_p99_goal_ms": 50, "at_pending": goal_n,
                    "probe_p99_ms": at[goal_n]["push_latency_probe"]["p99_ms"],
                    "met": at[goal_n]["push_latency_probe"]["p99_ms"] < 50}
    return out


def _gc_delta(a: dict[str, Any], b: dict[str, Any], key: str) -> list[float] | None:
    """By generation, ``b[key] - a[key]`` of two censuses (collections or their CPU ms); ``None``
    without both."""
    if not a.get(key) or not b.get(key):
        return None
    return [round(y - x, 1) for x, y in zip(a[key], b[key])]


def _per(a: dict[str, Any], b: dict[str, Any], n: int) -> float | None:
    """Tracked objects added per unit between two censuses (``None``: a census is missing)."""
    if not a.get("tracked") or not b.get("tracked"):
        return None
    return round((b["tracked"] - a["tracked"]) / max(1, n), 1)


def _end_pending() -> None:
    from ..models import Operation

    Operation.objects.filter(status=Operation.Status.AWAITING_INPUT).update(status=Operation.Status.EXPIRED)


def run(ctx: Any):
    return _run(ctx)


def summary(res: dict[str, Any]) -> list[str]:
    lines = []
    for x in res["results"]:
        if "skipped" in x:
            lines.append(f"N={x['pending']}: {x['skipped']}")
            continue
        lines.append(
            f"N={x['pending']}: worker RSS {x['rss_per_connected_user_kib']} KiB/connected user + "
            f"{x['rss_per_pending_round_kib']} KiB/pending round; Redis {x['redis_bytes_per_pending_round']} B/round "
            f"({x['redis_keys_per_pending_round']} keys); push p99 probe {x['push_latency_probe']['p99_ms']} ms, "
            f"fill {x['push_latency_fill']['p99_ms']} ms ({x['fill_rounds_per_s']} rounds/s); "
            f"GC pauses >= 20 ms {x.get('gc_pauses_20ms_level')} (longest {x.get('gc_pause_max_ms_level')} ms, "
            f"{x.get('gc_pause_max_cpu_ms_level')} ms CPU; full {x.get('gc_full_collections_level')}; the collector's "
            f"CPU {x.get('gc_cpu_ms_per_round_fill')} ms/round filling), "
            f"tracked objects {x.get('gc_objects_per_connected_user')}/connected user + "
            f"{x.get('gc_objects_per_pending_round')}/pending round, frozen {x.get('gc_frozen')}; MCP sessions "
            f"open {x.get('mcp_sessions_open')}, released {x.get('mcp_sessions_released')}; a full collection "
            f"{x.get('gc_full_collection', {}).get('ms')} ms, live objects/user {x.get('gc_live_objects_per_user')}, "
            f"RSS after it {x.get('rss_per_user_after_full_collection_kib')} KiB/user (socket and round)")
    md = res.get("mass_disconnect")
    if md:
        lines.append(f"mass disconnect of {md['sockets']} sockets: worker errors {md['worker_errors']}")
    return lines
