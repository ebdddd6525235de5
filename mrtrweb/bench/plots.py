"""The report's PNG plots (:mod:`.report`), from the JSON results of a run (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plots(data: dict[str, Any], docs: Path) -> dict[str, str]:
    """Write the plots of the benchmarks in ``data`` into ``docs``; returns {file name: file name}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: dict[str, str] = {}

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(docs / name, dpi=110)
        plt.close(fig)
        made[name] = name

    g = data.get("growth")
    if g and "error" not in g:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        xs = [x["fields"] for x in g["schema"]]
        ax.plot(xs, [x.get("cpu_us_per_round", x["us_per_round"]) for x in g["schema"]], marker="o")
        ax.set_xlabel("fields in the requested schema")
        ax.set_ylabel("µs CPU per round (register+accept+retry)")
        ax.set_title("Gate cost vs schema size")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        save(fig, "growth_schema.png")
        fig, ax = plt.subplots(figsize=(6, 3.6))
        xs = [x["state_bytes"] for x in g["state"]]
        ax.plot(xs, [x.get("cpu_us_per_round", x["us_per_round"]) for x in g["state"]], marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("requestState bytes (cap %d)" % g["state_cap_bytes"])
        ax.set_ylabel("µs CPU per round")
        ax.set_title("Gate cost vs requestState size")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        save(fig, "growth_state.png")
    v = data.get("vs_sdk")
    if v and "error" not in v:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        labels = ["(a) bare SDK", "(b) headless", "(c) browser"]
        keys = ["a_sdk", "b_headless", "c_browser"]
        p50 = [v[k]["latency"]["p50_ms"] for k in keys]
        p99 = [v[k]["latency"]["p99_ms"] for k in keys]
        xs = range(len(keys))
        ax.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], p99, 0.4, label="p99")
        ax.set_xticks(list(xs), labels)
        ax.set_ylabel("ms per round")
        ax.set_title("One standard round, end to end")
        ax.legend()
        save(fig, "vs_sdk_latency.png")
    p = data.get("pending")
    if p and "error" not in p and p.get("results"):
        p = dict(p, results=[x for x in p["results"] if "skipped" not in x])
        fig, ax1 = plt.subplots(figsize=(6, 3.6))
        ns = [x["pending"] for x in p["results"]]
        ax1.plot(ns, [x["push_latency_probe"]["p99_ms"] for x in p["results"]], marker="o", label="push p99 (probe)")
        ax1.plot(ns, [x["push_latency_fill"]["p99_ms"] for x in p["results"]], marker="s", label="push p99 (burst)")
        ax1.axhline(50, color="grey", linestyle="--", linewidth=1, label="goal 50 ms")
        ax1.set_xscale("log")
        ax1.set_yscale("log")
        ax1.set_xlabel("pending rounds on one worker")
        ax1.set_ylabel("ms (log scale)")
        ax1.set_title("Push latency vs pending rounds")
        ax1.legend(fontsize=8)
        ax1.grid(alpha=0.3)
        save(fig, "pending_push.png")
        fig, ax = plt.subplots(figsize=(6, 3.6))
        res = p["results"]
        ax.plot(ns, [x["rss_per_pending_round_kib"] for x in res], marker="o", label="worker RSS KiB / pending round")
        ax.plot(ns, [x["rss_per_connected_user_kib"] for x in res], marker="s", label="worker RSS KiB / connected user")
        ax.plot(ns, [x["redis_bytes_per_pending_round"] / 1024 for x in res], marker="^",
                label="Redis KiB / pending round")
        ax.set_xscale("log")
        ax.set_xlabel("pending rounds on one worker")
        ax.set_ylabel("KiB")
        ax.set_title("Memory per pending round")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        save(fig, "pending_memory.png")
    s = data.get("scaleout")
    if s and "error" not in s:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        ax.bar(["1 worker", "2 workers"], [s["workers_1"]["throughput_rounds_per_s"],
                                            s["workers_2"]["throughput_rounds_per_s"]])
        ax.set_ylabel("rounds/s")
        ax.set_title(f"Scale-out ({s['users']} browsers), ratio {s['throughput_ratio']}x")
        save(fig, "scaleout.png")
    return made
