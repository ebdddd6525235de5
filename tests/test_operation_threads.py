"""The operation threads (``MRTRWEB["OPERATION_THREADS"]``, mrtrweb.operations.runtime._spawn):
different operations' database hops run side by side, one operation's hops stay on its one
thread, and the setting is checked."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured

from mrtrweb import conf
from mrtrweb.operations import runtime


@pytest.fixture
def threads(settings):
    """Set OPERATION_THREADS for one test (the process's threads made anew before and after)."""
    def use(n):
        settings.MRTRWEB = {**(getattr(settings, "MRTRWEB", None) or {}), "OPERATION_THREADS": n}
        runtime.reset_threads()
    yield use
    runtime.reset_threads()


async def test_two_operations_run_their_hops_side_by_side_each_on_its_own_thread(threads):
    threads(2)
    meet = threading.Barrier(2, timeout=5)  # both first hops must be in their threads at once
    seen: dict[str, list[int]] = {"a": [], "b": []}

    def hop(name: str, wait: bool) -> None:
        seen[name].append(threading.get_ident())
        if wait:
            meet.wait()  # BrokenBarrierError after 5 s when the hops queue on one thread

    async def operation(name: str) -> None:
        await sync_to_async(hop)(name, True)
        await sync_to_async(hop)(name, False)
        await sync_to_async(hop)(name, False)

    await asyncio.wait_for(asyncio.gather(runtime._spawn(operation("a")), runtime._spawn(operation("b"))), 10)
    assert len(set(seen["a"])) == 1 and len(set(seen["b"])) == 1, seen  # one thread per task
    assert seen["a"][0] != seen["b"][0]
    assert threading.get_ident() not in seen["a"] + seen["b"]


async def test_with_one_thread_the_operations_hops_queue(threads):
    threads(1)
    meet = threading.Barrier(2, timeout=0.5)
    broken = []

    def hop() -> None:
        try:
            meet.wait()
        except threading.BrokenBarrierError:
            broken.append(threading.get_ident())

    async def operation() -> None:
        await sync_to_async(hop)()

    await asyncio.wait_for(asyncio.gather(runtime._spawn(operation()), runtime._spawn(operation())), 10)
    assert len(broken) == 2 and len(set(broken)) == 1  # one after the other, on the one thread


def test_the_default_is_one_thread_on_sqlite_and_four_otherwise(settings):
    from django.db import connections

    settings.MRTRWEB = {}
    assert conf.get("OPERATION_THREADS") is None
    assert runtime.operation_threads() == (1 if connections["default"].vendor == "sqlite" else 4)
    settings.MRTRWEB = {"OPERATION_THREADS": 7}
    assert runtime.operation_threads() == 7


@pytest.mark.parametrize("value", [0, 65, -1, True, 2.5, "4", [4]])
def test_a_bad_thread_count_is_refused(settings, value):
    settings.MRTRWEB = {"OPERATION_THREADS": value}
    with pytest.raises(ImproperlyConfigured, match="OPERATION_THREADS"):
        conf.get("OPERATION_THREADS")


def test_the_thread_count_from_the_environment():
    assert conf.from_environ({"MRTRWEB_OPERATION_THREADS": " 3 "}) == {"OPERATION_THREADS": 3}
    assert conf.from_environ({"MRTRWEB_OPERATION_THREADS": ""}) == {}
    with pytest.raises(ImproperlyConfigured, match="MRTRWEB_OPERATION_THREADS must be a whole number"):
        conf.from_environ({"MRTRWEB_OPERATION_THREADS": "four"})


async def test_a_finished_tasks_thread_serves_the_next_task(threads):
    """The threads are the process's: a task started after another ended reuses them (no thread
    per operation)."""
    threads(2)
    idents = set()

    async def operation() -> None:
        idents.add(await sync_to_async(threading.get_ident)())

    for _ in range(6):
        await runtime._spawn(operation())
    assert len(idents) == 2
