"""tests/loop_teardown.py: a test's loop closes within its bound even when a task will not end on
cancellation (ci41 held run B for 15 minutes that way), the task's stack written for whoever reads
the run; tasks that end when cancelled close as the standard library closes them."""

from __future__ import annotations

import asyncio
import time

from tests import loop_teardown


def test_a_task_that_ignores_cancellation_is_left_after_the_bound_and_reported(monkeypatch, tmp_path):
    stuck_file = tmp_path / "stuck-tasks.txt"
    monkeypatch.setattr(loop_teardown, "TEARDOWN_S", 0.3)
    monkeypatch.setattr(loop_teardown, "STUCK_FILE", stuck_file)
    loop_teardown.install()
    assert asyncio.runners._cancel_all_tasks is loop_teardown._cancel_all_tasks

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                continue  # will not end

    async def polite() -> None:
        await asyncio.sleep(30)

    async def main() -> None:
        asyncio.get_running_loop().create_task(stubborn(), name="stubborn-task")
        asyncio.get_running_loop().create_task(polite(), name="polite-task")
        await asyncio.sleep(0)

    runner = asyncio.Runner()
    runner.run(main())
    t0 = time.monotonic()
    runner.close()
    assert time.monotonic() - t0 < 5
    report = stuck_file.read_text()
    assert "1 task(s) still running" in report and "stubborn-task" in report and "polite-task" not in report
    assert "in stubborn" in report  # its stack


def test_tasks_that_end_on_cancellation_close_at_once_and_report_nothing(monkeypatch, tmp_path):
    stuck_file = tmp_path / "stuck-tasks.txt"
    monkeypatch.setattr(loop_teardown, "STUCK_FILE", stuck_file)
    loop_teardown.install()
    seen: list[str] = []

    async def polite() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(polite())
        await asyncio.sleep(0)

    runner = asyncio.Runner()
    runner.run(main())
    t0 = time.monotonic()
    runner.close()
    assert time.monotonic() - t0 < 1 and seen == ["cancelled"] and not stuck_file.exists()


def test_a_default_executor_thread_that_never_ends_holds_the_close_only_for_the_bound(monkeypatch, tmp_path):
    import threading

    stuck_file = tmp_path / "stuck-tasks.txt"
    monkeypatch.setattr(loop_teardown, "TEARDOWN_S", 0.3)
    monkeypatch.setattr(loop_teardown, "STUCK_FILE", stuck_file)
    loop_teardown.install()
    release = threading.Event()

    def blocked_for_ever() -> None:
        release.wait(30)

    async def main() -> None:
        asyncio.get_running_loop().run_in_executor(None, blocked_for_ever)
        await asyncio.sleep(0.05)

    runner = asyncio.Runner()
    runner.run(main())
    t0 = time.monotonic()
    try:
        runner.close()
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
    report = stuck_file.read_text()
    assert "default executor still had a thread running" in report and "in blocked_for_ever" in report
