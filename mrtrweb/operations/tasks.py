"""Tools that run only as tasks: ``execution.taskSupport`` (MCP 2025-11-25, ``basic/utilities/tasks``,
"Tool-Level Negotiation"; the tasks extension ``io.modelcontextprotocol/tasks`` of SEP-2663 on
2026-07-28).

A tool listed with ``execution.taskSupport: "required"`` may only be called task-augmented (the
2025-11-25 ``task`` parameter; on 2026-07-28 a client declaring the tasks extension): a plain
``tools/call`` is refused by the server (the TypeScript SDK answers ``-32601`` "requires task
augmentation"; SEP-2663 servers ``-32021``). This client does not run task-augmented calls yet, so
such a tool is **never called**: the tool page says it needs tasks and why it is not offered (and
refuses a posted call, nothing sent), the server page marks it, and the headless client reports
:data:`TASK_REQUIRED` without starting an operation (``mrtr_client`` exit 10). ``"optional"`` and
``"forbidden"`` (or no ``execution``) tools are called plainly, as the specification allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: the outcome code of a call refused here because its tool runs only as a task (nothing sent)
TASK_REQUIRED: Final = "task_required"
#: what the person (page) or the caller (headless) reads
TASK_REQUIRED_MESSAGE: Final = (
    'This tool runs only as a task (the server lists it with execution.taskSupport "required"): the server refuses '
    "a plain call, and this client does not run task-augmented calls yet, so it is not offered. Nothing was sent.")


def task_support(tool: Any) -> str:
    """A listed tool's ``execution.taskSupport``: ``"required"``, ``"optional"`` or ``"forbidden"``
    (also for an absent or unknown value: the specification's default is ``"forbidden"``).

    Args:
        tool: the tool as listed (a raw ``tools/list`` item, any JSON value)."""
    execution = tool.get("execution") if isinstance(tool, Mapping) else None
    value = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    return value if value in ("required", "optional") else "forbidden"


def requires_task(tool: Any) -> bool:
    """Whether the listed tool may only be called task-augmented (never called plainly here)."""
    return task_support(tool) == "required"
