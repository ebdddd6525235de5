"""Render ``docs/benchmarks/README.md`` and its PNG plots from the JSON results of a run
(``python -m mrtrweb.bench report [--in var/bench] [--docs docs/benchmarks]``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .common import DEFAULT_OUT, DOCS_DIR
from .goals import goal_rows
from .loopstall import section as loopstall_section
from .audit_threads import audit_threads_section
from .plots import plots as _plots


def _load(inp: Path) -> dict[str, Any]:
    out = {}
    for path in sorted(inp.glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except ValueError:
            continue
    return out


def _fmt(x: Any, nd: int = 1) -> str:
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        return f"{x:,.{nd}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(c) for c in row) + " |")
    return lines + [""]


def _profile_table(prof: Any, limit: int = 10) -> list[str]:
    """Own-time top functions, then the project's functions by cumulative time (share of the run)."""
    rows = prof["own"] if isinstance(prof, dict) else prof
    out = ["By own time:", ""]
    out += _table(["function", "calls", "own s", "cumulative s"],
                  [[f"`{r['function']}`", r["calls"], r["tottime_s"], r["cumtime_s"]] for r in rows[:limit]])
    if isinstance(prof, dict) and prof.get("cumulative"):
        out += ["By cumulative time (project functions, `deepcopy`, `jsonschema`):", ""]
        out += _table(["function", "calls", "cumulative s", "share of run %"],
                      [[f"`{r['function']}`", r["calls"], r["cumtime_s"], r.get("cum_share_pct", "")]
                       for r in prof["cumulative"][:limit]])
    return out


#: (the hop that sends it, its place among that hop's statements) -> the guarantee a statement of the
#: headless round serves (docs/round.md, "What one round asks of the database")
ROUND_GUARANTEES = {
    ("_member_server", 1): "start: the user's access to the tenant beside the tenant's server row -- a non-member "
                           "is refused before anything is listed, connected or started",
    ("_start_sync", 1): "start: the row inserted only while the owner may act and the limits hold, the request id "
                        "bound and the binding written only with it -- access right before the call leaves; limits; "
                        "a result accepted only for the request this user sent",
    ("_judge_round", 1): "the result: access, the server as it is now, the requestState's trail, the live binding "
                         "-- access at the phase; replay denied; the configuration judged on the current server",
    ("_judge_round", 2): "the result's single-use claim and the binding's move -- one result per request across "
                         "workers",
    ("_judge_round", 3): "the `received` append and, only with it, the row to awaiting_input -- audited before "
                         "anyone sees it",
    ("show", 1): "the `shown` append under the chain's lock, once -- the consent receipt: no answer without it",
    ("_answer_sync", 1): "the answer: the row, the owner's access, the round's trail and receipt, the binding -- "
                         "access at the answer; no answer without the receipt; configuration and authorization",
    ("_answer_sync", 2): "the round's claim, the retry id bound, the record moved -- consumed once across workers",
    ("_answer_sync", 3): "the `submitted` append and, only with it, the row to running while the owner may act -- "
                         "audited before the retry leaves; access right before it leaves",
    ("_answer_sync", 4): "the `submitted` row read back, its hash checked -- the audit is durable before the retry "
                         "leaves",
    ("_check_and_complete", 1): "the end: the row to completed while the owner may act, the binding deleted only "
                                "with it -- nothing can be sent for the operation any more",
    ("_check_and_complete", 2): "the `completed` append -- the end is audited",
}


def _statement_list(stmts: list[dict[str, str]]) -> list[str]:
    out, seen = [], {}
    for i, x in enumerate(stmts, 1):
        hop = x["hop"].rsplit(".", 1)[-1]
        seen[hop] = seen.get(hop, 0) + 1
        why = ROUND_GUARANTEES.get((hop, seen[hop]), "(not one of the round's listed statements)")
        out.append(f"{i}. *{hop}*: {why}. `{x['sql'][:90].replace('`', '')}…`")
    return out + [""]


