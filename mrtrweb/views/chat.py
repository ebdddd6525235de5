"""The chat pages (issue 32, item 2): a person's conversations (listed, started, renamed,
deleted, their servers and tools chosen), a conversation's page and its messages fragment (what
the page re-reads when the WebSocket says it changed), sending a message and Continue.

Every conversation is looked up by its owner (another person's, another tenant's: 404) and the
owner's access to its tenant re-checked. The model's text is rendered by the safe Markdown renderer
(:func:`mrtrweb.rendering.markdown.render`: no raw HTML, no live link, no image loaded); the
person's text and every server text are shown as text.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from ..chat import choice, decisions, loop, tools, turns
from ..chat.messages import REFUSALS, message
from ..consent.panels import render_panel
from ..models import AppOffer, ChatMessage, Conversation, McpServer, Membership, Proposal
from ..rendering import markdown
from ..tenancy import access
from ..text import display
from .common import _user, login_required

logger = logging.getLogger("mrtrweb.views")

#: the longest message a person may send, characters
MAX_MESSAGE_CHARS = 8000
#: seconds between the page's re-reads while its WebSocket is down (never while it is open)
PAGE_FALLBACK_S = 10


def conversation_of(user: Any, conversation_id: Any) -> Conversation:
    """Sync: the person's own conversation in a tenant they may act in. Raises Http404."""
    try:
        conv = Conversation.objects.select_related("tenant").get(pk=conversation_id, user_id=user.pk)
    except (Conversation.DoesNotExist, ValueError, ValidationError):
        raise Http404("No such conversation") from None
    if access.denial(user.pk, conv.tenant_id):
        raise Http404("No such conversation")
    return conv


def _arguments_view(arguments: Any) -> tuple[list[tuple[str, str]], str]:
    """The arguments as a person reads them (name, value as text) and as indented JSON."""
    if not isinstance(arguments, dict):
        return [], ""
    rows = [(str(k), v if isinstance(v, str) else display.json_text(v)) for k, v in list(arguments.items())[:50]]
    return rows, display.json_text(arguments, indent=2)[:8000]


def _proposal_view(p: Proposal, csrf: str) -> dict[str, Any]:
    from ..catalog import tool_hints

    rows, as_json = _arguments_view(p.arguments)
    panel = None
    op = access.visible_operation_sync(p.conversation.user_id, p.operation_id) if p.operation_id else None
    if op is not None:  # while the person may still act on it (as its own page)
        panel = {"op": op, "html": mark_safe(render_panel(op, csrf))}  # noqa: S308 -- the product's own rendering
    return {"p": p, "rows": rows, "json": as_json, "panel": panel,
            "hints": {"badges": tool_hints({"annotations": p.annotations}).badges()},
            "refusal": REFUSALS.get(p.refusal, "") if p.status == Proposal.Status.REFUSED else "",
            "sources": [s[1] for s in p.sources if isinstance(s, list) and len(s) == 2]}


def log_context(conv: Conversation, csrf: str) -> dict[str, Any]:
    """Sync: the messages of the conversation as its page shows them."""
    proposals: dict[int, list[dict[str, Any]]] = {}
    for p in Proposal.objects.filter(conversation=conv).select_related("server", "conversation").order_by(
            "message__seq", "position"):
        proposals.setdefault(p.message_id, []).append(_proposal_view(p, csrf))
    items = []
    for m in ChatMessage.objects.filter(conversation=conv).order_by("seq"):
        item: dict[str, Any] = {"m": m, "role": m.role}
        if m.role == "notice":  # a code of the product's: said in this reader's language
            item["notice"] = message(m.text)
        if m.role == "assistant":
            item["html"] = mark_safe(markdown.render(m.text)) if m.text else ""  # noqa: S308 -- sanitised (nh3)
            item["proposals"] = proposals.get(m.pk, [])
        items.append(item)
    error = message(conv.error_code) if conv.state == Conversation.State.FAILED else ""
    offers = list(AppOffer.objects.filter(conversation=conv, status=AppOffer.Status.PENDING)
                  .select_related("operation__server"))
    servers = {o.operation.server_id: o.operation.server.name for o in offers}
    servers.update(McpServer.objects.filter(pk__in={i["m"].server_id for i in items if i["role"].startswith("app_")})
                   .values_list("pk", "name"))
    for item in items:
        if item["role"].startswith("app_"):
            item["server"] = servers.get(item["m"].server_id, "")
    interrupted = turns.stale(conv)
    return {"conversation": conv, "items": items, "error": error, "interrupted": interrupted, "offers": offers,
            "stale_in": None if interrupted else turns.stale_in(conv),
            "can_continue": conv.state == Conversation.State.FAILED or interrupted,
            "busy": conv.state in (Conversation.State.THINKING, Conversation.State.WAITING) and not interrupted}


