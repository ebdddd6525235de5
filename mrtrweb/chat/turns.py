"""A turn: the person's message, then model steps until the model answers without proposing a
call, proposals wait for the person, or a bound is reached (issue 32, items 2 and 6).

One step (:func:`mrtrweb.chat.loop.run`): the conversation is saved before it (the person's message, every earlier
result); the tools offered are listed (:mod:`.tools`); the model's reply streams to the page
(:mod:`.push`); the reply and its proposals are saved in one transaction (:func:`record_step`),
each proposal judged by the tenant's policy (:mod:`.policy`) and audited (:mod:`.events`); then
:func:`mrtrweb.chat.decisions.advance` decides what comes next.

Bounds (``MRTRWEB``): ``MODEL_STEPS_PER_TURN`` model replies per turn; ``MODEL_PROPOSALS_AT_ONCE``
calls one reply may propose (the rest are refused, told to the model, never shown as proposals);
``MODEL_CONTEXT_CHARS`` (:mod:`.context`); ``MODEL_REPLY_CHARS`` and ``MODEL_REPLY_TIMEOUT_S`` (the
provider). A provider that fails leaves the conversation ``failed`` with a stable code and nothing
lost: "Try again" repeats the step. A worker that stops mid-step: when the step's task is cancelled
(a graceful shutdown) the conversation is ``failed`` with ``interrupted`` at once
(:func:`interrupted`); when the worker is killed it stays ``thinking`` and counts as interrupted once
its worker is judged dead (its lease stale: :func:`mrtrweb.runtime.workers.judged_dead`; a step names
its worker, :func:`step_worker`) or its step is older than a reply may take (:func:`stale`; the page
looks again then, :func:`stale_in`); either way the page offers Try again, from the saved conversation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from .. import conf
from ..models import ChatMessage, Conversation, McpServer, Proposal
from ..providers import Reply
from . import events, policy, tools

logger = logging.getLogger("mrtrweb.chat")

_tasks: set[asyncio.Task] = set()
#: the title of a conversation before its first message
DEFAULT_TITLE = "New conversation"


def spawn(coro: Any) -> asyncio.Task:
    """Run ``coro`` in the background of this worker, a reference kept until it ends."""
    task = asyncio.get_running_loop().create_task(coro)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return task


def arguments_digest(arguments: Any) -> str:
    """``sha256:`` of the canonical JSON of ``arguments`` (what audit rows hold, never the values)."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


async def step_worker() -> str:
    """The id this worker names itself with on a conversation whose step it is about to run
    (:data:`mrtrweb.runtime.workers.WORKER_ID`), its lease written first; "" when the lease cannot be
    written (then only the time bound tells a lost step)."""
    from django.db import DatabaseError

    from ..runtime import workers

    try:
        await workers.ensure_lease()
    except DatabaseError:
        return ""
    return workers.WORKER_ID


def stale(conversation: Conversation) -> bool:
    """Sync: a ``thinking`` step that is lost: its worker (another one) is judged dead
    (:func:`mrtrweb.runtime.workers.judged_dead`: its lease stale or gone), or it started longer ago
    than a reply may take; the page offers Try again."""
    if conversation.state != Conversation.State.THINKING or conversation.step_started_at is None:
        return False
    limit = float(conf.get("MODEL_REPLY_TIMEOUT_S")) + 60
    if (timezone.now() - conversation.step_started_at).total_seconds() > limit:
        return True
    from ..runtime import workers

    return bool(conversation.worker) and workers.judged_dead(conversation.worker)


def next_seq(conversation_id: Any) -> int:
    return (ChatMessage.objects.filter(conversation_id=conversation_id).aggregate(m=Max("seq"))["m"] or 0) + 1


