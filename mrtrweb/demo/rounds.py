"""How the demo server's tools (:mod:`.tools`) ask and read ``input_required`` rounds.

:func:`ask` builds an ``InputRequiredResult`` whose ``requestState`` is compact JSON (the SDK seals
it); :func:`read_state` reads it back on the retry (``{}`` on round one or when unreadable);
:func:`response_to` gives ``(action, content)`` of one input response. The field readers raise
:class:`BadAnswer` (a ``ValueError``) when an answer does not satisfy the requested schema; a tool
reports that as its text result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver import Context
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

__all__ = ["BadAnswer", "ask", "bool_field", "form_request", "int_field", "read_state", "refused", "response_to",
           "str_field"]


def form_request(message: str, schema: dict[str, Any]) -> ElicitRequest:
    """A form-mode elicitation request asking ``message`` with ``schema``."""
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def ask(requests: dict[str, ElicitRequest] | None, state: dict[str, Any]) -> InputRequiredResult:
    """An ``input_required`` round; ``state`` is minted as compact JSON (the SDK seals it)."""
    return InputRequiredResult(input_requests=requests, request_state=json.dumps(state, separators=(",", ":")))


def read_state(ctx: Context) -> dict[str, Any]:
    """The plaintext state this server minted for the previous round, or ``{}`` on round one."""
    raw = ctx.request_state
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def response_to(ctx: Context, key: str) -> tuple[str, dict[str, Any]] | None:
    """``(action, content)`` of the client's response under ``key``, or ``None`` when absent."""
    responses = ctx.input_responses or {}
    response = responses.get(key)
    if response is None:
        return None
    action = getattr(response, "action", None)
    if action not in ("accept", "decline", "cancel"):
        return None
    content = getattr(response, "content", None)
    return action, dict(content) if isinstance(content, Mapping) else {}


def refused(what: str, action: str) -> str:
    return f"{what} {'declined' if action == 'decline' else 'cancelled'} by the user; nothing was done."


class BadAnswer(ValueError):
    """A response that does not satisfy the requested schema (reported as a tool error)."""


def str_field(content: Mapping[str, Any], name: str, *, required: bool) -> str | None:
    value = content.get(name)
    if value is None:
        if required:
            raise BadAnswer(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise BadAnswer(f"{name} must be a string")
    return value


def int_field(content: Mapping[str, Any], name: str, lo: int, hi: int, *, default: int | None = None) -> int:
    value = content.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise BadAnswer(f"{name} must be an integer")
    if not lo <= value <= hi:
        raise BadAnswer(f"{name} must be between {lo} and {hi}")
    return int(value)


def bool_field(content: Mapping[str, Any], name: str) -> bool:
    value = content.get(name)
    if not isinstance(value, bool):
        raise BadAnswer(f"{name} must be true or false")
    return value