def _page_context(user: Any, conv: Conversation, csrf: str) -> dict[str, Any]:
    ctx = log_context(conv, csrf)
    chosen = conv.servers
    off = conv.tools_off if isinstance(conv.tools_off, dict) else {}
    known = _known_tools(conv)
    ctx["servers"] = [{"s": s, "on": chosen is None or s.pk in chosen,
                       "tools": [(t, t not in (off.get(str(s.pk)) or [])) for t in sorted(known.get(s.pk, ()))]}
                      for s in tools.all_servers_of(conv)]
    row = choice.current(conv.tenant_id)
    ctx["model"] = row
    ctx["fallback_ms"] = int(PAGE_FALLBACK_S * 1000)
    ctx["demo"] = row is not None and row.provider == "demo"
    ctx["is_admin"] = Membership.objects.filter(user_id=user.pk, tenant_id=conv.tenant_id,
                                                role=Membership.Role.ADMIN).exists()
    return ctx


def _known_tools(conv: Conversation) -> dict[int, set[str]]:
    """Sync: the tools of each server the model was offered at its last step, and those turned off
    (what the person may switch; a server's tools appear after the model's first reply)."""
    out: dict[int, set[str]] = {}
    last = ChatMessage.objects.filter(conversation=conv, role="assistant").order_by("-seq").first()
    for value in (last.offered.values() if last is not None and isinstance(last.offered, dict) else ()):
        if isinstance(value, list) and len(value) == 2 and isinstance(value[1], str):
            out.setdefault(value[0], set()).add(value[1])
    for server_id, names in (conv.tools_off.items() if isinstance(conv.tools_off, dict) else ()):
        if str(server_id).isdigit() and isinstance(names, list):
            out.setdefault(int(server_id), set()).update(n for n in names if isinstance(n, str))
    return out


@login_required
async def chat_index(request: HttpRequest) -> HttpResponse:
    """GET: the person's conversations; POST: a new one in a tenant of theirs (``tenant``: its slug)."""
    user = await _user(request)
    memberships = [m async for m in Membership.objects.filter(user=user).select_related("tenant")]
    if request.method == "POST":
        slug = request.POST.get("tenant") or (memberships[0].tenant.slug if len(memberships) == 1 else "")
        tenant = next((m.tenant for m in memberships if m.tenant.slug == slug), None)
        if tenant is None or await access.adenial(user.pk, tenant.pk):
            raise Http404("No such organisation")
        conv = await Conversation.objects.acreate(tenant=tenant, user=user, title=turns.DEFAULT_TITLE)
        return redirect("mrtrweb:chat", conversation_id=conv.pk)
    if request.method != "GET":
        return HttpResponse(status=405)
    conversations = [c async for c in Conversation.objects.filter(
        user_id=user.pk, tenant__memberships__user=user).select_related("tenant")[:200]]
    return TemplateResponse(request, "mrtrweb/chat_index.html", {"conversations": conversations,
                                                                 "memberships": memberships})