def add_user_message(conversation: Conversation, text: str, worker: str = "") -> bool:
    """Sync: the person's message saved and the turn started (``thinking``, its step run by
    ``worker``: :func:`step_worker`); False when the conversation is busy (a step runs, or proposals
    wait for a decision)."""
    with transaction.atomic():
        started = Conversation.objects.filter(pk=conversation.pk).exclude(
            state__in=[Conversation.State.THINKING, Conversation.State.WAITING]).update(
            state=Conversation.State.THINKING, step_started_at=timezone.now(), steps=0, error_code="",
            error_message="", updated_at=timezone.now(), worker=worker)
        if not started:
            return False
        seq = next_seq(conversation.pk)
        ChatMessage.objects.create(conversation_id=conversation.pk, seq=seq, role="user", text=text)
        if seq == 1 and conversation.title == DEFAULT_TITLE:  # named after its first message (renamed at will)
            Conversation.objects.filter(pk=conversation.pk).update(title=" ".join(text.split())[:60] or DEFAULT_TITLE)
    return True


def stale_in(conversation: Conversation) -> int | None:
    """Seconds until a ``thinking`` conversation's step counts as lost (:func:`stale`), else None:
    the page looks once more then, so that it offers Try again without being reloaded."""
    if conversation.state != Conversation.State.THINKING or conversation.step_started_at is None:
        return None
    limit = float(conf.get("MODEL_REPLY_TIMEOUT_S")) + 60
    left = limit - (timezone.now() - conversation.step_started_at).total_seconds()
    if left <= 0:
        return None
    from ..runtime import workers

    if conversation.worker and conversation.worker != workers.WORKER_ID:  # when its worker could be judged dead
        left = min(left, workers.stale_after().total_seconds() + 2 * workers.period())
    return max(0, int(left) + 1)


def interrupted(conversation_id: Any) -> None:
    """Sync: the step's task was cancelled (its worker shuts down): a conversation still ``thinking``
    becomes ``failed`` (``interrupted``) at once, for Try again; one that moved on is left as it is."""
    from .messages import message as text_of

    Conversation.objects.filter(pk=conversation_id, state=Conversation.State.THINKING).update(
        state=Conversation.State.FAILED, error_code="interrupted", error_message=text_of("interrupted")[:500],
        step_started_at=None, updated_at=timezone.now())


def fail(conversation_id: Any, code: str, message: str = "") -> None:
    from .messages import message as text_of

    Conversation.objects.filter(pk=conversation_id).update(
        state=Conversation.State.FAILED, error_code=code, error_message=(message or text_of(code))[:500],
        step_started_at=None, updated_at=timezone.now())


def _notice(conversation_id: Any, code: str) -> None:
    """A ``notice`` of the product (its ``text`` is the code: shown in the reader's language)."""
    ChatMessage.objects.create(conversation_id=conversation_id, seq=next_seq(conversation_id), role="notice",
                               text=code)


def end_turn(conversation_id: Any, code: str) -> None:
    with transaction.atomic():
        _notice(conversation_id, code)
        Conversation.objects.filter(pk=conversation_id).update(state=Conversation.State.IDLE, step_started_at=None,
                                                               updated_at=timezone.now())


def _sources(conversation_id: Any) -> list[list[Any]]:
    """The servers whose data the model has read in this conversation: every call's result given to
    it (in any turn: an earlier turn's results stay in its context, and a result can ask for a call
    "next time") and every app's message or context the person let in (:mod:`.app_offers`):
    ``[[id, name], ...]`` in the order first read."""
    read: list[tuple[int, int]] = list(  # (seq, server id)
        Proposal.objects.filter(conversation_id=conversation_id, operation__isnull=False, answered=True,
                                server__isnull=False).order_by("message__seq", "position")
        .values_list("message__seq", "server_id"))
    read += ChatMessage.objects.filter(conversation_id=conversation_id, role__in=("app_message", "app_context"),
                                       server_id__isnull=False).values_list("seq", "server_id")
    ids = list(dict.fromkeys(server_id for _seq, server_id in sorted(read, key=lambda r: r[0])))
    names = dict(McpServer.objects.filter(pk__in=ids).values_list("pk", "name"))
    return [[i, names.get(i, "")] for i in ids]


