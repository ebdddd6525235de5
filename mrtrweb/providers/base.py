"""The provider interface: a model's turn from the conversation so far and the tools offered.

Messages are in the chat-completions shape, the lingua franca of model endpoints: a list of
``{"role": "system" | "user" | "assistant" | "tool", "content": str, ...}``, an assistant message
with ``tool_calls`` (``[{"id", "type": "function", "function": {"name", "arguments"}}]``), a tool
message with ``tool_call_id``. A provider never changes them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Awaitable, Callable, Protocol


#: the most tool calls one reply may carry (parallel calls); a reply with more is cut like one past
#: ``MODEL_REPLY_CHARS`` (its calls dropped): a call costs a proposal and its audit events, and a
#: call's name alone is a few characters of the reply
MAX_TOOL_CALLS = 64


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model: ``name`` (namespaced, :mod:`mrtrweb.chat.tools`), its
    description and its JSON Schema ``parameters`` (the tool's ``inputSchema``)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def as_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One call the model proposes: its ``id`` (the model's), the ``name`` it gave and its
    ``arguments`` as the text it wrote (JSON, to be checked: a model may write anything)."""

    id: str
    name: str
    arguments: str


@dataclasses.dataclass(frozen=True)
class Reply:
    """A model's reply: its text, the calls it proposes (in its order), and ``cut`` when the reply
    was stopped at ``MODEL_REPLY_CHARS`` or at more than :data:`MAX_TOOL_CALLS` calls (the text
    kept up to there, the calls dropped)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    cut: bool = False


class ProviderError(Exception):
    """A provider that failed: ``code`` one of :data:`CODES` (stable), ``reason`` a short English
    sentence (no secret, no endpoint key; safe to log). The person reads a message by code
    (:mod:`mrtrweb.chat.messages`)."""

    CODES = ("provider_unavailable", "provider_rate_limited", "provider_timeout", "provider_refused",
             "provider_error", "provider_malformed", "provider_url_refused", "provider_not_configured")

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code if code in self.CODES else "provider_error"
        self.reason = reason


#: called with each piece of text as it streams (for the page); awaited
OnText = Callable[[str], Awaitable[None]]


class Provider(Protocol):
    """What answers a turn. ``kind``: ``openai`` or ``demo``; ``name``: the deployer's name of the
    provider; ``model``: the model's name at the endpoint."""

    kind: str
    name: str
    model: str

    async def reply(self, messages: list[dict[str, Any]], tools: list[ToolSpec], on_text: OnText) -> Reply:
        """The model's reply to ``messages`` with ``tools`` offered, its text streamed to ``on_text``.

        Raises:
            ProviderError: unavailable, rate-limited, timed out (``MODEL_REPLY_TIMEOUT_S`` for the
                whole reply: a stream that never ends is cut), refused by the outbound rules, or an
                answer that is not a chat completion.
        """
        ...
