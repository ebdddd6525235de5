"""The report's goals table: issue 16's goals and the suite's own, each with what this run
measured. A goal whose benchmark did not run (or failed, or did not reach the goal's size) says
"not measured" -- never a value from elsewhere.

Each row is ``[goal, target, measured, met]``; ``met`` is True/False, or a string ("not measured",
"n/a: ...") when the run did not measure the goal's condition (e.g. a tiny run's 2 users, not 8).
"""

from __future__ import annotations

from typing import Any

NOT_MEASURED = "not measured"


def _ok(res: Any) -> bool:
    return bool(res) and "error" not in res


def _why_not(res: Any, name: str) -> str:
    if res is None:
        return f"{NOT_MEASURED} ({name} did not run)"
    return f"{NOT_MEASURED} ({name} failed: {str(res.get('error'))[:80]})"


def _row(goal: str, target: str, res: Any, name: str, measure) -> list[Any]:
    """``measure(res) -> (measured text, met)``; "not measured" when ``res`` is missing, failed or
    lacks a field the goal needs (a KeyError: an older result file)."""
    if not _ok(res):
        return [goal, target, _why_not(res, name), NOT_MEASURED]
    try:
        text, met = measure(res)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return [goal, target, f"{NOT_MEASURED} (the {name} result has no such figure)", NOT_MEASURED]
    return [goal, target, text, met]


def _ratio(key: str, limit: float):
    def measure(v: dict[str, Any]) -> tuple[str, bool]:
        x = v["ratios"][key]
        a = v["a_sdk"]["latency"]["p50_ms"]
        other = v["b_headless" if key.startswith("b_") else "c_browser"]["latency"]["p50_ms"]
        return f"{x}x ({other} ms vs {a} ms)", x <= limit
    return measure


def _interleaved(v: dict[str, Any]) -> tuple[str, Any]:
    x = v["interleaved"]
    r = x["b_over_a_p50"]
    return (f"{r}x ({x['b_headless']['p50_ms']} ms vs {x['a_sdk']['p50_ms']} ms; median pair ratio "
            f"{x['median_pair_ratio']}x)", True if r <= 3 else ("**no** (within the least acceptable 5x)" if r <= 5 else False))


def _throughput(v: dict[str, Any]) -> tuple[str, Any]:
    b = v["b_headless"]
    x, conc = b["throughput_rounds_per_s"], b["concurrency"]
    text = f"{x} rounds/s at {conc} concurrent users (bare SDK {v['a_sdk']['throughput_rounds_per_s']})"
    return text, (x >= 40 if conc == 8 else f"n/a: measured at {conc} users, not 8")


def _cpu(v: dict[str, Any]) -> tuple[str, bool]:
    b, a = v["b_headless"], v["a_sdk"]
    x = b["cpu_ms_per_round"]
    c = v["c_browser"].get("worker_cpu_ms_per_round")
    return (f"{x} ms headless (its process: the product and the MCP client; bare SDK {a['cpu_ms_per_round']} ms)"
            + (f"; browser path {c} ms in the ASGI worker" if c is not None else ""), x <= 25)


def _counts(v: dict[str, Any]) -> tuple[str, bool]:
    c = v["headless_counts"]
    q, h = c["sql_queries_per_round"], c["sync_to_async_hops_per_round"]
    return f"{q} / {h} (counted over {c['rounds']} rounds)", q <= 12 and h <= 6


def _gc_at_5000(p: dict[str, Any]) -> tuple[str, Any]:
    at = {x["pending"]: x for x in p["results"] if "skipped" not in x}
    if 5000 not in at:
        done = f"{max(at):,}" if at else "none"
        return f"{NOT_MEASURED} at 5,000 (largest N measured: {done})", "n/a: N = 5,000 not in this run"
    x = at[5000]
    ms = x["gc_pause_max_ms"] if "gc_pause_max_ms" in x else x["worker_errors_so_far"]["gc_pause_max_ms"]
    return f"{ms:,.0f} ms (longest pause of the worker up to the end of N = 5,000)", ms <= 100


def _memory(p: dict[str, Any]) -> tuple[str, bool]:
    done = [x for x in p["results"] if "skipped" not in x]
    top = done[-1]
    return f"{top['rss_per_pending_round_kib']} KiB at N = {top['pending']:,}", top["rss_per_pending_round_kib"] <= 40


def _audit(a: dict[str, Any]) -> tuple[str, Any]:
    g = a["goals"]
    one = sorted((x for x in a["levels"] if x["tenants"] == 1), key=lambda x: x["writers"])
    rates = ", ".join(f"{x['writers']}: {x['appends_per_s']:,.0f}" for x in one)
    text = (f"{g['appends_per_s']:,.0f}/s at {g['at_writers']} writers; by writers {rates}; "
            f"{'not falling' if g['not_falling'] else '**falling**'}; chains intact and complete: "
            f"{'yes' if a['chains_ok'] else '**no**'}")
    if g["at_writers"] < 40:
        return text, f"n/a: measured at {g['at_writers']} writers, not 40"
    return text, bool(g["met"] and a["chains_ok"])


def _push(p: dict[str, Any]) -> tuple[str, bool]:
    gl = p["goals"]
    return (f"{gl['probe_p99_ms']} ms" + ("" if gl["met"] else f" ({gl['probe_p99_ms'] / 50:.1f}x over)"),
            gl["met"])