def record_step(conversation_id: Any, reply: Reply, offered: tools.Offered, provider: str, model: str) -> list[Any]:
    """Sync, one transaction: the model's reply saved with its proposals (judged, audited); the
    ids of the proposals the tenant's policy approved without asking."""
    at_once = int(conf.get("MODEL_PROPOSALS_AT_ONCE"))
    auto: list[Any] = []
    with transaction.atomic():
        conv = Conversation.objects.select_for_update().get(pk=conversation_id)
        calls = [{"id": clean(c.id, 200), "name": clean(c.name, 300), "arguments": clean(c.arguments, 100_000)}
                 for c in reply.tool_calls]
        message = ChatMessage.objects.create(conversation=conv, seq=next_seq(conv.pk), role="assistant",
                                             text=clean(reply.text, 1_000_000),
                                             tool_calls=calls, offered=offered.names, provider=provider, model=model)
        if reply.cut:
            _notice(conv.pk, "reply_cut")
        sources = _sources(conv.pk)
        rules = policy.rules_of(conv.tenant_id, list(offered.servers))
        for position, call in enumerate(reply.tool_calls):
            proposal = Proposal(conversation=conv, message=message, call_id=clean(call.id, 200), position=position,
                                called_as=clean(call.name, 300), sources=sources)
            target = offered.names.get(call.name)
            arguments = _parsed(call.arguments)
            if position >= at_once:
                proposal.status, proposal.refusal = Proposal.Status.REFUSED, "too_many"
            elif target is None and call.name in offered.withheld:
                server_id, tool = offered.withheld[call.name]
                proposal.server, proposal.tool = offered.servers.get(server_id), tool
                proposal.status, proposal.refusal = Proposal.Status.REFUSED, "policy_never"
            elif target is None:
                proposal.status, proposal.refusal = Proposal.Status.REFUSED, "unknown_tool"
            if target is not None:
                proposal.server = offered.servers.get(target[0])
                proposal.tool = target[1]
                listed = offered.tools.get(call.name) or {}
                proposal.annotations = listed.get("annotations") if isinstance(listed.get("annotations"), dict) else {}
                from ..catalog import is_destructive

                proposal.destructive = is_destructive(listed)
            if arguments is None and not proposal.refusal:
                proposal.status, proposal.refusal = Proposal.Status.REFUSED, "malformed_arguments"
            proposal.arguments = arguments
            proposal.arguments_digest = arguments_digest(arguments) if arguments is not None else ""
            if not proposal.refusal:
                verdict = policy.decide(rules, target[0], target[1], offered.tools.get(call.name),
                                        [s[0] for s in sources])
                if verdict == policy.NEVER:
                    proposal.status, proposal.refusal = Proposal.Status.REFUSED, "policy_never"
                elif verdict == "auto":
                    proposal.status, proposal.decided_at = Proposal.Status.AUTO, timezone.now()
            proposal.save()
            events.proposed(proposal, provider, model)
            if proposal.status == Proposal.Status.AUTO:
                events.decided(proposal, conv.user_id, provider, model)
                auto.append(proposal.pk)
        conv.state = Conversation.State.WAITING if reply.tool_calls else Conversation.State.IDLE
        conv.steps += 1
        conv.step_started_at = None
        conv.updated_at = timezone.now()
        conv.save(update_fields=["state", "steps", "step_started_at", "updated_at"])
    return auto


def _parsed(text: str) -> dict[str, Any] | None:
    """The model's arguments as a JSON object (empty text: ``{}``), else None -- also for one holding
    a NUL, a lone surrogate, ``NaN`` or an infinite number anywhere (Python's json reads them; JSON
    has none: no database keeps it, no server should get it)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
        canonical = json.dumps(value, ensure_ascii=False, allow_nan=False)
        canonical.encode("utf-8")
    except (ValueError, RecursionError, UnicodeError):
        return None
    return value if isinstance(value, dict) and "\\u0000" not in canonical else None


_LONE = re.compile("[\ud800-\udfff]")


def clean(text: Any, limit: int) -> str:
    """A model's text made fit to keep: at most ``limit`` characters, NUL and lone surrogates as U+FFFD
    (PostgreSQL keeps neither)."""
    return _LONE.sub("\ufffd", str(text or "")[:limit].replace("\x00", "\ufffd"))
