"""Where a round's time goes, for the benchmarks (:mod:`.vs_sdk`): :func:`component_spans` wraps the
product's components (gate, audit, MCP requests, pushes, binding stores, SQL, thread hops) for the
measurement and returns calls and milliseconds per round; :func:`thread_profiles` is a cProfile of
the event loop's thread and of the sync work handed to threads. Both restore what they patched.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["component_spans", "thread_profiles"]


async def thread_profiles(make, n: int, limit: int = 15) -> dict[str, Any]:
    """cProfile of ``n`` rounds of ``make()`` (one after another): ``event_loop`` -- this thread
    (the SDK, the transport, the product's async code); ``sync_work`` -- the functions the round
    runs through ``sync_to_async`` (each call profiled in the thread that runs it; the rounds go
    one at a time, so no two run at once). Each as :func:`.gate_core.profile_rows` gives it, plus
    ``total_s``: the profiled seconds per round."""
    import cProfile
    import functools

    from asgiref.sync import SyncToAsync

    from .gate_core import profile_rows

    loop_prof, sync_prof = cProfile.Profile(), cProfile.Profile()
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
            "event_loop": profile_rows(loop_prof, limit), "sync_work": profile_rows(sync_prof, limit)}


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
