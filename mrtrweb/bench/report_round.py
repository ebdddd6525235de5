"""The benchmark report's figures of one round's cost (issue 30), for :mod:`.report`'s section 2:
CPU per round side by side with the bare SDK, each thread hop's hand-over apart from its work, the
statements of one headless round numbered with the guarantee each serves, and the profile summed by
component."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Table = Callable[[list[str], list[list[Any]]], list[str]]

__all__ = ["ROUND_GUARANTEES", "component_lines", "interleaved_lines", "round_cost_lines"]


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
    ("_judge_round", 2): "the result's single-use claim, the binding's move and, only with them, the `received` "
                         "append and the row to awaiting_input (one statement) -- one result per request across "
                         "workers; audited before anyone sees it",
    ("show", 1): "the `shown` append, made only with its claim (a unique key) inserted first in the same "
                 "statement -- the consent receipt: no answer without it; one per round across workers",
    ("_answer_sync", 1): "the answer: the row, the owner's access, the round's trail and receipt, the binding -- "
                         "access at the answer; no answer without the receipt; configuration and authorization",
    ("_answer_sync", 2): "the round's claim, the retry id bound, the record moved and, only with them, the "
                         "`submitted` append and the row to running while the owner may act (one statement) -- "
                         "consumed once across workers; audited before the retry leaves; access right before it "
                         "leaves",
    ("_answer_sync", 3): "the `submitted` row read back after the commit, its hash checked -- the audit is durable "
                         "before the retry leaves",
    ("_check_and_complete", 1): "the end: the row to completed while the owner may act and, only with it, the "
                                "binding deleted and the `completed` append (one statement) -- nothing can be sent "
                                "for the operation any more; the end is audited",
}

# the same statements where the headless client makes two phases in one hop: the member check and
# the start (mrtrweb.headless.quickstart), the consent receipt and the answer
ROUND_GUARANTEES.update({
    ("_start_after", 1): ROUND_GUARANTEES[("_member_server", 1)],
    ("_start_after", 2): ROUND_GUARANTEES[("_start_sync", 1)],
    ("_first_then_answer", 1): ROUND_GUARANTEES[("show", 1)],
    ("_first_then_answer", 2): ROUND_GUARANTEES[("_answer_sync", 1)],
    ("_first_then_answer", 3): ROUND_GUARANTEES[("_answer_sync", 2)],
    ("_first_then_answer", 4): ROUND_GUARANTEES[("_answer_sync", 3)],
})



def _statement_list(stmts: list[dict[str, str]]) -> list[str]:
    out, seen = [], {}
    for i, x in enumerate(stmts, 1):
        hop = x["hop"].rsplit(".", 1)[-1]
        seen[hop] = seen.get(hop, 0) + 1
        why = ROUND_GUARANTEES.get((hop, seen[hop]), "(not one of the round's listed statements)")
        out.append(f"{i}. *{hop}*: {why}. `{x['sql'][:90].replace('`', '')}…`")
    return out + [""]



def round_cost_lines(v: dict[str, Any], _table: Table) -> list[str]:
    """CPU per round, the hop table and the numbered statements of ``v`` (vs_sdk's result), tables
    made by ``_table`` (:mod:`.report`'s); nothing for a result from before they were measured."""
    L: list[str] = []
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
    return L


def component_lines(prof: dict[str, Any], _table: Table) -> list[str]:
    """The headless round's profile (:func:`.spans.thread_profiles`) summed by component."""
    L: list[str] = []
    if prof.get("by_component"):
        L += ["The same two profiles by component (CPU time of every profiled function, both threads; a C "
              "function's counted under its caller's component; cProfile's own overhead inflates the many "
              "small calls):", ""]
        L += _table(["component", "CPU ms / round (profiled)", "share %"],
                    [[x["component"], round(x["own_s"] / max(1, prof["rounds"]) * 1000, 2), x["share_pct"]]
                     for x in prof["by_component"]])
    return L


def interleaved_lines(v: dict[str, Any], table: Table) -> list[str]:
    """The report's lines on (a) and (b) run in turn (:func:`mrtrweb.bench.vs_sdk.run_interleaved`);
    none for a result without them."""
    L: list[str] = []
    if not v.get("interleaved"):
        return []
    x = v["interleaved"]
    L += [f"The same two paths interleaved ({x['rounds']} rounds each: one bare-SDK round, then one headless "
          "round, in turn), so that both meet the machine in the same state (run alone in a tight loop, the "
          "SDK's client and the server process stay hot between its back-to-back requests):", ""]
    L += table(["path", "p50 ms", "p99 ms"], [
        ["(a) bare SDK manual loop", x["a_sdk"]["p50_ms"], x["a_sdk"]["p99_ms"]],
        ["(b) headless", x["b_headless"]["p50_ms"], x["b_headless"]["p99_ms"]],
        ["(b)/(a)", x["b_over_a_p50"], f"median of the pairs' ratios {x['median_pair_ratio']}"]])
    if x.get("a_sdk_after_idle"):
        y = x["a_sdk_after_idle"]
        L += [f"The bare SDK alone again, each round after {x['idle_gap_ms']:g} ms of nothing: p50 "
              f"{y['p50_ms']} ms, p99 {y['p99_ms']} ms (what waking an idle machine adds to a round; a "
              "headless round hands its work between four processes and threads and waits at each "
              "hand-over).", ""]
    return L
