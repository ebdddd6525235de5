"""Graceful shutdown of a worker (issue 14): drain, then exit.

Contract (built out by the drain work; the flag is what other modules read):

* :func:`is_draining` -- whether this worker process is draining: readiness answers 503
  (:mod:`mrtrweb.health`) and new operations are refused (503, nothing sent); answers to rounds
  are still taken (an answer the person gave is never refused for a restart).
* :func:`begin_draining` -- set the flag (idempotent).
"""

from __future__ import annotations

import threading

_draining = threading.Event()


def is_draining() -> bool:
    """Whether this worker process is draining (it will exit once its calls have finished)."""
    return _draining.is_set()


def begin_draining() -> None:
    """Mark this worker as draining (idempotent)."""
    _draining.set()


def reset() -> None:
    """Forget the flag (tests)."""
    _draining.clear()
