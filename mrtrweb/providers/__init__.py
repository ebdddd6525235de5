"""Model providers (issue 32, item 1): what answers a conversation's turn -- a language model
behind an OpenAI-compatible chat-completions endpoint, or the scripted demo model.

Owns: the provider interface (:mod:`.base`: :class:`Provider`, :class:`ToolSpec`, :class:`ToolCall`,
:class:`Reply`, :class:`ProviderError`), the OpenAI-compatible provider through the official
``openai`` SDK (:mod:`.openai_compat`: streaming, tool calls, parallel tool calls; its HTTP goes
through the one outbound guard of :mod:`mrtrweb.mcp.outbound`, the endpoint checked by
``MRTRWEB["MODEL_URL_POLICY"]``), the scripted demo model (:mod:`.scripted`: not a language model),
and the deployer's ``MRTRWEB["MODEL_PROVIDERS"]`` read and checked (:mod:`.config`, :mod:`.policy`), and the provider a tenant's choice names (:mod:`.factory`).

A provider sees only what :mod:`mrtrweb.chat` gives it: the conversation's text and the final
results of calls, marked as data; never a round, a ``requestState``, an answer's values or a token.

May import: :mod:`mrtrweb.conf`, :mod:`mrtrweb.mcp` (the outbound guard and URL policy), ``openai``.
No Django models, nothing above.
"""

from __future__ import annotations

from .base import Provider, ProviderError, Reply, ToolCall, ToolSpec
from .config import DEMO, ProviderConfig, configured, problems
from .factory import provider_for

__all__ = ["DEMO", "Provider", "ProviderConfig", "ProviderError", "Reply", "ToolCall", "ToolSpec", "configured",
           "problems", "provider_for"]