def render(inp: Path = DEFAULT_OUT, docs: Path = DOCS_DIR) -> Path:
    """Write ``docs/README.md`` (and plots) from the JSON results in ``inp``; returns its path."""
    data = _load(Path(inp))
    docs = Path(docs)
    docs.mkdir(parents=True, exist_ok=True)
    plots = _plots(data, docs)
    m = data.get("machine", {})
    L: list[str] = ["# Benchmarks", ""]
    L += ["Generated by `python -m mrtrweb.bench` (run + report) or `python -m mrtrweb.bench report` "
          "(report only, from `var/bench/*.json`). Do not edit by hand.", ""]
    mode = m.get("mode", "?")
    L += [f"**Measured:** {m.get('started', '?')} (UTC), mode **{mode}**"
          + (" -- small sizes, a smoke run: figures are indicative only." if mode != "full" else ".")
          + (f" The suite took {m['suite_seconds']:.0f} s" if m.get("suite_seconds") else "")
          + (f" (time budget {m['budget_s']:.0f} s)." if m.get("budget_s") else "."), ""]
    took = [f"{name} {data[name].get('seconds', '?')} s" for name in ("gate_core", "growth", "loopstall", "audit_append",
                                                                       "vs_sdk", "scaleout", "pending") if name in data]
    if took:
        L += ["Per benchmark: " + ", ".join(took) + ".", ""]
    L += ["## Machine", ""]
    L += _table(["what", "value"], [
        ["CPU", m.get("cpu")], ["cores", m.get("cores")], ["RAM", f"{m.get('ram_gib')} GiB"], ["OS", m.get("os")],
        ["Python", m.get("python")], ["Django", m.get("django")], ["mcp SDK", m.get("mcp")],
        ["channels / channels-redis / django-redis", f"{m.get('channels')} / {m.get('channels_redis')} / "
                                                     f"{m.get('django_redis')}"],
        ["uvicorn / websockets", f"{m.get('uvicorn')} / {m.get('websockets')}"],
        ["Redis", m.get("redis")], ["PostgreSQL", m.get("postgresql")],
        ["load average at start / end", f"{m.get('loadavg_at_start')} / {m.get('loadavg_at_end')}"],
    ])
    L += ["Everything (benchmark client, MCP server process, ASGI workers, PostgreSQL, Redis) runs on this one "
          "machine; a load average above the core count means other work shared the cores.", ""]

    L += ["## Goals", ""]
    L += _table(["goal", "target", "measured", "met"], goal_rows(data))

    gc_ = data.get("gate_core")
    L += ["## 1. Gate core", ""]
    if gc_ and "error" not in gc_:
        L += ["`register` + `receive` (accept) + `respond` (build the retry) of the standard round, one thread, "
              "rounds one after another; `close` timed apart. *CPU* figures count only the benchmark thread's CPU "
              "time (what one dedicated core does, robust to other load on the machine); *wall* figures are "
              "elapsed time.", ""]
        gi, gr = gc_["inmemory"], gc_["redis"]
        L += _table(["store", "rounds/s (CPU)", "µs CPU/round", "rounds/s (wall)", "µs wall/round",
                     "close µs/round", "runs (CPU rounds/s)"], [
            ["in-process (`InMemoryBindingStore`)", gi.get("cpu_rounds_per_s"), gi.get("cpu_us_per_round"),
             gi["rounds_per_s"], gi["us_per_round"], gi["close_us_per_round"],
             ", ".join(str(x) for x in gi.get("runs_cpu_rounds_per_s", []))],
            ["Django cache on Redis (`DjangoCacheBindingStore`)", gr.get("cpu_rounds_per_s"),
             gr.get("cpu_us_per_round"), gr["rounds_per_s"], gr["us_per_round"], gr["close_us_per_round"], ""],
        ])
        mi, mt, mr = gc_["memory_inmemory"], gc_["memory_inmemory_after_ttl"], gc_["memory_redis"]
        L += ["Memory still held after finished (closed) rounds, `tracemalloc`, after `gc.collect()`:", ""]
        L += _table(["case", "rounds", "held bytes", "bytes/round", "what the store still holds"], [
            ["in-process store, right after", mi["rounds"], mi["held_bytes"], mi["held_bytes_per_round"],
             json.dumps(mi["store"])],
            ["in-process store, after the TTL passed (swept)", mt["rounds"], mt["held_bytes"],
             mt["held_bytes_per_round"], json.dumps(mt["store"])],
            ["Redis store (Python side)", mr["rounds"], mr["held_bytes"], mr["held_bytes_per_round"], ""],
            ["Redis store (Redis side, keys left per round)", "", "", gc_["redis"]["redis_bytes_left_per_round"],
             f"{gc_['redis']['redis_keys_left_per_round']} keys/round, expiring with the TTL"],
        ])
        L += ["What the in-process store holds right after is its claim tokens (`recv:` and `round:` per round): "
              "they make a round consumed once and live for the TTL (+60 s), so they are bounded by "
              "rate × TTL, not leaked; after the TTL they are swept. Largest allocations still held "
              "right after:", ""]
        L += _table(["where", "bytes", "blocks"], [[f"`{t['where']}`", t["bytes"], t["count"]]
                                                  for t in mi["top_allocations"]])
        if mt.get("top_allocations") is not None:
            L += [f"After the TTL: {mt.get('held_blocks', '?')} blocks held in all for {mt['rounds']:,} rounds "
                  f"({mt.get('held_blocks_per_round', '?')} per round), largest:", ""]
            L += _table(["where", "bytes", "blocks"], [[f"`{t['where']}`", t["bytes"], t["count"]]
                                                      for t in mt["top_allocations"]])
            L += ["A single large block at the store's claims table is that dict's hash table, which keeps its peak "
                  "size after the claims are swept (Python dicts do not shrink): bounded by the peak of live claims, "
                  "not by the rounds ever run.", ""]
        L += ["Profile (cProfile, in-process store, 1,000 rounds), top functions by own time:", ""]
        L += _profile_table(gc_["inmemory_profile"])
        L += ["Profile, Redis store:", ""]
        L += _profile_table(gc_["redis_profile"])
    else:
        L += [_missing(gc_), ""]

    v = data.get("vs_sdk")
    L += ["## 2. Against the bare SDK", ""]
    if v and "error" not in v:
        L += ["Same run, same `MCPServer` process on loopback serving the standard round. Latency: "
              f"{v['n_sequential']} rounds one at a time; throughput: {v['n_concurrent']} rounds by "
              f"{v['concurrency']} concurrent clients/users.", ""]
        if "vs_sdk_latency.png" in plots:
            L += ["![latency](vs_sdk_latency.png)", ""]
        rows = []
        for key, label in (("a_sdk", "(a) bare SDK manual loop"), ("b_headless", "(b) headless: gate + Redis + "
                                                                  "PostgreSQL audit"),
                           ("c_browser", "(c) browser: WebSocket + form POSTs via ASGI")):
            x = v[key]
            rows.append([label, x["latency"]["p50_ms"], x["latency"]["p99_ms"], x["throughput_rounds_per_s"]])
        L += _table(["path", "p50 ms", "p99 ms", "rounds/s"], rows)
        q = v["ratios"]
        L += _table(["ratio", "p50", "p99", "throughput (a)/(x)"], [
            ["(b)/(a)", q["b_over_a_p50"], q["b_over_a_p99"], q["a_over_b_throughput"]],
            ["(c)/(a)", q["c_over_a_p50"], q["c_over_a_p99"], q["a_over_c_throughput"]],
        ])
        b_, a_, c_ = v["b_headless"], v["a_sdk"], v["c_browser"]
        if "cpu_ms_per_round" in b_:
            L += [f"CPU per round while {v['concurrency']} users run rounds at once (user + system time of the process "
                  "doing the work, over the rounds it completed):", ""]
            L += _table(["path", "process", "CPU ms / round"], [
                ["(a) bare SDK", "the benchmark process (the SDK's client)", a_.get("cpu_ms_per_round", "")],
                ["(b) headless", "the benchmark process (the product: gate, database, audit, MCP client)",
                 b_["cpu_ms_per_round"]],
                ["(c) browser", "the ASGI worker (uvicorn)", c_.get("worker_cpu_ms_per_round", "")]])
        hc = b_.get("hop_costs")
        if hc:
            L += [f"Thread hops of a headless round ({hc['rounds']} rounds one after another, {hc['round_ms']} ms and "
                  f"{hc['cpu_ms_per_round']} ms of this process's CPU per round; `ROUND_THREADS` = "
                  f"{v.get('round_threads', '?')}): the median time from the `await` to the work's start in its "
                  "thread (*dispatch*), the work, and from its end back to the coroutine (*back*):", ""]
            L += _table(["hop (function)", "per round", "dispatch ms", "work ms", "back ms"],
                        [[x["hop"], x["per_round"], x["dispatch_ms"], x["work_ms"], x["back_ms"]] for x in hc["hops"]])
            handover = sum((x["dispatch_ms"] + x["back_ms"]) * x["per_round"] for x in hc["hops"])
            work = sum(x["work_ms"] * x["per_round"] for x in hc["hops"])
            L += [f"The hand-over costs {handover:.2f} ms per round in all; the work inside the hops {work:.2f} ms.", ""]
        stmts = b_.get("round_statements")
        if stmts:
            L += [f"The {len(stmts)} statements of one headless round (through Django's cursors, in order; "
                  "`tests/operations/test_round_cost.py` counts them at PostgreSQL too), with the guarantee each "
                  "serves:", ""]
            L += _statement_list(stmts)
        L += ["Where a headless round's time goes (p50 of each phase, ms):", ""]
        L += _table(list(v["b_headless"]["phases_p50_ms"]), [list(v["b_headless"]["phases_p50_ms"].values())])
        L += ["Where a browser round's time goes (p50, ms):", ""]
        L += _table(list(v["c_browser"]["phases_p50_ms"]), [list(v["c_browser"]["phases_p50_ms"].values())])
        if v.get("b_spans"):
            L += ["Time inside the product's components per headless round (wall time summed per component, "
                  "measured by wrapping them; SQL is every query of the round):", ""]
            L += _table(["component", "calls/round", "ms/round"],
                        [[k, x["calls"], x["ms"]] for k, x in v["b_spans"].items()])
        if v.get("arun_spans"):
            L += ["The same per real headless client round (`mrtrweb.headless.arun`, no polling of the benchmark's "
                  "own): the goals table's query and hop counts come from its *SQL* and *sync_to_async* rows "
                  "(psycopg's own `BEGIN`/`COMMIT` and pool checks are not among them):", ""]
            L += _table(["component", "calls/round", "ms/round"],
                        [[k, x["calls"], x["ms"]] for k, x in v["arun_spans"].items()])
        prof = (v.get("b_headless") or {}).get("arun_profiles")
        if prof:
            L += [f"Profiles of {prof['rounds']} headless client rounds one after another ({prof['round_ms']} ms per "
                  f"round profiled; cProfile slows what it watches; times are the profiled thread's CPU time"
                  f"{'' if 'by_component' in prof else ' (wall time in runs before issue 30)'}): the work the round "
                  f"hands to `sync_to_async` "
                  f"({prof['sync_work_ms_per_round']} ms per round of wall time, in the threads it is handed to) --", ""]
            L += _profile_table(prof["sync_work"], 12)
            L += ["-- and the event loop's thread (the SDK, the transport, the product's async code):", ""]
            L += _profile_table(prof["event_loop"], 12)
            if prof.get("by_component"):
                L += ["The same two profiles by component (CPU time of every profiled function, both threads; a C "
                      "function's counted under its caller's component; cProfile's own overhead inflates the many "
                      "small calls):", ""]
                L += _table(["component", "CPU ms / round (profiled)", "share %"],
                            [[x["component"], round(x["own_s"] / max(1, prof["rounds"]) * 1000, 2), x["share_pct"]]
                             for x in prof["by_component"]])
        if v.get("push_spans"):
            L += ["What the WebSocket consumer does per `operation.update` push of a new round (read the "
                  "operation, render the panel: the round from Redis, the consent receipt written to the audit "
                  "chain, the template), timed in-process:", ""]
            L += _table(["component", "calls/push", "ms/push"],
                        [[k, x["calls"], x["ms"]] for k, x in v["push_spans"].items()])
        c = v["c_browser"]
        L += [f"Browser path: WebSocket reopened {c.get('ws_reconnects', 0)} times, panel fetched for lack of a push "
              f"{c.get('fallback_panel_fetches', 0)} times; worker errors: {_errs(v.get('c_worker_errors'))}.", ""]
        L += [f"MCP server counts over the whole benchmark: `{json.dumps(v['mcp_server_counts'])}`", ""]
    else:
        L += [_missing(v), ""]

    p = data.get("pending")
    L += ["## 3. Pending capacity", ""]
    if p and "error" not in p:
        L += ["N users with the WebSocket open on one worker, each holding one pending round. Push latency = "
              "WebSocket message received − the round's audit `received` timestamp. *Burst*: while the N rounds "
              "arrive (16 rounds outstanding at a time, each from its start to its pushed card); *probe*: single "
              "rounds arriving while the N are pending.", ""]
        for name in ("pending_push.png", "pending_memory.png"):
            if name in plots:
                L += [f"![{name}]({name})", ""]
        measured = [x for x in p["results"] if "skipped" not in x]
        L += _table(["N", "worker RSS KiB / connected user", "worker RSS KiB / pending round",
                     "worker RSS KiB / 2nd round of a user",
                     "Redis B / pending round (MEMORY USAGE)", "Redis keys / round", "INFO used_memory Δ B / round",
                     "push p50 / p99 ms (probe)", "push p50 / p99 ms (burst)", "burst rounds/s",
                     "pushes missed / WS reopened", "worker errors (so far)", "worker GC pauses ≥ 20 ms (so far; longest ms)"],
                    [[x["pending"], x["rss_per_connected_user_kib"], x["rss_per_pending_round_kib"],
                      x.get("rss_per_extra_round_same_user_kib", ""), x["redis_bytes_per_pending_round"],
                      x["redis_keys_per_pending_round"],
                      x["redis_info_used_memory_delta_per_round"],
                      f"{x['push_latency_probe']['p50_ms']} / {x['push_latency_probe']['p99_ms']}",
                      f"{x['push_latency_fill']['p50_ms']} / {x['push_latency_fill']['p99_ms']}",
                      x["fill_rounds_per_s"], f"{x.get('pushes_missed', '')} / {x.get('ws_reconnects', '')}",
                      _errs(x.get("worker_errors_so_far")), _gc(x.get("worker_errors_so_far"))] for x in measured])
        for x in p["results"]:
            if "skipped" in x:
                L += [f"N = {x['pending']}: {x['skipped']}.", ""]
        md = p.get("mass_disconnect")
        if md:
            L += [f"At the end all {md['sockets']:,} WebSockets close at once (a mass disconnect): worker errors "
                  f"after it (whole run): {_errs(md.get('worker_errors'))}. The worker's garbage-collector pauses of "
                  f"20 ms or more over the whole run (`gc.callbacks`, `mrtrweb/bench/worker_app.py`): "
                  f"{_gc(md.get('worker_errors'))}.", ""]
        L += ["A user's first pending round also opens the worker's MCP session for that user and server "
              "(`ConnectionPool`: one per user and server); on a 2026-07-28 server it is released while the round "
              "waits for the person (`ConnectionPool.release`, after a short window) and the retry opens one again; "
              "the *2nd round of a user* column is the cost of a round alone.", ""]
        if measured and measured[-1].get("limit_query_plans"):
            L += [f"The per-start limit check (one query, the user's and the tenant's four counts) with "
                  f"{measured[-1]['pending']} rounds pending (EXPLAIN ANALYZE):", ""]
            L += _table(["check", "execution ms", "plan"],
                        [[k, v["execution_ms"], f"`{v['plan_top']}`"]
                         for k, v in measured[-1]["limit_query_plans"].items()])
        L += ["`INFO used_memory` is the whole Redis server's (shared with other work on this machine); "
              "`MEMORY USAGE` sums only this run's keys.", ""]
    else:
        L += [_missing(p), ""]

    s = data.get("scaleout")
    L += ["## 4. Scale-out", ""]
    if s and "error" not in s:
        if "scaleout.png" in plots:
            L += ["![scaleout](scaleout.png)", ""]
        rows = []
        for key in ("workers_1", "workers_2"):
            x = s[key]
            c = x["mcp_server_counts"]
            rows.append([x["workers"], x["users"], x["rounds"], x["throughput_rounds_per_s"], x["latency"]["p50_ms"],
                         x["latency"]["p99_ms"], x["errors"], c["answered_once"], c["lost"], c["duplicated"],
                         f"{x.get('ws_reconnects', '')} / {x.get('fallback_panel_fetches', '')}",
                         "; ".join(_errs(e) for e in x.get("worker_errors", []))])
        L += _table(["workers", "browsers", "rounds", "rounds/s", "p50 ms", "p99 ms", "errors", "answered once",
                     "lost", "sent twice", "WS reopened / panel fetched", "worker errors"], rows)
        if all("cpu" in s[k] for k in ("workers_1", "workers_2")):
            names = list(s["workers_2"]["cpu"]["by_process_cores"])
            L += ["Where the machine's CPU went during each load phase (cores in use on average; *other* is "
                  "PostgreSQL, Redis, the OS and anything else running):", ""]
            L += _table(["workers", "cores busy / cores"] + names + ["other"],
                        [[s[k]["workers"], f"{s[k]['cpu']['cores_busy']} / {s[k]['cpu']['cores']}"]
                         + [s[k]["cpu"]["by_process_cores"].get(n, "") for n in names] + [s[k]["cpu"]["other_cores"]]
                         for k in ("workers_1", "workers_2")])
        race = s["double_submit_race"]
        L += [f"Throughput ratio 2 workers / 1 worker: **{s['throughput_ratio']}x**.", ""]
        one_cpu = (s["workers_1"].get("cpu") or {})
        if one_cpu.get("cores"):
            free = one_cpu["cores"] - one_cpu["cores_busy"]
            L += [f"Whether the cores allow 1.85x: with one worker the machine already had {one_cpu['cores_busy']} of "
                  f"its {one_cpu['cores']} cores busy (PostgreSQL, Redis, the load generator, other work), "
                  f"{max(0.0, free):.2f} free; 1.85x the rounds needs ~{0.85 * one_cpu['cores_busy']:.2f} cores more "
                  "(every process of the round does 1.85x the work)"
                  + (": the cores do not allow it, the ratio is bounded by them, not by the product."
                     if free < 0.85 * one_cpu["cores_busy"] else ": the cores allow it."), ""]
        L += [f"Double-submit race ({race['rounds']} rounds, each answer POSTed at the same moment to both workers): "
              f"answer POSTs `{json.dumps(race['answer_posts'])}`; "
              f"MCP server `{json.dumps(race['mcp_server_counts'])}`.",
              ""]
    else:
        L += [_missing(s), ""]

    g = data.get("growth")
    L += ["## 5. Growth", ""]
    if g and "error" not in g:
        for name in ("growth_schema.png", "growth_state.png"):
            if name in plots:
                L += [f"![{name}]({name})", ""]
        L += ["Gate cost (in-process store) per round; CPU time of the benchmark thread, best of three runs.", ""]
        L += _table(["schema fields", "rounds/s (CPU)", "µs CPU/round", "µs wall/round"],
                    [[x["fields"], x.get("cpu_rounds_per_s"), x.get("cpu_us_per_round"), x["us_per_round"]]
                     for x in g["schema"]])
        L += _table(["requestState bytes", "rounds/s (CPU)", "µs CPU/round", "µs wall/round"],
                    [[x["state_bytes"], x.get("cpu_rounds_per_s"), x.get("cpu_us_per_round"), x["us_per_round"]]
                     for x in g["state"]])
        L += ["Profile at 50 fields:", ""] + _profile_table(g["profile_50_fields"], 8)
        L += ["Profile at the requestState cap:", ""] + _profile_table(g["profile_state_cap"], 8)
    else:
        L += [_missing(g), ""]
    L += _audit_section(data.get("audit_append"))
    L += audit_threads_section(data.get("audit_threads"), _table, _missing)
    L += loopstall_section(data.get("loopstall"))
    notes = docs / "NOTES.md"
    if notes.is_file():
        L += ["## Analysis", "", notes.read_text().strip(), ""]
    out = docs / "README.md"
    out.write_text("\n".join(L).rstrip() + "\n")
    return out


