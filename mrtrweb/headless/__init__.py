"""Headless operations: the browser's code path driven by a machine (``mrtr_client``,
the conformance suite, another service).

* :mod:`.client` -- :func:`arun` / :func:`run` with a scripted :class:`ConsentPolicy`.
* :mod:`.policy` -- the :class:`ConsentPolicy` and the outcome / error shapes (re-exported by :mod:`.client`).
* :mod:`.auth` -- authorization without a person.
* :mod:`.conformance` -- the conformance run's setup.
* :mod:`.arguments` -- ``--each``'s arguments synthesized from an input schema.

The documented names (``mrtrweb.headless.arun``, ``run``, ``ConsentPolicy``...) are re-exported
here, lazily.

May import: operations, consent, servers, runtime, models, gate, mcp, authz, mcpapps; imported only by
management commands.
"""

from __future__ import annotations

import importlib
from typing import Any

#: re-exported from :mod:`.client` (the documented ``mrtrweb.headless.<name>`` paths)
__all__ = [
    "ACCEPT_DEFAULTS",
    "ANSWERS",
    "CANCEL",
    "DECLINE",
    "TASK_REQUIRED",
    "APP_ONLY",
    "TIMEOUT",
    "ConsentPolicy",
    "HeadlessError",
    "HeadlessOutcome",
    "arun",
    "run",
    "close_connections",
    "default_content",
    "server_for",
    "operation_name",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".client", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
