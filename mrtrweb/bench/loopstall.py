"""Benchmark 7 -- the event loop's longest gap while the product reads hostile input (issue 25).

A heartbeat task wakes every :data:`BEAT_S` on the event loop of this process while the product,
in the same process and on the same loop (Django's ``AsyncClient`` through the ASGI handler, the
operation's task as a worker runs it), handles what a hostile MCP server (:mod:`.hostile`, in its
own process) sends:

* a huge listing (30,000 tools, prompts, resources and resource templates, about 15 MB of JSON):
  the server page, and a prompt's call page (the prompt found among 30,000);
* a tool result of 200,000 small text blocks (about 6 MB): the call, until the operation completes;
* a round of 20,000 input requests of 5 choice fields (about 16 MB): the call, until it fails.

The figure is the longest interval between two heartbeats (ms, the beat's own sleep included):
how long every other user of the worker would wait. Each case runs a few times; its figure is the
longest of its runs, every run's is listed. An idle heartbeat of the same length is the baseline
(what the machine's own load costs). The attack-pass tests assert *where* the heavy work runs
(off the loop); this benchmark measures what is left on the loop.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time
from typing import Any

#: the heartbeat's sleep
BEAT_S = 0.01
#: the figure's goal: no hostile input holds the loop longer (the attack pass's bound, issue 25)
GOAL_MS = 800
#: the hostile sizes of a full run (the attack pass's); tiny and quick runs use smaller ones
FULL = {"listed": 30_000, "blocks": 200_000, "requests": 20_000}
SIZES = {"tiny": {"listed": 500, "blocks": 2_000, "requests": 200},
         "quick": {"listed": 3_000, "blocks": 20_000, "requests": 2_000},
         "full": FULL}
CASES = ("listing_server_page", "listing_prompt_page", "many_blocks_result", "many_requests_round")


async def _with_heartbeat(action) -> dict[str, Any]:
    """Run ``action()`` while a heartbeat measures the loop's gaps; its outcome and the gaps."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(BEAT_S)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    try:
        outcome = await action()
    finally:
        elapsed = time.perf_counter() - t0
        done.set()
        await beat
    return {"outcome": outcome, "max_gap_ms": round(max(gaps, default=0.0) * 1000, 1),
            "gaps_over_100ms": sum(1 for g in gaps if g > 0.1), "elapsed_ms": round(elapsed * 1000, 1)}


def _seed(url: str) -> dict[str, Any]:
    """A tenant of its own, one member, the two hostile servers (tools; huge listing)."""
    from django.contrib.auth import get_user_model

    from ..models import McpServer, Membership, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="loopstall", defaults={"name": "Loop stall"})
    user, _ = get_user_model().objects.get_or_create(username="loopstall")
    Membership.objects.get_or_create(tenant=tenant, user=user, defaults={"role": Membership.Role.MEMBER})
    tools = McpServer.objects.create(tenant=tenant, name="Hostile tools", url=url)
    huge = McpServer.objects.create(tenant=tenant, name="Huge listing", url=url.replace("/mcp", "/huge/mcp"))
    return {"user": user, "tools": tools, "huge": huge}


async def _operation_outcome(client: Any, url: str) -> str:
    from .. import operations
    from ..models import Operation

    resp = await client.post(url, {})
    if resp.status_code != 302:
        return f"HTTP {resp.status_code}"
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=resp["Location"].rstrip("/").split("/")[-1])
    return f"{op.status}" + (f" ({op.error_code})" if op.error_code else "")


async def _measure(seeded: dict[str, Any], sizes: dict[str, int], runs: int) -> dict[str, Any]:
    from django.test import AsyncClient

    from ..text import names

    client = AsyncClient()  # its requests name the host "testserver" (allowed in run(), as Django's tests do)
    await client.aforce_login(seeded["user"])
    huge, tools = seeded["huge"], seeded["tools"]

    async def status(url: str) -> str:
        return f"HTTP {(await client.get(url)).status_code}"

    actions = {
        "listing_server_page": lambda: status(f"/mcp/servers/{huge.pk}/"),
        "listing_prompt_page": lambda: status(names.call_url("prompt", huge.pk, f"p{sizes['listed'] - 1}")),
        "many_blocks_result": lambda: _operation_outcome(client, names.call_url("tool", tools.pk, "many_blocks")),
        "many_requests_round": lambda: _operation_outcome(client, names.call_url("tool", tools.pk,
                                                                                 "very_many_requests")),
    }
    # warm-up, not measured: first-use costs (imports, templates, the connection) are not the input's
    await status(f"/mcp/servers/{tools.pk}/")
    gc.collect()
    baseline = await _with_heartbeat(lambda: asyncio.sleep(1.0))
    out: dict[str, Any] = {"idle_baseline_max_gap_ms": baseline["max_gap_ms"], "cases": {}}
    for name in CASES:
        done = []
        for _ in range(runs):
            gc.collect()  # each run starts from the same collector state
            done.append(await _with_heartbeat(actions[name]))
        worst = max(done, key=lambda r: r["max_gap_ms"])
        out["cases"][name] = {"max_gap_ms": worst["max_gap_ms"], "runs_max_gap_ms": [r["max_gap_ms"] for r in done],
                              "elapsed_ms": [r["elapsed_ms"] for r in done],
                              "gaps_over_100ms": [r["gaps_over_100ms"] for r in done],
                              "outcomes": sorted({str(r["outcome"]) for r in done})}
    return out


