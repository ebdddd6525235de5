"""Prepared statements: how the product's hand-compiled SQL reaches the database (issue 30).

Owns :func:`cursor`, the one way the round path's precompiled statements -- the access checks,
the operation's row, the binding store's steps, the audit chain -- are run. On PostgreSQL with
psycopg 3 and ``MRTRWEB["PREPARED_STATEMENTS"]`` on (the default), the cursor sends each statement
with its parameters apart (server-side binding, Django's own ``ServerBindingCursor``) and psycopg
prepares it the second time a connection runs it (:data:`PREPARE_AT`; the project's own
``OPTIONS["prepare_threshold"]`` where it set one): from then on PostgreSQL neither parses nor
plans it again on that connection but runs its generic plan. Planning was 0.1-1.2 ms of each of the
round's statements, about 3 ms a round (docs/benchmarks NOTES, session 21). A statement run once
per connection (a connection opened per request) is never prepared, so it costs no more than before
(preparing is one more round trip, once). psycopg keeps at most ``prepared_max`` statements per
connection (100), the least used deallocated.

The cursor also keeps each statement's placeholders converted (``%s`` to ``$n``), which psycopg
redoes on every run for a statement over 4,096 bytes or 50 parameters -- the round's joined
statements are (:func:`_converting_query_class`; ~1.5 ms of a headless round, session 24).

Only these statements: while one runs the connection's ``prepare_threshold`` is set as above and
put back after, so the project's own queries (Django's default ``None``: nothing prepared) stay as
Django sends them. Any other database, psycopg 2, a project ``cursor_factory`` of its own (its
cursor is kept, e.g. a tracing one), a connection whose time zone differs from its adapters'
(Django registers a loader per cursor then), or the setting off: Django's own cursor, as before.

A prepared statement the server no longer takes -- a migration changed a column it returns
(``cached plan must not change result type``, SQLSTATE 0A000) or the session forgot it
(``DISCARD ALL``, 26000) -- would fail on every later run (psycopg keeps its name): the cursor then
forgets every prepared statement of the connection (deallocated at its next statement) and,
outside a transaction (nothing was written: the statement failed whole), runs it once more,
unprepared; inside one the error goes to the caller, as any.

Either way the cursor is Django's :class:`~django.db.backends.utils.CursorWrapper`: its execute
wrappers (the statement counts of ``tests/operations/test_round_cost.py``), its debug log and
its error translation (``django.db.DatabaseError`` and subclasses) apply unchanged.

Also owns :func:`check_pool`: after a connection was found broken (the database went away while it
was kept), every idle connection of its pool is tested at once, so that no caller meets them one by
one (see there).

May import: django.db, psycopg, :mod:`mrtrweb.conf`. Imported by the product's SQL (tenancy,
operations, bindings, audit, headless).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .. import conf

__all__ = ["PREPARE_AT", "check_pool", "cursor", "prepares"]

logger = logging.getLogger("mrtrweb.prepared")

#: psycopg's ``prepare_threshold`` while one of these statements runs on a connection that has none
#: (Django's default): prepared at its second run there (a statement run once per connection -- a
#: connection per request -- costs no Parse round trip of its own)
PREPARE_AT = 1

_CURSOR_CLASS: list[Any] = []


def _cursor_class() -> Any:
    """Django's ``ServerBindingCursor`` whose ``execute`` prepares as the module says (built on
    first use: psycopg is imported only where PostgreSQL is used)."""
    if not _CURSOR_CLASS:
        from django.db.backends.postgresql.base import ServerBindingCursor
        from psycopg import errors
        from psycopg.pq import TransactionStatus

        class PreparingCursor(ServerBindingCursor):
            """Server-side binding; preparing on the connection only while its own statement runs."""

            _query_cls = _converting_query_class() or ServerBindingCursor._query_cls

            def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                        binary: bool | None = None) -> Any:
                raw = self.connection
                own = raw.prepare_threshold
                raw.prepare_threshold = PREPARE_AT if own is None else own
                try:
                    try:
                        return super().execute(query, params, prepare=prepare, binary=binary)
                    except (errors.InvalidSqlStatementName, errors.FeatureNotSupported) as exc:
                        _forget(raw, exc)
                        if raw.info.transaction_status != TransactionStatus.IDLE:
                            raise  # a transaction's: aborted, the caller's error
                    # once more, unprepared (nothing was written: the statement failed whole)
                    return super().execute(query, params, prepare=False, binary=binary)
                finally:
                    raw.prepare_threshold = own

        _CURSOR_CLASS.append(PreparingCursor)
    return _CURSOR_CLASS[0]


#: statements whose placeholders' conversion is kept (each a few KB: the product's are a few dozen shapes)
CONVERTED_MAX = 256


def _converting_query_class() -> Any:
    """psycopg's query class, keeping the conversion of a statement's ``%s`` placeholders to
    ``$n`` for statements of any length -- or ``None`` where this psycopg is not the one it was
    written against (its internals moved: psycopg's own class is used, nothing else changes).

    psycopg caches that conversion only for statements under 4,096 bytes and 50 parameters (the
    ORM's long ``INSERT ... VALUES`` of varying length would fill its cache); the round's joined
    statements are longer, so each run re-parsed its text with a regular expression: ~170 µs a
    statement, three a round (issue 30, session 24). These statements are a few fixed shapes, so
    their conversions are kept here, at most :data:`CONVERTED_MAX` (least recently used dropped)."""
    try:
        from functools import lru_cache

        from psycopg import _queries

        base = _queries.PostgresQuery
        convert_text = _queries._query2pg_nocache
        if not {"query", "_want_formats", "_order", "_parts", "_tx"} <= set(getattr(base, "__slots__", ())):
            return None
    except (ImportError, AttributeError):
        return None

    @lru_cache(maxsize=CONVERTED_MAX)
    def converted(query: str, encoding: str) -> Any:
        return convert_text(query.encode(encoding), encoding)

    class ConvertingQuery(base):  # type: ignore[misc, valid-type]
        __slots__ = ()
        #: the kept conversions (``cache_info()``: what tests and probes read)
        conversions = staticmethod(converted)

        def convert(self, query: Any, vars: Any) -> None:  # noqa: A002 -- psycopg's signature
            if vars is None or type(query) is not str:
                return super().convert(query, vars)
            self.query, self._want_formats, self._order, self._parts = converted(query, self._tx.encoding)
            self.dump(vars)
            return None

    return ConvertingQuery if _converts_as_psycopg(base, ConvertingQuery) else None


#: statements :func:`_converts_as_psycopg` converts both ways (positional, binary, a literal ``%``, named)
_SAMPLES: tuple[tuple[str, Any], ...] = (
    ("SELECT %s, %b, %t, '100%%'", (1, b"\x00", "t")),
    ("SELECT %(a)s, %(b)s, %(a)s", {"a": 1, "b": "x"}),
)


def _converts_as_psycopg(base: Any, ours: Any) -> bool:
    """Whether ``ours`` gives what psycopg's own ``base`` gives -- the query, parameters, types and
    formats -- for :data:`_SAMPLES` (checked once, when the class is made: a psycopg whose internals
    changed shape is then served by its own class, never by a conversion that would fail or differ)."""
    try:
        from psycopg.adapt import Transformer

        for query, params in _SAMPLES:
            theirs, mine = base(Transformer()), ours(Transformer())
            theirs.convert(query, params)
            mine.convert(query, params)
            if (mine.query, mine.params, mine.types, mine.formats) != \
                    (theirs.query, theirs.params, theirs.types, theirs.formats):
                return False
    except Exception as exc:  # noqa: BLE001 -- any surprise: psycopg's own class
        logger.info("psycopg's own placeholder conversion kept (%s)", exc.__class__.__name__)
        return False
    return True


def _forget(raw: Any, exc: BaseException) -> None:
    """Forget every statement psycopg prepared on ``raw`` (a ``DEALLOCATE ALL`` goes before its next
    statement): one of them is no longer what the server has."""
    logger.warning("prepared statements of a database connection forgotten after %s (sqlstate %s)",
                   type(exc).__name__, getattr(exc, "sqlstate", None) or "-")
    manager = getattr(raw, "_prepared", None)  # psycopg's own cache (3.0-3.3: PrepareManager.clear)
    if manager is not None and callable(getattr(manager, "clear", None)):
        manager.clear()


def prepares(conn: Any) -> bool:
    """Whether :func:`cursor` prepares on Django connection ``conn`` (PostgreSQL through psycopg 3,
    ``MRTRWEB["PREPARED_STATEMENTS"]``, no ``cursor_factory`` of the project's own)."""
    if conn.vendor != "postgresql" or not conf.get("PREPARED_STATEMENTS"):
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3) and "cursor_factory" not in conn.settings_dict.get("OPTIONS", {})


def cursor(conn: Any) -> Any:
    """A cursor of Django connection ``conn`` for the product's precompiled statements: use it as
    ``with cursor(conn) as cur: cur.execute(sql, params)``. Preparing where :func:`prepares`, else
    ``conn.cursor()``.

    Raises:
        django.db.DatabaseError: the connection cannot be made (as ``conn.cursor()``)."""
    if not prepares(conn):
        return conn.cursor()
    # what conn.cursor() does before it makes its cursor (Django's BaseDatabaseWrapper._cursor)
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    with conn.wrap_database_errors:
        raw = conn.connection
        from psycopg.pq import Format

        loader = raw.adapters.get_loader(1184, Format.TEXT)  # timestamptz
        if conn.timezone != getattr(loader, "timezone", conn.timezone):
            return conn.cursor()  # Django registers its loader on its own cursor: keep its path
        made = _cursor_class()(raw)
    conn.validate_thread_sharing()
    return conn.make_debug_cursor(made) if conn.queries_logged else conn.make_cursor(made)


#: seconds :func:`check_pool`'s caller waits for the check at most (it goes on in the background)
CHECK_WAIT_S = 0.5

_checking = threading.Lock()


def check_pool(conn: Any, *, wait_s: float = CHECK_WAIT_S) -> None:
    """Have the pool of Django connection ``conn`` test its idle connections now (psycopg_pool's
    ``ConnectionPool.check``: a broken one is discarded and a new one asked for, a working one goes
    back), after ``conn`` was found broken -- the database dropped its connections while they were
    kept (a restart, a failover, a network blip). No pool (SQLite, no ``OPTIONS["pool"]``): nothing.

    The check runs in a thread of its own (``mrtrweb-pool-check``; one at a time per process: a
    check already running is not doubled) and the caller waits for it at most ``wait_s`` seconds
    (0: not at all): a connection the database broke fails its test at once, so the check is done
    in a few milliseconds and the caller's next statement gets a working connection; a half-open
    one (no reset ever came) may hold its test for as long as the kernel waits, and only the check's
    own thread waits for it. Never raises (a failure is logged at DEBUG: the pool's own checks remain).

    Why: a pool hands out its idle connections one at a time, and ``getconn`` waits between two
    failed health checks as it waits between reconnection attempts (1, 2, 4... s, psycopg_pool 3.2
    and later). With N connections the blip broke still idle, the next caller waited about
    2^(N-2) s and, from N = 4 with a 3 s pool timeout (N = 5 with the production 10 s), failed with
    ``PoolTimeout`` although the database answered again (tests/bindings/test_db_blip.py)."""
    pool = getattr(conn, "pool", None)  # Django's PostgreSQL backend: None without OPTIONS["pool"]
    if pool is None or not _checking.acquire(blocking=False):
        return
    done = threading.Event()

    def run() -> None:
        try:
            pool.check()
        except Exception as exc:  # noqa: BLE001 -- e.g. the pool closed meanwhile
            logger.debug("idle connections of the pool not checked: %s", exc.__class__.__name__)
        finally:
            _checking.release()
            done.set()

    try:
        threading.Thread(target=run, name="mrtrweb-pool-check", daemon=True).start()
    except RuntimeError:  # no thread can be started (interpreter shutting down)
        _checking.release()
        return
    if wait_s > 0:
        done.wait(wait_s)
