"""Sampling and roots: the deprecated exception, isolated and explicit (AID-H-028.008).

A round continuing an operation is never taken as permission for model sampling or for the
client's roots. The gate refuses ``sampling/createMessage`` and ``roots/list`` unless a tenant
admin allowed that method for the server (``McpServer.allow_sampling`` / ``allow_roots``); even
then, each request is shown on the card and answered only on the person's Accept:

* ``roots/list`` is answered with the server's configured roots (shown on the card first);
* ``sampling/createMessage`` needs a ticked "I approve this sampling request" box per request, and
  is answered by the *sampling provider*: ``MRTRWEB["SAMPLING_PROVIDER"]``, the dotted path of an
  object (a class is instantiated without arguments) with a method, or of a callable,
  ``provide(request_params: dict, *, user, operation, form_data: dict) -> dict`` returning a
  ``CreateMessageResult`` (the gate validates it; an invalid one is refused and nothing is sent).
  A provider may add fields to the card with ``form_fields() -> {name: django.forms.Field}``; their
  cleaned values are its ``form_data``. The default, :class:`PersonWritesReply`, lets the person
  write the assistant's reply.

Declining or cancelling a card with such a request ends the operation (``denied``, reason
``deprecated_request_refused``) and no retry is sent.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from django import forms
from django.utils.module_loading import import_string
from django.utils.translation import gettext_lazy as _, gettext_noop

from .. import conf
from .jsonfields import BoundedJSONField
from .forms import refuse_lone_surrogates
from ..text.results import MAX_SHOWN_BLOCKS, MIN_MESSAGE_CHARS, ShownBudget, shown_text

#: the most model hints a sampling card shows
MAX_SHOWN_HINTS = 20

SAMPLING = "sampling/createMessage"
ROOTS = "roots/list"
DEPRECATED_KINDS = ("sampling", "roots")
#: the gate's code when a server asks for a deprecated (or unknown) client request it may not
UNAPPROVED = "unapproved_deprecated_client_request"
#: the gate's code when a sampling/roots answer is not a valid result
INVALID_ANSWER = "invalid_deprecated_response"

INVALID_ANSWER_MESSAGE = (gettext_noop("The answer to the server's sampling or roots request is not a valid result "
                          "(invalid_deprecated_response); nothing was sent. The round is still open."))
PROVIDER_FAILED_MESSAGE = gettext_noop("The sampling provider could not produce an answer; nothing was sent.")


class PersonWritesReply:
    """The default sampling provider: no model is called; the person writes the assistant's reply."""

    def form_fields(self) -> dict[str, forms.Field]:
        return {"reply": forms.CharField(
            label=_("Your reply (sent to the server as the assistant's message)"), strip=False,
            widget=forms.Textarea(attrs={"rows": 4}), max_length=20000)}

    def provide(self, request_params: dict[str, Any], *, user: Any, operation: Any,
                form_data: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": {"type": "text", "text": form_data.get("reply", "")},
                "model": "human", "stopReason": "endTurn"}


def get_provider() -> Any:
    """The configured sampling provider (an object with ``provide`` or a callable)."""
    spec = conf.get("SAMPLING_PROVIDER")
    obj = import_string(spec) if isinstance(spec, str) else spec
    if inspect.isclass(obj):
        obj = obj()
    if not callable(getattr(obj, "provide", None)) and not callable(obj):
        raise TypeError(f"MRTRWEB['SAMPLING_PROVIDER'] {spec!r} has no provide() and is not callable")
    return obj


def provider_fields(provider: Any) -> dict[str, forms.Field]:
    fields = getattr(provider, "form_fields", None)
    return dict(fields()) if callable(fields) else {}


async def provide(provider: Any, request_params: dict[str, Any], *, user: Any, operation: Any,
                  form_data: dict[str, Any]) -> Any:
    """Call the provider (sync providers run in a worker thread; async ones are awaited)."""
    from asgiref.sync import sync_to_async

    fn = getattr(provider, "provide", None) or provider
    if inspect.iscoroutinefunction(fn):
        return await fn(request_params, user=user, operation=operation, form_data=form_data)
    return await sync_to_async(fn)(request_params, user=user, operation=operation, form_data=form_data)


