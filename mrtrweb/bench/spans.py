"""Where a round's time goes, for the benchmarks (:mod:`.vs_sdk`): :func:`component_spans` wraps the
product's components (gate, audit, MCP requests, pushes, binding stores, SQL, thread hops) for the
measurement and returns calls and milliseconds per round; :func:`thread_profiles` is a cProfile of
the event loop's thread and of the sync work handed to threads (and its own time summed by
component, :func:`by_component`); :func:`hop_costs` times each thread hop's hand-over apart from
its work; :func:`round_statements` lists one round's SQL by hop. All restore what they patched.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["by_component", "component_spans", "hop_costs", "round_statements", "thread_profiles"]


async def thread_profiles(make, n: int, limit: int = 15) -> dict[str, Any]:
    """cProfile (CPU time of the profiled thread) of ``n`` rounds of ``make()`` (one after another): ``event_loop`` -- this thread
    (the SDK, the transport, the product's async code); ``sync_work`` -- the functions the round
    runs through ``sync_to_async`` (each call profiled in the thread that runs it; the rounds go
    one at a time, so no two run at once). Each as :func:`.gate_core.profile_rows` gives it, plus
    ``total_s``: the profiled seconds per round."""
    import cProfile
    import functools

    from asgiref.sync import SyncToAsync

    from .gate_core import profile_rows

    # CPU time of the thread profiled (time.thread_time): what a round costs the process, not its
    # waits (for PostgreSQL, the MCP server, the event loop's poll)
    loop_prof, sync_prof = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
    spent = {"sync": 0.0}
    real_call = SyncToAsync.__call__

    async def profiled_call(self, *args, **kwargs):
        func = self.func

        @functools.wraps(func)
        def run(*a, **k):
            t = time.perf_counter()
            sync_prof.enable()
            try:
                return func(*a, **k)
            finally:
                sync_prof.disable()
                spent["sync"] += time.perf_counter() - t

        self.func = run
        try:
            return await real_call(self, *args, **kwargs)
        finally:
            self.func = func

    SyncToAsync.__call__ = profiled_call
    try:
        t0 = time.perf_counter()
        loop_prof.enable()
        try:
            for _ in range(n):
                await make()
        finally:
            loop_prof.disable()
        total = time.perf_counter() - t0
    finally:
        SyncToAsync.__call__ = real_call
    return {"rounds": n, "round_ms": round(total / n * 1000, 2),
            "sync_work_ms_per_round": round(spent["sync"] / n * 1000, 2),
            "event_loop": profile_rows(loop_prof, limit), "sync_work": profile_rows(sync_prof, limit),
            "by_component": by_component(loop_prof, sync_prof)}


# ---------------------------------------------------------------------------------------------- spans
async def component_spans(make, n: int, extra: list[tuple[str, str, str]] = ()) -> dict[str, dict[str, float]]:
    """Wall time per round inside the product's components during ``n`` rounds of ``make()``,
    by wrapping them for the measurement (nested spans overlap: SQL includes the audit's queries,
    the audit includes its SQL)."""
    import functools

    from asgiref.sync import SyncToAsync
    from django.db.backends import utils as db_utils
    from django.db.models.sql.compiler import SQLCompiler

    from ..audit import events as audit
    from .. import operations
    from ..bindings import DjangoCacheBindingStore
    from ..bindings.database import DatabaseBindingStore
    from ..gate.gate import Gate
    from ..mcp import McpConnection

    acc: dict[str, list[float]] = {}

    def add(name: str, dt: float) -> None:
        slot = acc.setdefault(name, [0, 0.0])
        slot[0] += 1
        slot[1] += dt

    def wrap_sync(fn, name):
        @functools.wraps(fn)
        def inner(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                add(name, time.perf_counter() - t)
        return inner

    def wrap_async(fn, name):
        @functools.wraps(fn)
        async def inner(*a, **k):
            t = time.perf_counter()
            try:
                return await fn(*a, **k)
            finally:
                add(name, time.perf_counter() - t)
        return inner

    patches = [(Gate, m, wrap_sync(getattr(Gate, m), f"gate.{m}")) for m in
               ("register", "receive", "respond", "state", "close")]
    patches += [(audit, "record", wrap_sync(audit.record, "audit.record (chained append, SQL included)")),
                (McpConnection, "send", wrap_async(McpConnection.send, "MCP request (SDK send + server)")),
                (operations, "notify", wrap_async(operations.notify, "push (channel layer group_send)")),
                (DjangoCacheBindingStore, "_call", wrap_sync(DjangoCacheBindingStore._call,
                                                             "Redis (binding store calls)")),
                (DatabaseBindingStore, "_call", wrap_sync(DatabaseBindingStore._call,
                                                          "database binding store calls (SQL included)")),
                (db_utils.CursorWrapper, "execute", wrap_sync(db_utils.CursorWrapper.execute,
                                                              "SQL (every query, incl. audit's)")),
                (db_utils.CursorWrapper, "executemany", wrap_sync(db_utils.CursorWrapper.executemany,
                                                                  "SQL (every query, incl. audit's)")),
                (SQLCompiler, "execute_sql", wrap_sync(SQLCompiler.execute_sql,
                                                       "ORM queries (compile + SQL + rows; incl. the SQL row)")),
                (SyncToAsync, "__call__", wrap_async(SyncToAsync.__call__,
                                                     "sync_to_async calls (thread hop + the work inside)"))]
    import importlib

    for mod, attr, label in extra:
        module = importlib.import_module(f"mrtrweb.{mod}")
        patches.append((module, attr, wrap_sync(getattr(module, attr), label)))
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, new in patches:
        setattr(obj, name, new)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            await make()
        total = time.perf_counter() - t0
    finally:
        for obj, name, old in saved:
            setattr(obj, name, old)
    out = {k: {"calls": round(c / n, 1), "ms": round(s / n * 1000, 2)} for k, (c, s) in
           sorted(acc.items(), key=lambda kv: -kv[1][1])}
    out["whole round"] = {"calls": 1, "ms": round(total / n * 1000, 2)}
    # the spans that never nest in one another; the rest of the round is Python around them (the
    # ORM building queries and rows, Django, the SDK's models), thread hops and waiting for pushes
    disjoint = [k for k in out if k.startswith(("SQL ", "MCP request", "Redis ", "push ", "gate."))]
    rest = total / n * 1000 - sum(out[k]["ms"] for k in disjoint)
    out["outside SQL, MCP, Redis, push and gate"] = {"calls": "", "ms": round(rest, 2)}
    return out


# ------------------------------------------------------------------------------ profile by component
#: (what a file's path contains, the component it is counted under), the first that matches wins
COMPONENTS = (
    ("django/db/models/sql/", "ORM: query building and compiling"),
    ("django/db/models/", "ORM: QuerySet iteration, model instances"),
    ("django/db/backends/", "Django's database wrapper"),
    ("psycopg", "psycopg (the driver)"),
    ("asyncio/", "asyncio"),
    ("selectors.py", "asyncio"),
    ("site-packages/mcp/", "MCP transport (mcp, httpx, anyio, pydantic)"),
    ("site-packages/httpx", "MCP transport (mcp, httpx, anyio, pydantic)"),
    ("site-packages/httpcore", "MCP transport (mcp, httpx, anyio, pydantic)"),
    ("site-packages/anyio", "MCP transport (mcp, httpx, anyio, pydantic)"),
    ("site-packages/h11", "MCP transport (mcp, httpx, anyio, pydantic)"),
    ("site-packages/pydantic", "MCP transport (mcp, httpx, anyio, pydantic)"),
    ("site-packages/httpx_sse", "MCP transport (mcp, httpx, anyio, pydantic)"),
    ("channels", "channel layer and Redis (channels, redis, django_redis)"),
    ("site-packages/redis", "channel layer and Redis (channels, redis, django_redis)"),
    ("django_redis", "channel layer and Redis (channels, redis, django_redis)"),
    ("msgpack", "channel layer and Redis (channels, redis, django_redis)"),
    ("asgiref", "sync_to_async (asgiref) and the hand-over to threads"),
    ("concurrent/futures", "sync_to_async (asgiref) and the hand-over to threads"),
    ("threading.py", "sync_to_async (asgiref) and the hand-over to threads"),
    ("queue.py", "sync_to_async (asgiref) and the hand-over to threads"),
    ("jsonschema", "jsonschema, referencing"),
    ("referencing", "jsonschema, referencing"),
    ("cryptography", "cryptography (the binding's seal), hashing, JSON"),
    ("json/", "cryptography (the binding's seal), hashing, JSON"),
    ("hmac.py", "cryptography (the binding's seal), hashing, JSON"),
    ("mrtrweb/", "mrtrweb's own Python"),
    ("site-packages/django/", "Django (other: signals, settings, utils)"),
)


def component_of(filename: str) -> str:
    """The component of :data:`COMPONENTS` a profiled function's file belongs to (``other``:
    built-ins and the standard library not named there)."""
    if filename.startswith("~") or filename.startswith("<"):
        return "C functions called from C functions"
    for marker, name in COMPONENTS:
        if marker in filename:
            return name
    return "other (standard library)"


def by_component(*profiles: Any) -> list[dict[str, Any]]:
    """Own time (cProfile's ``tottime``) of every profiled function, summed by :func:`component_of`
    over ``profiles`` (a C function's time counted under each caller's component, by what it
    spent called from there): ``[{component, own_s, share_pct}]``, largest first."""
    import io
    import pstats

    sums: dict[str, float] = {}
    for prof in profiles:
        stats = pstats.Stats(prof, stream=io.StringIO())
        for (filename, _line, _name), (_cc, _nc, tt, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
            if filename.startswith("~") and callers:  # a C function: its time is its callers' components'
                for (caller_file, _l, _n), timing in callers.items():
                    key = component_of(caller_file)
                    sums[key] = sums.get(key, 0.0) + timing[2]
                continue
            key = component_of(filename)
            sums[key] = sums.get(key, 0.0) + tt
    total = sum(sums.values()) or 1.0
    return [{"component": k, "own_s": round(s, 4), "share_pct": round(100.0 * s / total, 1)}
            for k, s in sorted(sums.items(), key=lambda kv: -kv[1])]


# ------------------------------------------------------------------------------------- thread hops
async def hop_costs(make, n: int) -> dict[str, Any]:
    """What each thread hop of ``n`` rounds of ``make()`` (one after another) costs: per hop (by
    the function it runs) the median milliseconds from the ``await`` to the function's start in
    its thread (*dispatch*: the hand-over and any queue), the function itself (*work*), and from
    its end back to the awaiting coroutine (*back*); and the process's CPU per round."""
    import functools
    import statistics

    from asgiref.sync import SyncToAsync

    rows: list[tuple[str, float, float, float]] = []
    real = SyncToAsync.__call__

    async def timed(self, *args, **kwargs):
        func = self.func
        mark: dict[str, float] = {}

        @functools.wraps(func)
        def run(*a, **k):
            mark["s"] = time.perf_counter()
            try:
                return func(*a, **k)
            finally:
                mark["e"] = time.perf_counter()

        self.func = run
        t0 = time.perf_counter()
        try:
            return await real(self, *args, **kwargs)
        finally:
            t1 = time.perf_counter()
            self.func = func
            if "s" in mark and "e" in mark:
                rows.append((getattr(func, "__qualname__", type(func).__name__), mark["s"] - t0,
                             mark["e"] - mark["s"], t1 - mark["e"]))

    SyncToAsync.__call__ = timed
    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            await make()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    finally:
        SyncToAsync.__call__ = real
    by: dict[str, list[tuple[float, float, float]]] = {}
    for name, d, w, b in rows:
        by.setdefault(name, []).append((d, w, b))
    hops = []
    for name, xs in by.items():
        hops.append({"hop": name, "per_round": round(len(xs) / n, 2),
                     "dispatch_ms": round(statistics.median(x[0] for x in xs) * 1000, 3),
                     "work_ms": round(statistics.median(x[1] for x in xs) * 1000, 3),
                     "back_ms": round(statistics.median(x[2] for x in xs) * 1000, 3)})
    return {"rounds": n, "round_ms": round(wall / n * 1000, 2), "cpu_ms_per_round": round(cpu / n * 1000, 2),
            "hops": hops}


# ---------------------------------------------------------------------------------- one round's SQL
async def round_statements(make) -> list[dict[str, str]]:
    """The SQL statements of one ``make()`` (every thread, through Django's cursors), in order, each
    with the thread hop (the function it runs) that sent it: ``[{hop, sql}]`` (the first 160
    characters of the statement)."""
    import contextvars

    from asgiref.sync import SyncToAsync
    from django.db.backends import utils as db_utils

    hop_name: contextvars.ContextVar[str] = contextvars.ContextVar("bench_hop", default="(event loop)")
    seen: list[dict[str, str]] = []
    execute, executemany, real = db_utils.CursorWrapper.execute, db_utils.CursorWrapper.executemany, SyncToAsync.__call__

    def counted_execute(self, sql, params=None):
        seen.append({"hop": hop_name.get(), "sql": " ".join(str(sql).split())[:160]})
        return execute(self, sql, params)

    def counted_executemany(self, sql, param_list):
        seen.append({"hop": hop_name.get(), "sql": " ".join(str(sql).split())[:160]})
        return executemany(self, sql, param_list)

    async def named(self, *args, **kwargs):
        token = hop_name.set(getattr(self.func, "__qualname__", type(self.func).__name__))
        try:
            return await real(self, *args, **kwargs)
        finally:
            hop_name.reset(token)

    db_utils.CursorWrapper.execute, db_utils.CursorWrapper.executemany = counted_execute, counted_executemany
    SyncToAsync.__call__ = named
    try:
        await make()
    finally:
        db_utils.CursorWrapper.execute, db_utils.CursorWrapper.executemany = execute, executemany
        SyncToAsync.__call__ = real
    return seen
