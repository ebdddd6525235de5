"""A ``completion/complete`` request's params and its answer's values (MCP 2025-11-25 and
2026-07-28 server/utilities/completion: ``ref`` is ``{"type": "ref/prompt", "name"}`` or
``{"type": "ref/resource", "uri"}``; ``argument`` ``{"name", "value"}``; ``context.arguments``
the values already given; the result's ``completion.values`` at most 100 strings, ``hasMore``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..text import display

__all__ = ["MAX_CONTEXT", "MAX_SHOWN_CHARS", "MAX_VALUES", "MAX_VALUE_CHARS", "declares_completions", "params_for",
           "values_of"]

#: the longest value asked about, and the longest context value sent (characters)
MAX_VALUE_CHARS: Final = 200
#: the most other values sent as context
MAX_CONTEXT: Final = 20
#: the most suggestions shown (the protocol's own bound)
MAX_VALUES: Final = 100
#: the longest suggestion shown (characters): a longer one is left out, never cut (cut, it would be another value)
MAX_SHOWN_CHARS: Final = 200


def declares_completions(capabilities: Any) -> bool:
    """Whether a server's capabilities (as JSON) declare ``completions``: nothing is asked otherwise."""
    return isinstance(capabilities, dict) and isinstance(capabilities.get("completions"), dict)


def params_for(kind: str, ref: str, name: str, value: str, context: Mapping[str, str]) -> dict[str, Any]:
    """The params of one ask: ``kind`` ``"prompt"`` (``ref`` the prompt's name) or ``"template"``
    (``ref`` the URI template); ``context`` the other non-empty values (bounded here).

    Raises:
        ValueError: ``value`` longer than :data:`MAX_VALUE_CHARS`, or another ``kind``."""
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError("value too long")
    if kind == "prompt":
        reference = {"type": "ref/prompt", "name": ref}
    elif kind == "template":
        reference = {"type": "ref/resource", "uri": ref}
    else:
        raise ValueError("kind must be prompt or template")
    params: dict[str, Any] = {"ref": reference, "argument": {"name": name, "value": value}}
    others = {k: v for k, v in list(context.items())[:MAX_CONTEXT]
              if k != name and isinstance(v, str) and v and len(v) <= MAX_VALUE_CHARS}
    if others:
        params["context"] = {"arguments": others}
    return params


def values_of(raw: Any) -> tuple[list[str], bool, int]:
    """The suggestions of a raw result: ``(values, has_more, dropped)``. Strings only, the first
    :data:`MAX_VALUES`, none longer than :data:`MAX_SHOWN_CHARS`, each once, made visible
    (:func:`~mrtrweb.text.display.shown`: bidi and control characters as markers); ``dropped``
    counts what was left out. A malformed result is no suggestion (``([], False, 0)``)."""
    completion = raw.get("completion") if isinstance(raw, dict) else None
    values = completion.get("values") if isinstance(completion, dict) else None
    if not isinstance(values, list):
        return [], False, 0
    shown: list[str] = []
    dropped = 0
    for examined, value in enumerate(values):
        if len(shown) >= MAX_VALUES:  # the rest is not looked at (a million values: on the event loop)
            dropped += len(values) - examined
            break
        if not isinstance(value, str) or not value or len(value) > MAX_SHOWN_CHARS:
            dropped += 1
            continue
        text = display.shown(value)
        if text not in shown:
            shown.append(text)
    has_more = completion.get("hasMore") is True or len(values) > MAX_VALUES
    return shown, has_more, dropped
