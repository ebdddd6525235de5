"""Benchmark 6 -- audit appends: ``audit.record(..., read_back=True)`` appends/s and per-append
latency in ONE tenant on PostgreSQL with 1, 8, 16 and 40 concurrent writers, and 40 writers spread
over 4 tenants; afterwards every tenant's chain is verified (intact, events = appends).

Writers are what a deployment has: each worker process runs its ORM calls in many threads
(``sync_to_async``'s pool) but one process is capped by its GIL, so the writers are
``PROCESSES`` processes (spawned, Django set up on the run's production settings) x
``writers / PROCESSES`` threads, each thread its own database connection (from the process's
psycopg pool, sized to its threads) and its own operation (one person each). Every thread appends
``submitted`` events (the event written before a retry leaves, so ``read_back=True``, with the
round's ``state_digest``/``schema_digests`` passed as the callers do) back to back for a fixed
time; the rate is all appends / (last end - first start) over all processes (``time.monotonic``
is system-wide on Linux); the latency is each ``audit.record`` call's wall time.

Also counted (not timed): the SQL statements of one append (``connection.execute_wrapper``), and
per level the CPU per append of the writer threads (``time.thread_time``) and of their PostgreSQL
backends (``/proc/<pid>/stat``), which other load on the machine does not inflate the way it does
the rate. Full mode: 4 s per level (about 30 s in all); ``--quick`` 1.5 s; ``--tiny`` 0.4 s with
1, 8, and 8 writers over 4 tenants.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
import uuid
from typing import Any

from .common import latency_summary

#: writer processes (at most; fewer when there are fewer writers)
PROCESSES = 4
#: (label, writers, tenants) of each level, in run order
LEVELS = (("1 writer, 1 tenant", 1, 1), ("8 writers, 1 tenant", 8, 1), ("16 writers, 1 tenant", 16, 1),
          ("40 writers, 1 tenant", 40, 1), ("40 writers, 4 tenants", 40, 4))
#: the goal (issue 16): appends/s at 40 writers in one tenant, not falling as writers grow
GOAL_PER_S = 500
#: "not falling": the rate at the most writers is at least this share of the best with fewer
NOT_FALLING = 0.85


def _split(writers: int) -> list[int]:
    """Threads per process for ``writers`` writers: ``[t0, t1, ...]`` (len <= PROCESSES, sum = writers)."""
    procs = min(PROCESSES, writers)
    return [writers // procs + (1 if i < writers % procs else 0) for i in range(procs)]


def _record_kwargs() -> dict[str, Any]:
    return {"round_number": 1, "read_back": True, "state_digest": "sha256:" + "5" * 64,
            "schema_digests": {"confirm_deploy": "sha256:" + "6" * 64},
            "actions": {"confirm_deploy": "accept"}, "display_digest": "sha256:" + "7" * 64}


def _child(index: int, plan: list[dict[str, Any]], barrier: Any, results: Any) -> None:
    """One writer process: for each level, its threads append for the level's duration, released
    together with every other process's threads by ``barrier``; puts one result per level."""
    threads_max = max([lv["threads"][index] if index < len(lv["threads"]) else 0 for lv in plan] + [1])
    os.environ["MRTRWEB_DB_POOL_SIZE"] = str(threads_max + 1)
    import django

    django.setup()
    from django.db import connections

    from mrtrweb.audit import events as audit
    from mrtrweb.models import Operation

    kwargs = _record_kwargs()
    for lv in plan:
        n = lv["threads"][index] if index < len(lv["threads"]) else 0
        ops = lv["ops"][sum(lv["threads"][:index]):sum(lv["threads"][:index]) + n] if n else []
        ready = threading.Barrier(n + 1)
        go = threading.Event()
        per_thread: list[dict[str, Any]] = [{} for _ in range(n)]

        def body(k: int, op_id: str, duration_s: float) -> None:
            out = per_thread[k]
            lat: list[float] = []
            errors: list[str] = []
            warm = 0
            op = None
            try:
                op = Operation.objects.select_related("server", "tenant").get(pk=op_id)
                audit.record(op, "submitted", reason="warm-up", **kwargs)  # connection, head row
                warm = 1
            except Exception as exc:  # noqa: BLE001 -- reported
                errors.append(f"{exc.__class__.__name__}: {str(exc)[:120]}")
            backend = _backend_pid() if warm else 0
            ready.wait(120)
            go.wait(120)
            cpu0, db0 = time.thread_time(), _cpu(backend)
            start = time.monotonic()
            end_at = start + duration_s
            t = start
            while not errors and t < end_at:
                try:
                    audit.record(op, "submitted", reason="bench", **kwargs)
                except Exception as exc:  # noqa: BLE001 -- reported; the chain check below still runs
                    errors.append(f"{exc.__class__.__name__}: {str(exc)[:120]}")
                    break
                t2 = time.monotonic()
                lat.append(t2 - t)
                t = t2
            out.update(start=start, end=t, lat=lat, errors=errors, warm=warm, tenant=str(op.tenant_id) if warm else "",
                       client_cpu_s=time.thread_time() - cpu0, db_cpu_s=_cpu(backend) - db0)
            connections.close_all()

        workers = [threading.Thread(target=body, args=(k, op_id, lv["duration_s"]), daemon=True)
                   for k, op_id in enumerate(ops)]
        for w in workers:
            w.start()
        ready.wait(120)
        barrier.wait(180)
        go.set()
        for w in workers:
            w.join(lv["duration_s"] + 120)
        results.put({"level": lv["key"], "process": index, "threads": per_thread})
    connections.close_all()


