"""Where the product's heavy work ran: on the event loop's thread or off it (issue 25).

A test that once bounded the wall-clock gap of an event-loop heartbeat (flaky on a loaded machine)
now wraps the product function that does the heavy work for its hostile input with a :class:`Spy`
and asserts that every call ran off the loop: in a thread with no running asyncio loop, and not
on the test's own (loop) thread. Deterministic: it fails as soon as the work is called on the
loop, however fast the machine. How long the loop actually stalls is measured by the benchmark
(``python -m mrtrweb.bench --only loopstall``), not here.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from dataclasses import dataclass, field
from typing import Any


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass
class Spy:
    """A wrapper of one product function recording, per call, whether it ran on the event loop."""

    name: str
    loop_thread: int
    #: one entry per call: True when it ran on a thread with a running loop or on the loop's thread
    on_loop: list[bool] = field(default_factory=list)
    #: the arguments of each call (for assertions on them, e.g. a timeout given)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    #: what each call returned, or the exception it raised
    outcomes: list[Any] = field(default_factory=list)

    def assert_ran_off_the_loop(self) -> None:
        assert self.on_loop, f"{self.name} was never called"
        assert not any(self.on_loop), f"{self.name} ran on the event loop ({sum(self.on_loop)} of {len(self.on_loop)})"


def spy(monkeypatch: Any, owner: Any, name: str) -> Spy:
    """Replace ``owner.name`` (a module's function, or a class's method) with a recording wrapper.

    Call it from the async test itself: the thread it runs on is the event loop's."""
    asyncio.get_running_loop()  # raises outside the loop: the recorded thread must be the loop's
    record = Spy(f"{getattr(owner, '__name__', owner)}.{name}", threading.get_ident())
    real = getattr(owner, name)

    @functools.wraps(real)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        record.on_loop.append(_loop_running() or threading.get_ident() == record.loop_thread)
        record.calls.append((args, kwargs))
        try:
            outcome = real(*args, **kwargs)
        except BaseException as exc:
            record.outcomes.append(exc)
            raise
        record.outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(owner, name, wrapper)
    return record
