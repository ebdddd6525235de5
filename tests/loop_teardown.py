"""A test's event loop is closed within :data:`TEARDOWN_S` seconds, whatever its tasks do.

pytest-asyncio closes each test's loop with ``asyncio.Runner.close``, which cancels the tasks
still running and waits for them without a bound: a task that does not end when cancelled held
a whole run for ever (ci41, session 24: run B stopped for 15 minutes in the teardown of
``tests/live/test_nav_pending.py::test_watching_twice_costs_nothing_more``, the loop waking only
for a 30 s Redis socket timeout; not reproduced in a rerun). Here the wait is bounded: tasks still
running :data:`TEARDOWN_S` seconds after their cancellation are left, and their stacks are written
to ``var/test-logs/stuck-tasks.txt`` (``./dev test`` prints that file at the end), so such a task
is found -- and the run goes on. Every other part of the close is the standard library's: a
cancelled task's exception is reported to the loop's exception handler as before.
"""

from __future__ import annotations

import asyncio
import asyncio.runners
import io
import os
import time
from pathlib import Path

#: seconds a test's loop waits for its cancelled tasks to end before it leaves them
TEARDOWN_S = 30.0
#: where the stacks of tasks left behind are written
STUCK_FILE = Path(__file__).resolve().parents[1] / "var" / "test-logs" / "stuck-tasks.txt"


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """``asyncio.runners._cancel_all_tasks`` with the wait bounded by :data:`TEARDOWN_S`."""
    to_cancel = asyncio.all_tasks(loop)
    if not to_cancel:
        return
    for task in to_cancel:
        task.cancel()
    done, pending = loop.run_until_complete(asyncio.wait(to_cancel, timeout=TEARDOWN_S))
    if pending:
        _report(pending)
    for task in done:
        if task.cancelled():
            continue
        if task.exception() is not None:
            loop.call_exception_handler({"message": "unhandled exception during asyncio.run() shutdown",
                                         "exception": task.exception(), "task": task})


def _report(pending: set[asyncio.Task]) -> None:
    lines = [f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {os.environ.get('PYTEST_CURRENT_TEST', '?')}: "
             f"{len(pending)} task(s) still running {TEARDOWN_S:g} s after they were cancelled; left behind"]
    for task in pending:
        stack = io.StringIO()
        task.print_stack(file=stack, limit=40)
        lines.append(f"--- {task.get_name()}\n{stack.getvalue()}")
    from tests.lock_watch import thread_stacks  # what those tasks wait on runs in a thread, often

    lines.append(f"the threads of this process:\n{thread_stacks()}")
    STUCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with STUCK_FILE.open("a") as out:
        out.write("\n".join(lines) + "\n")


_shutdown_default_executor = asyncio.BaseEventLoop.shutdown_default_executor


async def _bounded_shutdown_default_executor(self, *args, **kwargs) -> None:
    """``loop.shutdown_default_executor`` waiting at most :data:`TEARDOWN_S` for the executor's
    threads (Python 3.11 joins them without a bound: a thread blocked for ever -- a
    ``sync_to_async(thread_sensitive=False)`` call whose task was left above -- held the close for
    ever); the threads' stacks are written as the tasks' are."""
    inner = asyncio.ensure_future(_shutdown_default_executor(self, *args, **kwargs))
    done, _ = await asyncio.wait({inner}, timeout=TEARDOWN_S)
    if not done:
        inner._log_destroy_pending = False  # left on purpose: reported below, not as "destroyed but pending"
        from tests.lock_watch import thread_stacks

        STUCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        with STUCK_FILE.open("a") as out:
            out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {os.environ.get('PYTEST_CURRENT_TEST', '?')}: "
                      f"the loop's default executor still had a thread running {TEARDOWN_S:g} s after its "
                      f"shutdown began; left behind\nthe threads of this process:\n{thread_stacks()}\n")
        return
    inner.result()


def install() -> None:
    """Bound every loop close of this test process (called by ``tests/conftest.py``)."""
    asyncio.runners._cancel_all_tasks = _cancel_all_tasks  # type: ignore[attr-defined]
    asyncio.BaseEventLoop.shutdown_default_executor = _bounded_shutdown_default_executor  # type: ignore[method-assign]