def _backend_pid() -> int:
    """The PostgreSQL backend process of this thread's connection."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def _cpu(pid: int) -> float:
    """CPU seconds a (PostgreSQL backend) process has used, 0 when unknown."""
    from .common import cpu_seconds

    try:
        return cpu_seconds(pid) if pid else 0.0
    except OSError:
        return 0.0


def _setup(levels: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """A fresh set of tenants per level (one server and one user each) and one operation per writer."""
    from django.contrib.auth import get_user_model

    from mrtrweb.models import McpServer, Tenant

    User = get_user_model()
    tag = uuid.uuid4().hex[:6]
    user = User.objects.create_user(f"audit-bench-{tag}", password=None)
    plan = []
    for li, (label, writers, n_tenants) in enumerate(levels):
        servers = []
        for t in range(n_tenants):
            tenant = Tenant.objects.create(slug=f"ab-{tag}-{li}-{t}", name=f"Audit bench {li}.{t}")
            servers.append(McpServer.objects.create(tenant=tenant, name="Audit bench server",
                                                    url="http://127.0.0.1:9/mcp"))
        ops = []
        for w in range(writers):
            server = servers[w % n_tenants]
            rid = f"mrtr-{uuid.uuid4()}"
            ops.append(_operation(server, user, rid))
        plan.append({"label": label, "writers": writers, "tenants": [s.tenant_id for s in servers],
                     "threads": _split(writers), "ops": ops})
    return plan


def _operation(server: Any, user: Any, rid: str) -> str:
    from mrtrweb.models import Operation

    op = Operation.objects.create(tenant_id=server.tenant_id, user=user, server=server, method="tools/call",
                                  name="deploy", params={"name": "deploy", "arguments": {}}, request_id=rid,
                                  latest_request_id=rid)
    return str(op.pk)


def statements_per_append(op_id: str) -> dict[str, Any]:
    """The SQL statements one ``audit.record(..., read_back=True)`` sends (warm: head row exists),
    as (count, first words of each statement)."""
    from django.db import connection

    from mrtrweb.audit import events as audit
    from mrtrweb.models import Operation

    op = Operation.objects.select_related("server", "tenant").get(pk=op_id)
    audit.record(op, "submitted", reason="count warm-up", **_record_kwargs())
    seen: list[str] = []

    def spy(execute, sql, params, many, context):
        seen.append(" ".join(str(sql).split()[:4]))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        audit.record(op, "submitted", reason="count", **_record_kwargs())
    return {"statements": len(seen), "first_words": seen}


def run(ctx: Any) -> dict[str, Any]:
    from django.db import connection, connections

    from mrtrweb.audit import events as audit

    if connection.vendor != "postgresql":
        raise RuntimeError(f"the audit benchmark needs PostgreSQL (this run's database is {connection.vendor})")
    duration_s = 0.4 if ctx.tiny else 1.5 if ctx.quick else 3.0
    levels = list(LEVELS)
    if ctx.tiny:  # seconds: the same shape, fewer writers
        levels = [("1 writer, 1 tenant", 1, 1), ("8 writers, 1 tenant", 8, 1), ("8 writers, 4 tenants", 8, 4)]
    else:  # two passes, the second in reverse order (drifting load on the machine hits both ends)
        levels = levels + levels[::-1]
    plan = _setup(levels)
    for i, lv in enumerate(plan):
        lv["duration_s"] = duration_s
        lv["key"] = f"{i}: {lv['label']}"
    count = statements_per_append(plan[0]["ops"][0])
    connections.close_all()  # no connection is inherited by the children
    mp = multiprocessing.get_context("spawn")
    n_procs = max(len(lv["threads"]) for lv in plan)
    barrier = mp.Barrier(n_procs + 1)
    results = mp.Queue()
    procs = [mp.Process(target=_child, args=(i, plan, barrier, results), daemon=True) for i in range(n_procs)]
    for p in procs:
        p.start()
    got: dict[str, list[dict[str, Any]]] = {lv["key"]: [] for lv in plan}
    try:
        for lv in plan:
            barrier.wait(180)  # every process's threads are warm and waiting (a dead child: broken)
        for _ in range(n_procs * len(plan)):
            item = results.get(timeout=180)
            got[item["level"]].append(item)
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    out_levels = []
    warm_by_tenant: dict[str, int] = {}
    appended_by_tenant: dict[str, int] = {}
    for lv in plan:
        threads = [t for item in got[lv["key"]] for t in item["threads"] if t]
        lat = [x for t in threads for x in t["lat"]]
        errors = [e for t in threads for e in t["errors"]]
        for t in threads:
            if t["tenant"]:
                warm_by_tenant[t["tenant"]] = warm_by_tenant.get(t["tenant"], 0) + t["warm"]
                appended_by_tenant[t["tenant"]] = appended_by_tenant.get(t["tenant"], 0) + len(t["lat"])
        starts = [t["start"] for t in threads if "start" in t]
        ends = [t["end"] for t in threads if "end" in t]
        elapsed = (max(ends) - min(starts)) if starts and ends else float("nan")
        rate = len(lat) / elapsed if elapsed and elapsed > 0 else float("nan")
        out_levels.append({"label": lv["label"], "writers": lv["writers"], "tenants": len(lv["tenants"]),
                           "processes": len(lv["threads"]), "threads_per_process": lv["threads"],
                           "appends": len(lat), "seconds": round(elapsed, 3),
                           "appends_per_s": round(rate, 1), "latency": latency_summary(lat),
                           # CPU per append, robust to other load on the machine: the writer threads'
                           # own CPU (time.thread_time) and their PostgreSQL backends' (/proc)
                           "client_cpu_ms_per_append": round(sum(t.get("client_cpu_s", 0) for t in threads)
                                                             / max(1, len(lat)) * 1000, 3),
                           "db_cpu_ms_per_append": round(sum(t.get("db_cpu_s", 0) for t in threads)
                                                         / max(1, len(lat)) * 1000, 3),
                           "errors": len(errors), "error_samples": errors[:3]})
    chains = []
    for lv, res in zip(plan, out_levels):
        for tenant_id in lv["tenants"]:
            rep = audit.verify_chain(tenant_id)
            key = str(tenant_id)
            expected = warm_by_tenant.get(key, 0) + appended_by_tenant.get(key, 0)
            if lv is plan[0] and tenant_id == lv["tenants"][0]:
                expected += 2  # the statement count's two appends
            chains.append({"level": res["label"], "intact": rep.broken is None, "broken": rep.broken,
                           "events": rep.events, "expected_events": expected, "head_sequence": rep.head_sequence,
                           "events_match": rep.events == expected == rep.head_sequence})
    runs = out_levels
    out_levels = []  # per level, the run with the best rate (as gate_core's best of three), every run's rate
    for label in dict.fromkeys(x["label"] for x in runs):
        mine = [x for x in runs if x["label"] == label]
        best = dict(max(mine, key=lambda x: -1.0 if math.isnan(x["appends_per_s"]) else x["appends_per_s"]))
        best.update(runs_appends_per_s=[x["appends_per_s"] for x in mine], errors=sum(x["errors"] for x in mine),
                    error_samples=[e for x in mine for e in x["error_samples"]][:3])
        out_levels.append(best)
    one = [x for x in out_levels if x["tenants"] == 1]
    top = max(one, key=lambda x: x["writers"])
    fewer = [x["appends_per_s"] for x in one if 1 < x["writers"] < top["writers"]]
    # "not falling as writers grow": the most writers keep >= NOT_FALLING of the best rate with
    # fewer (but more than one); the collapse issue 16 names was 80/s at 8 -> 18/s at 40
    not_falling = all(top["appends_per_s"] >= NOT_FALLING * r for r in fewer)
    return {"benchmark": "audit_append", "duration_s_per_level": duration_s, "processes": PROCESSES,
            "cores": os.cpu_count(),
            "statements_per_append": count, "levels": out_levels, "chains": chains,
            "chains_ok": all(c["intact"] and c["events_match"] for c in chains),
            "errors": sum(x["errors"] for x in out_levels),
            "goals": {"appends_per_s_goal": GOAL_PER_S, "at_writers": top["writers"],
                      "appends_per_s": top["appends_per_s"], "not_falling": not_falling,
                      "met": (not math.isnan(top["appends_per_s"]) and top["appends_per_s"] >= GOAL_PER_S
                              and not_falling and top["writers"] >= 40)}}


def summary(res: dict[str, Any]) -> list[str]:
    lines = [f"{x['label']} ({'x'.join(map(str, [x['processes'], max(x['threads_per_process'])]))} proc x threads): "
             f"{x['appends_per_s']} appends/s, p50 {x['latency']['p50_ms']} ms, p99 {x['latency']['p99_ms']} ms, "
             f"CPU/append client {x.get('client_cpu_ms_per_append')} ms + PostgreSQL {x.get('db_cpu_ms_per_append')} ms, "
             f"{x['errors']} errors" for x in res["levels"]]
    lines.append(f"statements per append: {res['statements_per_append']['statements']}; chains intact and complete: "
                 f"{res['chains_ok']}")
    g = res["goals"]
    lines.append(f"goal >= {g['appends_per_s_goal']}/s at {g['at_writers']} writers, not falling: "
                 f"{g['appends_per_s']}/s, not falling {g['not_falling']} -> {'met' if g['met'] else 'missed'}")
    return lines