def _gc(e: Any) -> str:
    """A worker's garbage-collector pauses of 20 ms or more: how many, the longest."""
    if not e or "gc_pauses_20ms" not in e:
        return ""
    return f"{e['gc_pauses_20ms']} ({e.get('gc_pause_max_ms', 0):.0f})" if e["gc_pauses_20ms"] else "0"


def _errs(e: Any) -> str:
    """A worker's log counts in a cell: unhandled ASGI exceptions (Redis read timeouts, pool exhausted)."""
    if not e:
        return "0"
    if not e.get("asgi_exceptions") and not e.get("error_lines") and not e.get("push_group_failures"):
        return "0"
    return (f"{e.get('asgi_exceptions', 0)} ASGI exceptions ({e.get('redis_read_timeouts', 0)} Redis read timeouts, "
            f"{e.get('redis_max_connections', 0)} pool exhausted), {e.get('push_group_failures', 0)} push-group "
            "joins/leaves failed")


def _missing(res: Any) -> str:
    if res is None:
        return "_Not run._"
    return f"_Failed: {res.get('error')}_"


def _audit_section(a: Any) -> list[str]:
    """Section 6: chained audit appends under concurrent writers (:mod:`.audit_append`)."""
    L = ["## 6. Audit appends", ""]
    if not a or "error" in a:
        return L + [_missing(a), ""]
    L += [f"`audit.record(..., read_back=True)` of a `submitted` event (the one written before a retry leaves, "
          f"the round's digests passed as the callers do), back to back for {a['duration_s_per_level']} s per "
          f"level, on PostgreSQL. Writers are processes x threads (up to {a['processes']} spawned processes, "
          "Django on the production settings; each thread its own connection from its process's pool and its "
          "own operation), since one worker process is capped by its GIL. Appends/s = all appends / (last end "
          "- first start); latency = one `audit.record` call.", ""]
    L += ["Full mode runs the levels twice, the second time in reverse order (load on the machine that drifts "
          "hits both ends); a level's figures are those of its better run, every run's rate is listed.", ""]
    L += _table(["writers", "tenants", "processes x threads", "appends", "appends/s", "runs appends/s", "p50 ms",
                 "p99 ms", "CPU ms / append: writers + PostgreSQL", "errors"],
                [[x["writers"], x["tenants"], " + ".join(map(str, x["threads_per_process"])), x["appends"],
                  x["appends_per_s"], ", ".join(f"{r:,.0f}" for r in x.get("runs_appends_per_s", [])),
                  x["latency"]["p50_ms"], x["latency"]["p99_ms"],
                  f"{x.get('client_cpu_ms_per_append', '?')} + {x.get('db_cpu_ms_per_append', '?')}", x["errors"]]
                 for x in a["levels"]])
    by = {(x["writers"], x["tenants"]): x for x in a["levels"]}
    one, four = by.get((40, 1)), by.get((40, 4))
    if one and four and one["appends_per_s"] > 0 and "db_cpu_ms_per_append" in one:
        cpu = one["client_cpu_ms_per_append"] + one["db_cpu_ms_per_append"]
        L += [f"What bounds it: 40 writers spread over 4 tenants (no chain lock shared) reach "
              f"{four['appends_per_s'] / one['appends_per_s']:.2f}x the rate of 40 in one tenant. CPU per append "
              f"(the writer threads' own, `time.thread_time`, plus their PostgreSQL backends', `/proc`) is "
              f"{cpu:.2f} ms at 40 writers in one tenant, so {a.get('cores', 2)} cores shared with everything "
              f"else on the machine allow at most ~{a.get('cores', 2) / cpu * 1000:,.0f} appends/s; a ratio "
              "near 1 says the machine's CPU, not the tenant's chain lock, is the limit.", ""]
    bad = [c for c in a["chains"] if not (c["intact"] and c["events_match"])]
    L += [f"Afterwards every tenant's chain was verified (`audit.verify_chain`): {len(a['chains'])} chains, "
          + ("all intact, events = appends = head sequence." if not bad else
             f"**{len(bad)} not intact or incomplete**: " + "; ".join(
                 f"{c['level']}: {c['broken'] or ''} {c['events']} events, {c['expected_events']} expected"
                 for c in bad[:3])), ""]
    st = a["statements_per_append"]
    L += [f"SQL statements of one append with its read-back (counted, `connection.execute_wrapper`; a statement "
          "sent outside a transaction is its own, with no `BEGIN`/`COMMIT` round trips): "
          f"**{st['statements']}**:", ""]
    L += [f"{i}. `{w} ...`" for i, w in enumerate(st["first_words"], 1)] + [""]
    for x in a["levels"]:
        if x.get("error_samples"):
            L += [f"Errors at {x['label']}: " + "; ".join(f"`{e}`" for e in x["error_samples"]), ""]
    return L
