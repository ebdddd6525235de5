"""Clocks for the gate: wall time in production, a manual clock for verification runs."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (float)."""


class SystemClock:
    """The real clock (``time.time``)."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that only moves when told to (``advance``); used by ``mrtr_verify``'s ``wait_s``."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += float(seconds)