#: what each case must end with for its figure to count (the page shown; the operation completed; the
#: round refused: by MAX_RESPONSE_BYTES at full size, by the gate's MAX_INPUT_REQUESTS when smaller)
EXPECTED = {"listing_server_page": "HTTP 200", "listing_prompt_page": "HTTP 200",
            "many_blocks_result": "completed", "many_requests_round": "failed"}


def run(ctx: Any) -> dict[str, Any]:
    from django.conf import settings
    from django.test.utils import override_settings

    from .common import ROOT, free_port, wait_port

    mode = "tiny" if ctx.tiny else "quick" if ctx.quick else "full"
    sizes = SIZES[mode]
    runs = 2 if ctx.tiny else 3
    port = free_port()
    log = ROOT / "var" / "bench" / f"hostile-{ctx.services.tag}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "mrtrweb.bench.hostile", "--port", str(port),
                             *(x for k, v in sizes.items() for x in (f"--{k}", str(v)))],
                            cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=log.open("w"),
                            stderr=subprocess.STDOUT)
    ctx.services.procs.append(proc)
    try:
        wait_port(port, timeout_s=120, proc=proc, log=log)  # the bodies are made before it listens
        seeded = _seed(f"http://127.0.0.1:{port}/mcp")
        with override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"]):
            measured = asyncio.run(_measure(seeded, sizes, runs))
    finally:
        ctx.services.stop(proc)
    unexpected = {name: c["outcomes"] for name, c in measured["cases"].items()
                  if not all(o.startswith(EXPECTED[name]) for o in c["outcomes"])}
    if unexpected:  # a figure of an error page or a refused call would measure nothing hostile
        raise RuntimeError(f"unexpected outcomes: {unexpected}")
    worst = max(c["max_gap_ms"] for c in measured["cases"].values())
    return {"benchmark": "loopstall", "sizes": sizes, "full_sizes": sizes == FULL, "runs": runs,
            "beat_ms": BEAT_S * 1000, **measured,
            "goals": {"max_gap_ms": worst, "goal_ms": GOAL_MS, "met": worst <= GOAL_MS}}


_LABELS = {"listing_server_page": "huge listing: the server page",
           "listing_prompt_page": "huge listing: a prompt's call page",
           "many_blocks_result": "a result of many blocks",
           "many_requests_round": "a round of very many input requests"}


def summary(res: dict[str, Any]) -> list[str]:
    s = res["sizes"]
    lines = [f"longest event-loop gap under hostile input: {res['goals']['max_gap_ms']:,.0f} ms (goal <= {GOAL_MS}; "
             f"{s['listed']:,} listed, {s['blocks']:,} blocks, {s['requests']:,} requests; idle baseline "
             f"{res['idle_baseline_max_gap_ms']} ms)"]
    for name, c in res["cases"].items():
        lines.append(f"  {_LABELS[name]}: {c['max_gap_ms']:,.0f} ms (runs {c['runs_max_gap_ms']}; "
                     f"{', '.join(c['outcomes'])})")
    return lines


def section(res: Any) -> list[str]:
    """The report's section 7 (:mod:`.report`)."""
    L = ["## 7. Event-loop gap under hostile input", ""]
    if not res or "error" in res:
        return L + ["_Not run._" if res is None else f"_Failed: {res.get('error')}_", ""]
    s = res["sizes"]
    L += [f"A heartbeat every {res['beat_ms']:g} ms on the worker's event loop while the product, on that loop, "
          f"handles a hostile MCP server's answers (`mrtrweb/bench/hostile.py`, its own process): a listing of "
          f"{s['listed']:,} items of each kind, a tool result of {s['blocks']:,} text blocks, a round of "
          f"{s['requests']:,} input requests of 5 choice fields. The figure is the longest interval between two "
          f"beats (the beat's own sleep included): how long every other user of the worker waits. Each case ran "
          f"{res['runs']} times; idle baseline (the heartbeat alone, 1 s): {res['idle_baseline_max_gap_ms']} ms.", ""]
    L += ["| case | longest gap ms | each run ms | elapsed ms | outcome |", "|---|---|---|---|---|"]
    for name, c in res["cases"].items():
        L.append(f"| {_LABELS[name]} | {c['max_gap_ms']:,.1f} | {', '.join(f'{x:,.1f}' for x in c['runs_max_gap_ms'])} "
                 f"| {', '.join(f'{x:,.0f}' for x in c['elapsed_ms'])} | {', '.join(c['outcomes'])} |")
    return L + [""]


__all__ = ["run", "summary", "section"]
