"""What one headless round costs the database and the event loop, counted (issues 16 and 30): every
SQL statement of the round (``CursorWrapper.execute``/``executemany``, in whatever thread it runs),
every query message that reaches PostgreSQL (on the PostgreSQL run: a proxy reading the wire
protocol of every connection, psycopg's own ``BEGIN``/``COMMIT`` included, tests/pgwire.py), every
``sync_to_async`` hop, and the MCP requests, for one ``tools/call`` with one form round answered
through :func:`mrtrweb.headless.arun` against the demo MCP server on loopback.

The limits are what the round costs now; a change that adds a query or a hop to the round path
fails here (a count, not a time). docs/round.md ("What one round asks of the database") lists the
statements one by one with the guarantee each serves, and what keeps the round above issue 30's
goal of about 10. The suite runs this file on SQLite and again on PostgreSQL
(``tests.services_settings``)."""

from __future__ import annotations

import asyncio
import collections

import pytest
from asgiref.sync import SyncToAsync
from django.db import connection
from django.db.backends import utils as db_utils

from mrtrweb.runtime import gates
from mrtrweb.headless import client as headless
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.mcp.connection import McpConnection
from mrtrweb.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True)]

#: (database vendor, binding store) -> (SQL statements, sync_to_async hops) per round, at most
LIMITS = {
    ("sqlite", "database"): (49, 4),  # SQLite: 7 statements per audit append, 1 on PostgreSQL
    ("sqlite", "cache"): (38, 4),
    # four hops: the member check and the start in one (mrtrweb.headless.quickstart), the headless
    # receipt with the answer
    ("postgresql", "database"): (9, 4),
    ("postgresql", "cache"): (9, 4),
}
#: binding store -> the query messages that reach PostgreSQL per round, at most (tests/pgwire.py:
#: every connection's, psycopg's own BEGIN / COMMIT included)
WIRE_LIMITS = {"database": 9, "cache": 9}
#: binding store -> the statements PostgreSQL runs for them (a message may carry several), at most: as
#: many as the messages since the receipt's append is one statement (its once-check a claim with a
#: unique key, mrtrweb.models.AuditOnce; it was two, a lock of the chain head first: 13 / 12)
SERVER_LIMITS = {"database": 9, "cache": 9}


class _Counter:
    def __init__(self) -> None:
        self.sql: list[str] = []
        self.hops: collections.Counter[str] = collections.Counter()


@pytest.fixture
def counted(monkeypatch):
    """Counts SQL statements and thread hops while installed (all threads)."""
    counter = _Counter()
    execute, executemany = db_utils.CursorWrapper.execute, db_utils.CursorWrapper.executemany
    hop = SyncToAsync.__call__

    def counted_execute(self, sql, params=None):
        counter.sql.append(sql.split(None, 1)[0].upper() + " " + sql[:70])
        return execute(self, sql, params)

    def counted_executemany(self, sql, param_list):
        counter.sql.append(sql[:70])
        return executemany(self, sql, param_list)

    async def counted_hop(self, *args, **kwargs):
        counter.hops[getattr(self.func, "__qualname__", type(self.func).__name__)] += 1
        return await hop(self, *args, **kwargs)

    def install() -> _Counter:
        monkeypatch.setattr(db_utils.CursorWrapper, "execute", counted_execute)
        monkeypatch.setattr(db_utils.CursorWrapper, "executemany", counted_executemany)
        monkeypatch.setattr(SyncToAsync, "__call__", counted_hop)
        return counter

    return install