class SamplingForm(forms.Form):
    """One sampling request's part of the card: the required approval box and the provider's fields."""

    approve = forms.BooleanField(
        label=_("I approve this sampling request"), required=True,
        error_messages={"required": _("Tick “I approve this sampling request” to answer it, or choose Decline.")})

    def __init__(self, *args: Any, provider: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in provider_fields(provider).items():
            if name != "approve":
                self.fields[name] = field

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        refuse_lone_surrogates(self)  # the reply is sent to the server: UTF-8 only
        return cleaned

    def provider_data(self) -> dict[str, Any]:
        return {k: v for k, v in self.cleaned_data.items() if k != "approve"}


def sampling_forms(rnd: Any, data: Any = None) -> dict[str, SamplingForm]:
    """One :class:`SamplingForm` per sampling request of the round, prefixed ``in-<key>``."""
    keys = [key for key, view in rnd.requests.items() if view.kind == "sampling"]
    if not keys:
        return {}
    provider = get_provider()
    return {key: SamplingForm(data=data, prefix=f"in-{key}", provider=provider) for key in keys}


def _block_text(block: Any) -> dict[str, str]:
    """A content block for display: text as is, anything else summarized (never rendered)."""
    if not isinstance(block, dict):
        return {"summary": str(_("[unreadable content]"))}
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return {"text": shown_text(block["text"])}  # at most MAX_SHOWN_CHARS
    if kind in ("image", "audio"):
        size = len(block["data"]) if isinstance(block.get("data"), str) else 0
        return {"summary": str(_("[%(kind)s %(mime)s, %(size)s base64 characters]")
                               % {"kind": kind, "mime": block.get("mimeType", "?"), "size": size})}
    if kind == "tool_use":
        return {"summary": str(_("[tool use: %(name)s]") % {"name": block.get("name", "?")})}
    if kind == "tool_result":
        return {"summary": str(_("[tool result for %(id)s]") % {"id": block.get("toolUseId", "?")})}
    if isinstance(kind, str):
        return {"summary": str(_("[%(kind)s content]") % {"kind": kind})}
    return {"summary": str(_("[unknown content]"))}


def sampling_view(params: Any) -> dict[str, Any]:
    """What the card shows of a ``sampling/createMessage`` request (server text: escape it)."""
    params = params if isinstance(params, dict) else {}
    messages = []
    # bounded whatever the server sends: at most MAX_SHOWN_BLOCKS messages and blocks, their text
    # sharing one budget of MAX_SHOWN_CHARS characters (mrtrweb.text.results)
    budget, listed = int(conf.get("MAX_SHOWN_CHARS")), params.get("messages")
    listed = listed if isinstance(listed, list) else []
    for message in listed[:MAX_SHOWN_BLOCKS]:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = []
        for block in (content if isinstance(content, list) else [content])[:MAX_SHOWN_BLOCKS]:
            shown = _block_text(block)
            if isinstance(block, dict) and "text" in shown:
                limit = max(budget, MIN_MESSAGE_CHARS)
                shown = {"text": shown_text(block["text"], limit)}
                budget -= min(len(block["text"]), limit)
            blocks.append(shown)
        messages.append({"role": str(message.get("role", "?"))[:100], "blocks": blocks})
    if len(listed) > MAX_SHOWN_BLOCKS:
        messages.append({"role": "…", "blocks": [{"summary": str(_("[%(n)d more messages not shown]")
                                                                  % {"n": len(listed) - MAX_SHOWN_BLOCKS})}]})
    prefs = params.get("modelPreferences") if isinstance(params.get("modelPreferences"), dict) else {}
    hints = [h.get("name") for h in prefs.get("hints") or [] if isinstance(h, dict) and isinstance(h.get("name"), str)]
    # bounded like every label: at most MAX_SHOWN_HINTS hints, each cut, one budget (mrtrweb.text.results)
    hint_budget = ShownBudget()
    hints = [hint_budget.label(h) for h in hints[:MAX_SHOWN_HINTS]] + (
        [str(_("(%(n)d more hints not shown)") % {"n": len(hints) - MAX_SHOWN_HINTS})]
        if len(hints) > MAX_SHOWN_HINTS else [])
    priorities = [(label, prefs[key]) for key, label in (("costPriority", _("cost")), ("speedPriority", _("speed")),
                                                          ("intelligencePriority", _("intelligence")))
                  if isinstance(prefs.get(key), (int, float)) and not isinstance(prefs.get(key), bool)]
    extras = []
    for key in ("temperature", "stopSequences", "includeContext", "tools", "toolChoice", "metadata"):
        if key in params:
            extras.append({"name": key, "value": json.dumps(params[key], ensure_ascii=False)[:2000]})
    return {
        "messages": messages,
        "system_prompt": shown_text(params.get("systemPrompt")) if isinstance(params.get("systemPrompt"), str) else "",
        "max_tokens": params.get("maxTokens"),
        "hints": hints,
        "priorities": priorities,
        "extras": extras,
    }


def roots_answer(server: Any) -> dict[str, Any]:
    """The ``ListRootsResult`` for a server: exactly its configured roots."""
    roots = server.roots if isinstance(server.roots, list) else []
    return {"roots": [dict(r) for r in roots if isinstance(r, dict)]}


class ServerSettingsForm(forms.ModelForm):
    """A tenant admin's per-server settings of the deprecated exception."""

    class Meta:
        from ..models import McpServer

        model = McpServer
        fields = ["allow_sampling", "allow_roots", "roots"]
        widgets = {"roots": forms.Textarea(attrs={
            "rows": 6, "cols": 70, "spellcheck": "false",
            "placeholder": '[\n  {"uri": "file:///home/alice/project", "name": "Project"}\n]'})}
        labels = {"roots": _("Roots (a JSON list)")}
        help_texts = {"roots": _('The roots answered to roots/list, as a JSON list, one object per root: '
                                 '[{"uri": "file:///home/alice/project", "name": "Project"}]. '
                                 'Leave [] for none.')}
        field_classes = {"roots": BoundedJSONField}  # a too-deep or broken JSON is a form error, never a 500
