"""Logging without flooding: one line per key and period (no Django: the MCP client uses it, and
:mod:`mrtrweb.runtime.outage` re-exports it for the Django edge)."""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["LogLimiter"]


class LogLimiter:
    """At most one line per key every ``every_s`` seconds (thread-safe).

    ``warning(key, msg, *args)`` (or ``info``) logs ``msg % args`` when ``key`` was not logged in
    the last ``every_s`` seconds, adding ``" (N more like it since the last one)"`` when lines were
    held back; it returns whether it logged. Keys are short fixed strings (a category, a server's
    origin; never a secret)."""

    def __init__(self, logger: logging.Logger, every_s: float = 60.0) -> None:
        self.logger = logger
        self.every_s = every_s
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}  # key -> (monotonic time logged, held back)

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self._log(logging.WARNING, key, msg, *args)

    def info(self, key: str, msg: str, *args: object) -> bool:
        return self._log(logging.INFO, key, msg, *args)

    def _log(self, level: int, key: str, msg: str, *args: object) -> bool:
        now = time.monotonic()
        with self._lock:
            last, held = self._last.get(key, (float("-inf"), 0))
            if now - last < self.every_s:
                self._last[key] = (last, held + 1)
                return False
            self._last[key] = (now, 0)
            if len(self._last) > 1000:  # keys are categories; never grow without bound anyway
                self._last = {key: (now, 0)}
        if held:
            msg += " (%d more like it since the last one)"
            args = (*args, held)
        self.logger.log(level, msg, *args)
        return True

    def reset(self) -> None:
        """Forget what was logged (tests)."""
        with self._lock:
            self._last.clear()