@pytest.fixture
async def wire(monkeypatch):
    """On PostgreSQL, every new database connection goes through a counting proxy
    (:class:`tests.pgwire.WireCounter`): what reaches the server, psycopg's own ``BEGIN`` /
    ``COMMIT`` included. None on another database."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    if connection.vendor != "postgresql":
        yield None
        return
    from tests.pgwire import WireCounter

    from mrtrweb.operations import hops

    settings_dict = connections.settings["default"]
    await sync_to_async(connections.close_all)()
    await asyncio.to_thread(hops.close_connections)  # the round's threads' own (mrtrweb.operations.hops)
    host, port = settings_dict["HOST"] or "127.0.0.1", int(settings_dict["PORT"] or 5432)
    with WireCounter(host, port) as counter:
        monkeypatch.setitem(settings_dict, "HOST", "127.0.0.1")
        monkeypatch.setitem(settings_dict, "PORT", counter.port)
        monkeypatch.setitem(settings_dict, "OPTIONS", {**settings_dict.get("OPTIONS", {}), "sslmode": "disable"})
        try:
            yield counter
        finally:
            await sync_to_async(connections.close_all)()
            await asyncio.to_thread(hops.close_connections)
    # the proxied sessions' backends end once they see their sockets closed: wait for that, so that
    # the test database can be dropped at the end of the run
    await asyncio.to_thread(_proxied_sessions_gone, host, port, settings_dict, list(counter.upstream_ports))


def _proxied_sessions_gone(host: str, port: int, settings_dict: dict, ports: list[int], wait_s: float = 5.0) -> None:
    import time

    import psycopg

    with psycopg.connect(host=host, port=port, dbname=settings_dict["NAME"], user=settings_dict.get("USER") or None,
                         password=settings_dict.get("PASSWORD") or None, autocommit=True) as conn:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            others = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)",
                                  [ports]).fetchone()[0]
            if not others:
                return
            time.sleep(0.05)


@pytest.fixture(params=["database", "cache"])
def binding_store(request, settings):
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "BINDING_STORE": request.param}
    gates.reset_gate()
    yield request.param
    gates.reset_gate()


async def _round(seeded) -> headless.HeadlessOutcome:
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    return await headless.arun(url=server.url, user=alice, tenant=server.tenant, method="tools/call",
                               params={"name": "wait_then_ask", "arguments": {"seconds": 0}},
                               consent=ConsentPolicy.parse("accept-defaults"))


async def test_a_headless_round_stays_within_its_queries_and_hops(seeded, counted, binding_store, wire, monkeypatch):
    """The count is that of the round's own path. One part of it depends on timing, not on the
    code: the headless client learns what its operation's phases did in process
    (:func:`mrtrweb.operations.watching`), and reads the operation row (one statement, one hop:
    ``_read``) only when no change came within ``PUSH_WAIT_S`` (on a loaded machine a phase may
    take longer than that). Those reads are counted and left out of the limits; that each costs
    exactly one statement and one hop is what ``_read`` is. Likewise the Stop polls of a call in
    flight (``stop_requested``: one hop, a cache read, every ``STOP_POLL_S`` the server takes)."""
    for _ in range(2):  # connections, caches, the server row and the worker lease exist; the tools
        warm = await _round(seeded)  # listing is kept once the connection's listen stream was acknowledged
        assert warm.status == "completed", warm
    wakeups = collections.Counter()  # "timeout": the row reads of waits no change ended
    read = headless._read

    async def counted_read(op_id):
        wakeups["timeout"] += 1
        return await read(op_id)

    monkeypatch.setattr(headless, "_read", counted_read)
    sent_mcp: list[str] = []  # the MCP requests of the round, by method
    send = McpConnection.send

    async def counted_send(self, method, *args, **kwargs):
        sent_mcp.append(method)
        return await send(self, method, *args, **kwargs)

    monkeypatch.setattr(McpConnection, "send", counted_send)
    compiled: list[str] = []  # ORM queries compiled during the round (issue 30, item 2: none on PostgreSQL)
    from django.db.models.sql import compiler as orm

    for kind in (orm.SQLCompiler, orm.SQLInsertCompiler, orm.SQLUpdateCompiler, orm.SQLDeleteCompiler,
                 orm.SQLAggregateCompiler):
        def as_sql(self, *args, _real=kind.as_sql, **kwargs):
            out = _real(self, *args, **kwargs)
            compiled.append(f"{type(self).__name__}: {str(out)[:90]}")
            return out

        monkeypatch.setattr(kind, "as_sql", as_sql)
    counter = counted()
    if wire is not None:
        wire.reset()
    outcome = await _round(seeded)
    sql, hops = list(counter.sql), sum(counter.hops.values())  # the round's alone
    sent = wire.statements if wire is not None else []
    orm_compiled = list(compiled)
    detail = "\n".join(sql) + "\n" + str(dict(counter.hops)) + "\n" + str(dict(wakeups))
    # the reads after waits that no change ended: as many statements and hops, which a prompt change does not cost;
    # a call's Stop polls (one hop each STOP_POLL_S while the call is in flight, the cache read: no statement)
    # depend on how long the server takes, not on the code
    statements, hops = len(sql) - wakeups["timeout"], hops - wakeups["timeout"] - counter.hops["stop_requested"]
    assert outcome.status == "completed" and outcome.rounds == 1, outcome
    # what the protocol needs: the call and its retry (the tools listing is the connection's, kept
    # until the server says it changed)
    assert sent_mcp == ["tools/call", "tools/call"], sent_mcp
    events = [e async for e in AuditEvent.objects.filter(operation_id=outcome.operation_id)
              .order_by("sequence").values_list("event", flat=True)]
    assert events == ["received", "shown", "submitted", "completed"]  # the guarantees, all kept
    if binding_store == "database":  # the close left nothing bound: the record and the latest id went together
        from mrtrweb.models import BindingIndexEntry, LiveBinding

        assert not await LiveBinding.objects.filter(operation_id=str(outcome.operation_id)).aexists()
        assert not await BindingIndexEntry.objects.filter(operation_id=str(outcome.operation_id)).aexists()
    max_sql, max_hops = LIMITS[(connection.vendor, binding_store)]
    assert statements <= max_sql, f"{statements} SQL statements per round (at most {max_sql}):\n{detail}"
    assert hops <= max_hops, f"{hops} thread hops per round (at most {max_hops}):\n{detail}"
    if connection.vendor == "postgresql":  # SQLite's audit append keeps the ORM (its own locking path)
        # the reads after waits no change ended are the ORM's (_read: one compile each)
        assert len(orm_compiled) <= wakeups["timeout"], orm_compiled
    if wire is not None:  # counted at PostgreSQL: what the server received, whoever sent it
        assert len(sent) - wakeups["timeout"] <= WIRE_LIMITS[binding_store], \
            f"{len(sent)} query messages reached PostgreSQL (at most {WIRE_LIMITS[binding_store]}):\n" + \
            "\n".join(text[:100] for text in sent)
        assert len(sent) >= statements, "the proxy saw fewer statements than Django's cursors sent"
        from tests.pgwire import split_statements

        ran = [part for text in sent for part in split_statements(text)]  # as the server counts them
        assert len(ran) - wakeups["timeout"] <= SERVER_LIMITS[binding_store], \
            f"{len(ran)} statements ran at PostgreSQL (at most {SERVER_LIMITS[binding_store]}):\n" + \
            "\n".join(text[:100] for text in ran)


async def test_with_round_threads_each_phase_runs_on_one_of_them(seeded, settings, monkeypatch):
    """``ROUND_THREADS = 2`` on PostgreSQL (:mod:`mrtrweb.operations.hops`): every phase of the round
    runs on one of the round's own threads, none on asgiref's one sync thread, with the same four hops
    (a warm round: the member check and the start in one, mrtrweb.headless.quickstart) and the round's
    guarantees kept (its four audit events). On SQLite the setting is ignored: the phases stay on
    asgiref's thread."""
    import threading

    from mrtrweb.operations import hops

    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "ROUND_THREADS": 2}
    for _ in range(2):  # the server row and the tools listing known (kept once the listen stream was acknowledged)
        assert (await _round(seeded)).status == "completed"
    ran: list[tuple[str, str]] = []  # (the phase, the thread that ran it)
    hop = SyncToAsync.__call__

    async def where(self, *args, **kwargs):
        func, name = self.func, getattr(self.func, "__qualname__", "?")

        def run(*a, **k):
            ran.append((name, threading.current_thread().name))
            return func(*a, **k)

        self.func = run
        try:
            return await hop(self, *args, **kwargs)
        finally:
            self.func = func

    monkeypatch.setattr(SyncToAsync, "__call__", where)
    try:
        outcome = await _round(seeded)
    finally:
        await asyncio.to_thread(hops.close_connections)
    assert outcome.status == "completed" and outcome.rounds == 1, outcome
    events = [e async for e in AuditEvent.objects.filter(operation_id=outcome.operation_id)
              .order_by("sequence").values_list("event", flat=True)]
    assert events == ["received", "shown", "submitted", "completed"]
    # the consent receipt is written in the answer's hop (_first_then_answer: the round came with its change)
    phases = {"_start_after", "_judge_round", "_first_then_answer", "_check_and_complete"}
    threads = {name: thread for name, thread in ran if name in phases}
    assert set(threads) == phases, ran
    own = {thread.startswith("mrtrweb-round-") for thread in threads.values()}
    assert own == ({True} if connection.vendor == "postgresql" else {False}), threads