def _pending_sizes(p: dict[str, Any]) -> tuple[str, bool]:
    done = [x for x in p["results"] if "skipped" not in x]
    skipped = [x["pending"] for x in p["results"] if "skipped" in x]
    top = done[-1]
    return (f"largest N {top['pending']:,}: {top['rss_per_pending_round_kib']} KiB worker RSS + "
            f"{top['redis_bytes_per_pending_round']:,} B Redis per pending round, push p99 "
            f"{top['push_latency_probe']['p99_ms']} ms"
            + (f"; skipped: {', '.join(f'{n:,}' for n in skipped)}" if skipped else ""), not skipped)


def _gate(g: dict[str, Any]) -> tuple[str, bool]:
    x = g["inmemory"].get("cpu_rounds_per_s", g["inmemory"]["rounds_per_s"])
    return (f"{x:,.0f} rounds/s of CPU time" + ("" if x >= 10000 else f" ({10000 / x:.1f}x short)")
            + f"; {g['inmemory']['rounds_per_s']:,.0f}/s wall", x >= 10000)


def _held(g: dict[str, Any]) -> tuple[str, bool]:
    mt = g["memory_inmemory_after_ttl"]
    return (f"{g['memory_inmemory']['held_bytes_per_round']} B right after (claim tokens, TTL-bounded); "
            f"after the TTL {mt.get('held_blocks', '?')} blocks / {mt['held_bytes']:,} B in all for "
            f"{mt['rounds']:,} rounds (dict table at peak size, caches)", mt.get("held_blocks", 10 ** 9) <= 500)


def _loopstall(x: dict[str, Any]) -> tuple[str, Any]:
    g, s = x["goals"], x["sizes"]
    worst = max(x["cases"], key=lambda name: x["cases"][name]["max_gap_ms"])
    text = (f"{g['max_gap_ms']:,.0f} ms ({worst.replace('_', ' ')}; {s['listed']:,} listed, {s['blocks']:,} blocks, "
            f"{s['requests']:,} requests)")
    if not x["full_sizes"]:
        return text, "n/a: measured at smaller sizes than 30,000 / 200,000 / 20,000"
    return text, g["max_gap_ms"] <= g["goal_ms"]


def goal_rows(data: dict[str, Any]) -> list[list[Any]]:
    """The goals table's rows from the results of one run (``{benchmark name: its JSON}``)."""
    g, v, p, s, a, ls = (data.get(k) for k in ("gate_core", "vs_sdk", "pending", "scaleout", "audit_append",
                                               "loopstall"))
    p_sizes = ", ".join(f"{n:,}" for n in p.get("sizes", [])) if _ok(p) else "100, 1,000, 5,000"
    return [
        _row("headless round p50 vs the bare SDK's manual loop", "≤ 3x", v, "vs_sdk", _ratio("b_over_a_p50", 3)),
        _row("the same, rounds interleaved (one SDK round, one headless round, in turn; both met the machine in "
             "one state)", "≤ 3x (5x the least acceptable)", v, "vs_sdk", _interleaved),
        _row("browser round p50 (WebSocket + form posts) vs the bare SDK", "≤ 5x", v, "vs_sdk",
             _ratio("c_over_a_p50", 5)),
        _row("rounds/s, 8 concurrent users, one worker (headless)", "≥ 40 (issue 30; 100 the aim)", v, "vs_sdk",
             _throughput),
        _row("CPU per round in the worker, 8 concurrent users (headless)", "≤ 25 ms", v, "vs_sdk", _cpu),
        _row("SQL queries / sync_to_async hops per headless round", "≤ 12 / ≤ 6", v, "vs_sdk", _counts),
        _row("2 workers vs 1", "≥ 1.85x", s, "scaleout",
             lambda s: (f"{s['throughput_ratio']}x", s["throughput_ratio"] >= 1.85)),
        _row("longest garbage-collector pause, one worker, 5,000 users", "≤ 100 ms", p, "pending", _gc_at_5000),
        _row("worker memory per pending round", "≤ 40 KiB", p, "pending", _memory),
        _row("audit appends/s in one tenant on PostgreSQL (read back), 40 writers", "≥ 500/s, not falling "
             "as writers grow", a, "audit_append", _audit),
        _row("gate core, in-process, one core", "≥ 10,000 rounds/s", g, "gate_core", _gate),
        _row("held per finished round", "0 B beyond bounded caches", g, "gate_core", _held),
        _row(f"push p99 with {p['goals']['at_pending'] if _ok(p) and 'goals' in p else 1000:,} pending", "< 50 ms",
             p, "pending", _push),
        _row(f"pending rounds on one worker, N = {p_sizes}", "every N measured in the one command", p, "pending",
             _pending_sizes),
        _row("answers lost / sent twice", "0 / 0", s, "scaleout",
             lambda s: (f"{s['lost']} / {s['duplicated']}", s["lost"] == 0 and s["duplicated"] == 0)),
        _row("longest event-loop gap under hostile input (a 30,000-item listing, a 200,000-block result, a "
             "20,000-request round)", "≤ 800 ms", ls, "loopstall", _loopstall),
    ]
