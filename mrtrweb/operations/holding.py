"""What this worker holds while the database is away, and which operations it follows (issue 26).

* :func:`database_back` -- a call that ended while the database is unreachable: its outcome waits
  in this worker until the database answers again, **however long that takes**, and is then
  written once by the caller. Past ``MRTRWEB["OUTCOME_HOLD_S"]`` the hold is logged as an error
  (once); it goes on. At most ``MAX_HELD_OUTCOMES`` outcomes are held at once (gauge
  ``mrtrweb_outcomes_held``); one more raises :class:`HoldFull` and its operation ends
  ``outcome_not_kept`` once the database is back (:func:`mark_failed`). If the worker dies
  meanwhile, the operation still names it: another worker's reaper ends it ``interrupted``, code
  ``held_outcome_lost`` (the worker noted what it held in ``BINDING_CACHE``, :func:`held_by`; else
  ``worker_lost``).
* :func:`following` -- the operations a task of this process follows right now (a call in
  flight, a legacy call held open, an outcome held, an answer kept for the database): what
  :mod:`.untracked` compares the rows naming this worker with.
* :func:`mark_failed` -- an operation whose drive stopped on an error is marked failed, waiting for
  the database as long as it takes: an operation is never left ``running`` behind a dead task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Iterator

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from .. import conf
from ..runtime import metrics
from ..models import Operation

logger = logging.getLogger("mrtrweb.operations")

#: operation id (str) -> how many tasks of this process follow it
_following: dict[str, int] = {}
#: operations whose outcome this process holds for the database
_held: set[str] = set()


class HoldFull(Exception):
    """This worker already holds ``MAX_HELD_OUTCOMES`` outcomes: this one is not kept."""


@contextlib.contextmanager
def following(op_id: Any) -> Iterator[None]:
    """While the block runs, a task of this process follows ``op_id`` (nestable)."""
    key = str(op_id)
    _following[key] = _following.get(key, 0) + 1
    try:
        yield
    finally:
        left = _following.get(key, 1) - 1
        if left:
            _following[key] = left
        else:
            _following.pop(key, None)


def followed() -> frozenset[str]:
    """The ids of the operations a task of this process follows now."""
    return frozenset(_following)


def held() -> int:
    """How many outcomes this process holds for the database now."""
    return len(_held)


def _held_key(op_id: Any) -> str:
    return f"{conf.get('BINDING_KEY_PREFIX')}:held:{op_id}"


def _note_held(op_id: Any, holding: bool) -> None:
    """Say in ``BINDING_CACHE`` that this worker holds (or no longer holds) ``op_id``'s outcome, so
    that a reaper ending it after this worker died says what was lost (:func:`held_by`). Sync;
    a cache failure is logged, never raised (the reaper then says ``worker_lost``)."""
    from django.core.cache import caches

    from ..runtime.workers import WORKER_ID

    try:
        cache = caches[conf.get("BINDING_CACHE")]
        if holding:
            cache.set(_held_key(op_id), WORKER_ID, timeout=HELD_NOTE_S)
        else:
            cache.delete(_held_key(op_id))
    except Exception as exc:  # noqa: BLE001 -- only the reaper's wording depends on it
        logger.info("operation %s: the held outcome was not noted in the cache (%s)", op_id, exc.__class__.__name__)


#: how long the cache remembers which worker holds an operation's outcome (seconds)
HELD_NOTE_S = 7 * 86400


def held_by(op_id: Any) -> str:
    """The worker that said it holds ``op_id``'s outcome for the database, or ``""`` (sync; never
    raises)."""
    from django.core.cache import caches

    try:
        return str(caches[conf.get("BINDING_CACHE")].get(_held_key(op_id)) or "")
    except Exception:  # noqa: BLE001 -- unknown: the plain worker_lost
        return ""


def unreachable(exc: BaseException) -> bool:
    """Whether the database error ``exc`` says the database did not answer -- an outage, waited
    for as long as it takes -- rather than gave an answer: a lock wait that ran out (SQLite's
    "database is locked" after its busy timeout, PostgreSQL's ``lock_timeout``), a missing table, a
    constraint, a programming error. An answer is never waited for: retrying it forever would be a
    writer that never stops contending for the database (on SQLite, for its one write lock)."""
    from django.db import InterfaceError, OperationalError, connections, router

    from ..audit.chain import is_lock_wait

    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    conn = connections[router.db_for_write(Operation)]
    if isinstance(exc, OperationalError) and is_lock_wait(conn, exc):
        return False
    return not (conn.vendor == "sqlite" and str(exc).startswith("no such "))  # a table, a column: an answer


def _fresh_connection(op_id: Any) -> None:
    """Give back a connection the database may have broken and read the operation's status on a
    fresh one (sync; one query). Raises django.db.DatabaseError while the database is down."""
    close_old_connections()
    Operation.objects.filter(pk=op_id).values_list("status", flat=True).first()


async def database_back(op_id: Any, *, hold: bool = True) -> None:
    """Return once the database answers (a status read on a fresh connection), however long it
    takes: before a call's outcome is written (the process's shared sync-thread connection may
    have been broken during the call, and a broken one is never reconnected by itself).

    ``hold``: the caller holds a call's outcome meanwhile (counted, capped). Pauses double from
    0.2 s up to 2 s between attempts. Only an outage is waited for (:func:`unreachable`); an error
    the database answered is raised at once.

    Raises:
        HoldFull: the database is down and this worker already holds ``MAX_HELD_OUTCOMES``.
        django.db.DatabaseError: the database answered with an error (not an outage).
    """
    from django.db import DatabaseError

    key, started = str(op_id), time.monotonic()
    hold_s = float(conf.get("OUTCOME_HOLD_S"))
    pause, waiting, escalated = 0.2, False, False
    try:
        while True:
            try:
                await sync_to_async(_fresh_connection)(op_id)
            except DatabaseError as exc:
                if not unreachable(exc):
                    raise
                if not waiting:
                    waiting = True
                    if hold and len(_held) >= int(conf.get("MAX_HELD_OUTCOMES")):
                        metrics.OUTCOMES_NOT_KEPT.inc()
                        logger.error("operation %s: the call ended while the database is unreachable and this worker "
                                     "already holds %d outcomes (MAX_HELD_OUTCOMES); this one is not kept", op_id,
                                     len(_held))
                        raise HoldFull() from None
                    if hold:
                        _held.add(key)
                        metrics.OUTCOMES_HELD.inc()
                        await sync_to_async(_note_held, thread_sensitive=False)(op_id, True)
                    logger.warning("operation %s: the database is unreachable (%s); %s until it answers again "
                                   "(%d held by this worker)", op_id, exc.__class__.__name__,
                                   "the call's outcome is held" if hold else "the operation waits", len(_held))
                elif not escalated and time.monotonic() - started >= hold_s:
                    escalated = True
                    logger.error("operation %s: the database has not answered for %ss; still waiting for it "
                                 "(%d outcomes held by this worker)", op_id, hold_s, len(_held))
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            if waiting:
                logger.warning("operation %s: the database answers again after %.1fs; the outcome is written now",
                               op_id, time.monotonic() - started)
            return
    finally:
        if key in _held and waiting and hold:
            _held.discard(key)
            metrics.OUTCOMES_HELD.dec()
            await sync_to_async(_note_held, thread_sensitive=False)(op_id, False)


async def mark_failed(op_id: Any, code: str, message: str) -> None:
    """End the operation ``failed`` (``code``, ``message``) once the database answers, however
    long an outage takes (:func:`database_back`, not counted as a held outcome); an operation that
    has ended meanwhile is left as it is. An error the database answers (:func:`unreachable` is
    false: a lock wait that ran out, a constraint) is logged and not retried: the row is then left
    to this worker's own check (:mod:`.untracked`) and ``mrtr_reconcile``. Never raises (a bug is
    logged)."""
    from django.db import DatabaseError

    from .runtime import finish_operation, load_operation

    while True:
        try:
            await database_back(op_id, hold=False)
            op = await load_operation(op_id)
            await finish_operation(op, Operation.Status.FAILED, code=code, message=message)
            return
        except DatabaseError as exc:
            if not unreachable(exc):
                logger.error("operation %s was not marked failed: the database answered %s; its worker's check "
                             "or mrtr_reconcile ends it", op_id, exc.__class__.__name__)
                return
            logger.warning("operation %s: the database failed as it was marked failed (%s); waiting for it",
                           op_id, exc.__class__.__name__)
        except Exception:  # noqa: BLE001 -- a bug: logged, never an endless loop
            logger.exception("operation %s could not be marked failed", op_id)
            return