@login_required
async def chat_page(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    user = await _user(request)
    conv = await sync_to_async(conversation_of)(user, conversation_id)
    if conv.state == Conversation.State.WAITING:
        loop.follow(conv.pk, user.pk)  # a worker restarted meanwhile: its calls are watched again
    await loop.judging(conv)
    ctx = await sync_to_async(_page_context)(user, conv, get_token(request))
    return TemplateResponse(request, "mrtrweb/chat.html", ctx)


@login_required
async def chat_log(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    """The messages fragment (the page re-reads it when told the conversation changed)."""
    user = await _user(request)
    conv = await sync_to_async(conversation_of)(user, conversation_id)
    if conv.state == Conversation.State.WAITING:
        loop.follow(conv.pk, user.pk)  # a page that reconnects after a restart: its calls watched again here
    await loop.judging(conv)
    ctx = await sync_to_async(log_context)(conv, get_token(request))
    response = TemplateResponse(request, "mrtrweb/_chat_log.html", ctx)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
async def chat_send(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    user = await _user(request)
    conv = await sync_to_async(conversation_of)(user, conversation_id)
    text = request.POST.get("text", "").strip()
    if not text or len(text) > MAX_MESSAGE_CHARS or "\x00" in text:
        return await _page_with_error(request, user, conv, _("A message must have 1 to %(n)s characters.")
                                      % {"n": MAX_MESSAGE_CHARS}, 400)
    if not await sync_to_async(turns.add_user_message)(conv, text, await turns.step_worker()):
        return await _page_with_error(request, user, conv, _("Wait until the model has replied and you have decided "
                                                             "its proposals."), 409)
    turns.spawn(loop.run(conv.pk, user.pk))
    return redirect("mrtrweb:chat", conversation_id=conv.pk)


async def _page_with_error(request: HttpRequest, user: Any, conv: Conversation, error: str, status: int) -> HttpResponse:
    ctx = await sync_to_async(_page_context)(user, conv, get_token(request))
    ctx["send_error"] = error
    ctx["draft"] = request.POST.get("text", "")[:MAX_MESSAGE_CHARS]
    return TemplateResponse(request, "mrtrweb/chat.html", ctx, status=status)


@login_required
@require_POST
async def chat_continue(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    """Try the failed or interrupted step again (nothing was lost: the conversation is saved)."""
    user = await _user(request)
    conv = await sync_to_async(conversation_of)(user, conversation_id)
    if conv.state == Conversation.State.FAILED or await sync_to_async(turns.stale)(conv):
        moved = await Conversation.objects.filter(pk=conv.pk, state=conv.state).aupdate(
            state=Conversation.State.THINKING, step_started_at=_now(), error_code="", error_message="",
            worker=await turns.step_worker())
        if moved:
            turns.spawn(loop.run(conv.pk, user.pk))
    elif conv.state == Conversation.State.WAITING:
        await loop.advance(conv.pk, user.pk)
    return redirect("mrtrweb:chat", conversation_id=conv.pk)


def _now():
    from django.utils import timezone

    return timezone.now()


@login_required
@require_POST
async def chat_rename(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    user = await _user(request)
    conv = await sync_to_async(conversation_of)(user, conversation_id)
    title = " ".join(request.POST.get("title", "").split())[:200]
    if title and "\x00" not in title:
        await Conversation.objects.filter(pk=conv.pk).aupdate(title=title)
    return redirect("mrtrweb:chat", conversation_id=conv.pk)


@login_required
@require_POST
async def chat_delete(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    """Delete the conversation, its messages and proposals (the operations and audit events stay)."""
    user = await _user(request)
    conv = await sync_to_async(conversation_of)(user, conversation_id)
    await Conversation.objects.filter(pk=conv.pk, user_id=user.pk).adelete()
    return redirect("mrtrweb:chat-index")


@login_required
@require_POST
async def chat_tools(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    """The servers this conversation may use (``server`` ids checked against the person's own;
    all of them: ``None``, also for the servers added later), and the tools left out of those the
    model was offered (``tool``: ``<server id>:<name>`` of each one left on)."""
    user = await _user(request)
    conv = await sync_to_async(conversation_of)(user, conversation_id)
    mine = {s.pk for s in await sync_to_async(tools.all_servers_of)(conv)}
    chosen = sorted({int(v) for v in request.POST.getlist("server") if v.isdigit() and int(v) in mine})
    known = await sync_to_async(_known_tools)(conv)
    kept = set(request.POST.getlist("tool"))  # "<server id>:<tool name>" of each tool left on
    off = {str(sid): sorted(t for t in names if f"{sid}:{t}" not in kept)[:500] for sid, names in known.items()
           if sid in mine and request.POST.get("tools-shown") == "1"}
    await Conversation.objects.filter(pk=conv.pk).aupdate(servers=None if set(chosen) == mine else chosen,
                                                          tools_off={k: v for k, v in off.items() if v})
    return redirect("mrtrweb:chat", conversation_id=conv.pk)
