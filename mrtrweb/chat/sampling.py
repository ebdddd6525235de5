"""Sampling with the tenant's model (issue 32, item 5): a sampling provider for the existing hook
(``MRTRWEB["SAMPLING_PROVIDER"] = "mrtrweb.chat.sampling.ModelDraftsReply"``,
:mod:`mrtrweb.consent.sampling`).

Nothing changes in who decides: a tenant admin still allows sampling per server, the card shows the
server's request and needs "I approve this sampling request", and Accept leads to the review. With
this provider the reply under review is **drafted by the tenant's model** (the provider and model of
:mod:`.choice`), unless the person wrote their own in the card's optional field; Send sends the
reviewed reply, Change brings the card back (to write one). The model is given the request's
system prompt and the text of its messages only (other content named), bounded by
``MODEL_CONTEXT_CHARS``, and no tools; never a ``requestState``, an answer or a token.

A provider failure raises: the card says the sampling provider could not answer and nothing is sent.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.utils.translation import gettext_lazy as _

from .. import conf
from . import choice


def _text(content: Any) -> str:
    blocks = content if isinstance(content, list) else [content]
    parts = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict):
            parts.append(f"[{str(block.get('type', 'unknown'))[:20]} content not included]")
    return "\n".join(parts)


def messages_for(request_params: dict[str, Any]) -> list[dict[str, Any]]:
    """The sampling request as chat-completions messages, bounded by ``MODEL_CONTEXT_CHARS``."""
    budget = int(conf.get("MODEL_CONTEXT_CHARS"))
    out: list[dict[str, Any]] = []
    system = request_params.get("systemPrompt")
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system[:budget]})
        budget -= len(out[0]["content"])
    listed = request_params.get("messages") if isinstance(request_params.get("messages"), list) else []
    for message in listed[-100:]:
        if not isinstance(message, dict) or budget <= 0:
            continue
        role = "assistant" if message.get("role") == "assistant" else "user"
        text = _text(message.get("content"))[:budget]
        budget -= len(text)
        out.append({"role": role, "content": text})
    return out


class ModelDraftsReply:
    """The reply drafted by the tenant's model, reviewed by the person before it goes."""

    def form_fields(self) -> dict[str, forms.Field]:
        return {"reply": forms.CharField(
            label=_("Your own reply (leave empty: the organisation's model drafts it, for you to review)"),
            required=False, strip=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=20000)}

    async def provide(self, request_params: dict[str, Any], *, user: Any, operation: Any,
                      form_data: dict[str, Any]) -> dict[str, Any]:
        written = form_data.get("reply") or ""
        if written.strip():
            return {"role": "assistant", "content": {"type": "text", "text": written}, "model": "human",
                    "stopReason": "endTurn"}
        provider = await sync_to_async(choice.provider_of)(operation.tenant_id)

        async def ignore(piece: str) -> None:
            pass

        reply = await provider.reply(messages_for(request_params), [], ignore)
        return {"role": "assistant", "content": {"type": "text", "text": reply.text}, "model": provider.model[:200],
                "stopReason": "maxTokens" if reply.cut else "endTurn"}
