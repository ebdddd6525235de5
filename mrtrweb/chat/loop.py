"""A turn's steps as they happen, in this worker's event loop (issue 32): :func:`run` (one model
step), :func:`start_call` (an approved call started as an operation with initiator ``model``, through
:func:`mrtrweb.operations.start_operation`: the one path), :func:`advance` (what the turn does once
its proposals are decided: the results to the model, the next step) and :func:`follow` (watching a
waiting conversation's calls until they end). Their database parts are in :mod:`.turns` and
:mod:`.decisions`; none of them raises: a failure is saved on the conversation and pushed.

A waiting conversation's calls are **pushed, not polled**: :func:`follow` listens on the person's
channel-layer group (``mrtrweb.user.<id>``), where every change of an operation is pushed
(``operation.update``, :func:`mrtrweb.runtime.push.operation_changed`: an answer, an end, an expiry
or a reaper's settlement, from whichever worker made it), and looks at the conversation's calls
only when one of them changed. A push is a hint (a channel layer may lose one): the calls are looked
at again after :data:`FOLLOW_SAFETY_S` seconds without a push, and every :data:`FOLLOW_FALLBACK_S`
seconds only while the channel layer cannot be listened to.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async

from .. import conf
from ..audit.events import AuditUnavailable
from ..models import Conversation, Operation, Proposal
from ..providers import ProviderError
from ..runtime import push as runtime_push
from ..tenancy import access
from . import choice, context, decisions, push, tools, turns
from .turns import spawn

logger = logging.getLogger("mrtrweb.chat")

#: seconds without a push after which a waiting conversation's calls are looked at anyway (a lost push)
FOLLOW_SAFETY_S = 60.0
#: seconds between two looks while the channel layer cannot be listened to (none, or down)
FOLLOW_FALLBACK_S = 5.0
_following: dict[str, asyncio.Task] = {}


async def run(conversation_id: Any, user_id: Any) -> None:
    """One model step of the conversation (then :func:`advance`). Never
    raises: a failure is saved on the conversation and pushed."""
    from django.contrib.auth import get_user_model

    try:
        conv = await Conversation.objects.aget(pk=conversation_id)
        user = await get_user_model()._default_manager.aget(pk=user_id)
        if await access.adenial(user_id, conv.tenant_id):
            await sync_to_async(turns.fail)(conv.pk, "no_access")
            return
        if conv.steps >= int(conf.get("MODEL_STEPS_PER_TURN")):
            await sync_to_async(turns.end_turn)(conv.pk, "steps_exhausted")
            return
        provider = await sync_to_async(choice.provider_of)(conv.tenant_id)
        offered = await tools.offered(conv, user)
        messages = await sync_to_async(context.messages_for)(conv.pk)
        streamer = push.Streamer(user_id, conv.pk)
        try:
            reply = await provider.reply(messages, offered.specs, streamer.on_text)
        finally:
            await streamer.flush()
        auto = await sync_to_async(turns.record_step)(conv.pk, reply, offered, provider.name, provider.model)
        for proposal_id in auto:
            await start_call(proposal_id, user)
        await advance(conv.pk, user_id)
    except ProviderError as exc:
        logger.info("chat: conversation %s: the model step failed (%s)", conversation_id, exc.code)
        await sync_to_async(turns.fail)(conversation_id, exc.code)
    except AuditUnavailable:  # the step and its proposals rolled back with it: nothing was proposed
        logger.warning("chat: conversation %s: the step's audit events could not be written", conversation_id)
        await sync_to_async(turns.fail)(conversation_id, "audit_unavailable")
    except asyncio.CancelledError:  # the worker shuts down: said at once, for Try again
        try:
            await asyncio.shield(sync_to_async(turns.interrupted)(conversation_id))
        except BaseException:  # noqa: BLE001 -- cancelled again or the database is gone: the time bound says it
            pass
        raise
    except Exception:  # noqa: BLE001 -- a bug must not leave the conversation thinking
        logger.exception("chat: conversation %s: the model step failed", conversation_id)
        await sync_to_async(turns.fail)(conversation_id, "provider_error")
    finally:
        await push.changed(user_id, conversation_id)


async def start_call(proposal_id: Any, user: Any) -> None:
    """Start the approved call as an operation (initiator ``model``); a refusal (limits, access,
    the binding store) is saved on the proposal and later told to the model."""
    from .. import operations

    p = await sync_to_async(decisions.proposal_for)(user.pk, proposal_id)
    if p.status not in (Proposal.Status.APPROVED, Proposal.Status.EDITED, Proposal.Status.AUTO) or p.operation_id:
        return
    server = p.server
    if server is None or await access.adenial(user.pk, server.tenant_id, server.pk):
        await sync_to_async(decisions.refuse)(p.pk, "server_gone")
        return
    detail = {"conversation": str(p.conversation_id), "proposal": str(p.pk), "provider": p.message.provider,
              "model": p.message.model}
    try:
        op = await operations.start_operation(
            user=user, server=server, method="tools/call", name=p.tool,
            params={"name": p.tool, "arguments": p.arguments or {}}, destructive=p.destructive,
            initiator=Operation.Initiator.MODEL, initiator_detail=detail)
    except operations.OperationRefused as exc:
        logger.info("chat: proposal %s: the call was refused (%s)", p.pk, exc.code)
        await sync_to_async(decisions.refuse)(p.pk, "start_refused")
        return
    await Proposal.objects.filter(pk=p.pk).aupdate(operation=op)
    # a fast call may have ended before the proposal named it: its watcher, woken by its pushes
    # before then, found no operation to look at; this push (its panel again) wakes it once more
    await runtime_push.operation_changed(user.pk, op.id)


async def advance(conversation_id: Any, user_id: Any) -> None:
    """What the turn does now (see the module doc); never raises."""
    try:
        what, proposals = await sync_to_async(decisions.open_proposals)(conversation_id)
        if what == "running":
            follow(conversation_id, user_id)
        elif what == "ready" and await sync_to_async(decisions.give_results)(conversation_id, proposals,
                                                                             await turns.step_worker()):
            spawn(run(conversation_id, user_id))
    except Exception:  # noqa: BLE001 -- logged; the page's Continue tries again
        logger.exception("chat: conversation %s could not go on", conversation_id)
    await push.changed(user_id, conversation_id)


async def judging(conversation: Conversation) -> None:
    """Before a page judges a ``thinking`` step of another worker (:func:`.turns.stale`): this worker's
    heartbeat runs, so that it may judge another worker dead (:func:`mrtrweb.runtime.workers.trusted`)."""
    from ..runtime import workers

    if conversation.state == Conversation.State.THINKING and conversation.worker \
            and conversation.worker != workers.WORKER_ID:
        await workers.ensure_heartbeat()


def follow(conversation_id: Any, user_id: Any) -> None:
    """Watch a waiting conversation's calls (one watcher per conversation in this worker) and
    :func:`advance` once they all ended (a conversation whose proposals wait for the person, or
    with nothing waiting, is left as it is)."""
    key = str(conversation_id)
    task = _following.get(key)
    if task is not None and not task.done():
        return
    _following[key] = spawn(_follow(conversation_id, user_id))


async def _follow(conversation_id: Any, user_id: Any) -> None:
    listener = _Listener(user_id)
    what = ""
    try:
        await listener.open()
        while True:
            what, proposals = await sync_to_async(decisions.open_proposals)(conversation_id)
            if what != "running":
                break
            started = [p for p in proposals if p.status in decisions.STARTED]
            # an approval whose operation has not started yet is looked at again after its grace
            unstarted = any(p.operation_id is None for p in started)
            # (one not started yet has no id to listen for: then any of the person's operations
            # changing wakes the watcher, else its start's own push would go unheard for the grace)
            await listener.wait_for(None if unstarted else {str(p.operation_id) for p in started if p.operation_id},
                                    decisions.START_GRACE_S + 1 if unstarted else FOLLOW_SAFETY_S)
    except Exception:  # noqa: BLE001 -- the database failed: watched again when its page is read
        logger.exception("chat: conversation %s: its calls could not be watched", conversation_id)
        what = ""
    finally:
        _following.pop(str(conversation_id), None)
        await listener.close()
    if what == "ready":  # else the person decides first (pending), or nothing waits: nothing to do
        await advance(conversation_id, user_id)


class _Listener:
    """The person's ``operation.update`` pushes, heard on a channel of this worker added to their
    group; never raises (a layer that fails: :data:`FOLLOW_FALLBACK_S` between looks)."""

    def __init__(self, user_id: Any) -> None:
        from ..runtime.push import user_group

        self.group = user_group(user_id)
        self.layer: Any = None
        self.channel = ""
        self.said = False  # the layer's failure was logged (once per watcher)

    async def open(self) -> None:
        from channels.layers import get_channel_layer

        try:
            layer = get_channel_layer()
            if layer is not None:
                channel = await layer.new_channel("mrtrweb.chatfollow")
                await layer.group_add(self.group, channel)
                self.layer, self.channel = layer, channel
        except Exception as exc:  # noqa: BLE001 -- the layer is down: the fallback looks
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        if not self.said:
            self.said = True
            logger.warning("chat: the channel layer cannot be listened to (%s); calls looked at every %s s until "
                           "it can", exc.__class__.__name__, FOLLOW_FALLBACK_S)

    async def wait_for(self, operation_ids: set[str] | None, within_s: float) -> None:
        """Return when one of ``operation_ids`` (None: any of the person's) was pushed as changed, after ``within_s`` seconds
        without one, or after :data:`FOLLOW_FALLBACK_S` when the layer cannot be listened to (then
        it is tried again)."""
        if self.layer is None:
            await asyncio.sleep(min(FOLLOW_FALLBACK_S, within_s))
            await self.open()
            return
        try:
            async with asyncio.timeout(within_s):
                while True:
                    message = await self.layer.receive(self.channel)
                    if message.get("type") == "operation.update" and (
                            operation_ids is None or str(message.get("operation_id")) in operation_ids):
                        return
        except TimeoutError:
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 -- the layer went down: the fallback until it is back
            self._failed(exc)
            await self.close()
            await asyncio.sleep(FOLLOW_FALLBACK_S)

    async def close(self) -> None:
        layer, self.layer = self.layer, None
        if layer is not None:
            try:
                await layer.group_discard(self.group, self.channel)
            except Exception:  # noqa: BLE001 -- the group membership expires on its own
                pass
