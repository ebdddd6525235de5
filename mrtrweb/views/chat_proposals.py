"""A proposal's Approve / Edit / Deny (issue 32, item 3), and the tenant admin's page of the
tenant's model and policy (item 1 and 3).

Approve and Deny are POSTs (CSRF); a decision is taken once (a second click: the page as it is).
Edit shows the tool's call form pre-filled with the model's arguments (:func:`.calls._arguments_form`,
checked against the tool's ``inputSchema`` as a person's own call is); a valid form approves the
changed call. Every approved call starts through :func:`mrtrweb.chat.loop.start_call`.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _, gettext_lazy
from django.views.decorators.http import require_POST

from .. import catalog
from ..chat import choice, decisions, loop
from ..chat.decisions import DecisionRefused
from ..chat.policy import ASK, NEVER, READ_ONLY
from ..models import McpServer, Membership, Proposal, Tenant, ToolPolicy
from ..providers import configured
from .calls import _arguments_form
from .common import _user, login_required

logger = logging.getLogger("mrtrweb.views")

DECISION_MESSAGES = {
    "not_found": gettext_lazy("No such proposal."),
    "already_decided": gettext_lazy("This proposal was already decided."),
    "audit_unavailable": gettext_lazy("Your decision could not be recorded in the audit trail, so nothing was "
                                      "started; try again."),
}


async def _decide(request: HttpRequest, proposal_id: Any, status: str, arguments: dict[str, Any] | None = None):
    user = await _user(request)
    try:
        p = await sync_to_async(decisions.decide)(user.pk, proposal_id, status, arguments)
    except DecisionRefused as exc:
        if exc.code == "not_found":
            raise Http404("No such proposal") from None
        messages.error(request, str(DECISION_MESSAGES[exc.code]))
        p = await sync_to_async(decisions.proposal_for)(user.pk, proposal_id)
        return redirect("mrtrweb:chat", conversation_id=p.conversation_id)
    if status != Proposal.Status.DENIED:
        await loop.start_call(p.pk, user)
    await loop.advance(p.conversation_id, user.pk)
    return redirect(f"{_chat_url(p.conversation_id)}#proposal-{p.pk}")


def _chat_url(conversation_id: Any) -> str:
    from django.urls import reverse

    return reverse("mrtrweb:chat", kwargs={"conversation_id": conversation_id})


@login_required
@require_POST
async def proposal_approve(request: HttpRequest, proposal_id: Any) -> HttpResponse:
    return await _decide(request, proposal_id, Proposal.Status.APPROVED)


@login_required
@require_POST
async def proposal_deny(request: HttpRequest, proposal_id: Any) -> HttpResponse:
    return await _decide(request, proposal_id, Proposal.Status.DENIED)


@login_required
async def proposal_edit(request: HttpRequest, proposal_id: Any) -> HttpResponse:
    """The call form pre-filled with the model's arguments; a valid POST approves the changed call."""
    from ..mcp import McpCallError
    from ..servers.connections import connection_for

    user = await _user(request)
    try:
        p = await sync_to_async(decisions.proposal_for)(user.pk, proposal_id)
    except DecisionRefused:
        raise Http404("No such proposal") from None
    if p.status != Proposal.Status.PENDING or p.server is None:
        return redirect("mrtrweb:chat", conversation_id=p.conversation_id)
    error, schema, spec = "", {"type": "object"}, None
    try:
        listed = await (await connection_for(user, p.server)).list_tools()
        spec = next((t for t in listed if isinstance(t, dict) and t.get("name") == p.tool), None)
        schema = (spec or {}).get("inputSchema") or schema
        if spec is None:
            error = _("The server no longer lists this tool.")
    except McpCallError:
        error = _("The server's tools could not be read now; try again.")
    if request.method == "POST" and not error:
        form = _arguments_form(schema, request.POST)
        if await sync_to_async(form.is_valid, thread_sensitive=False)():
            return await _decide(request, proposal_id, Proposal.Status.EDITED, form.content())
    else:
        form = _arguments_form(schema, values=p.arguments if isinstance(p.arguments, dict) else {})
    # where the warning comes from, when the listing is at hand: the server's annotation or MCP's default
    hints = catalog.tool_hints(spec) if spec is not None and p.destructive else None
    source = "" if hints is None else "server" if hints.destructive_stated else "default" if hints.destructive else ""
    return TemplateResponse(request, "mrtrweb/chat_edit.html", {"p": p, "form": form, "error": error,
                                                                "destructive": p.destructive,
                                                                "destructive_source": source},
                            status=200 if not error else 503)


# -- the tenant admin's page -------------------------------------------------------------------------


class ModelChoiceForm(forms.Form):
    choice = forms.ChoiceField(label=gettext_lazy("Provider and model"))
    api_key = forms.CharField(label=gettext_lazy("API key"), required=False, max_length=2000,
                              widget=forms.PasswordInput(render_value=False),
                              help_text=gettext_lazy("Sealed at rest and never shown again. Leave empty to keep the "
                                                     "key saved."))
    remove_key = forms.BooleanField(label=gettext_lazy("Remove the saved key"), required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        providers = configured().values()
        self.fields["choice"].choices = [(f"{c.name}/{m}", f"{c.label or c.name} — {m}")
                                         for c in providers for m in c.models]
        if not any(c.kind != "demo" for c in providers):
            # only the scripted demo model: it needs no key, so none is asked
            del self.fields["api_key"], self.fields["remove_key"]
        elif any(c.kind == "demo" for c in providers):
            self.fields["api_key"].help_text = gettext_lazy(
                "Sealed at rest and never shown again. Leave empty to keep the key saved. The scripted demo "
                "model needs none.")

    @property
    def asks_key(self) -> bool:
        """Whether a key is asked (not when the scripted demo model is the only provider)."""
        return "api_key" in self.fields


def _admin_tenant(user: Any, slug: str) -> Tenant:
    m = Membership.objects.select_related("tenant").filter(user_id=user.pk, tenant__slug=slug,
                                                           role=Membership.Role.ADMIN).first()
    if m is None:
        raise Http404("No such organisation")
    return m.tenant


#: what a tool's rule becomes in the audit when it is removed (the tool then follows the server's rule)
REMOVED = "removed"

RULES = [(ASK, gettext_lazy("Ask every time")), (READ_ONLY, gettext_lazy("Approve read-only calls without asking")),
         (NEVER, gettext_lazy("Never allow"))]


def _save_policy(tenant: Tenant, user_id: Any, data: Any, listings: dict[int, list[dict[str, Any]] | None]
                 ) -> tuple[list[str], list[str]]:
    """``rule-<server id>`` (the server's rule) and ``tool-<server id>`` + ``tool-rule-<server id>``
    (one tool's rule; an empty tool name: none); ``remove-<server id>``: a tool whose own rule is
    removed (the tool then follows the server's rule; audited ``removed``); each server's change
    audited with it. A tool must be one the server lists (``listings``:
    :func:`mrtrweb.chat.tool_lists.listed`); only a server that could not be listed takes a typed
    name. Returns ``(saved, refused)``: the names of the servers whose rules changed, and of those
    whose tool was refused."""
    from django.db import transaction

    from ..chat.events import policy_changed

    valid = {r for r, _label in RULES}
    saved, refused = [], []
    for server in McpServer.objects.filter(tenant=tenant, owner__isnull=True):
        changed: dict[str, str] = {}
        rule = data.get(f"rule-{server.pk}")
        if rule in valid:
            changed[""] = rule
        tool, tool_rule = data.get(f"tool-{server.pk}", "").strip()[:500], data.get(f"tool-rule-{server.pk}")
        listing = listings.get(server.pk)
        if tool and listing is not None and tool not in {t["name"] for t in listing}:
            logger.info("policy form: tool not listed by server %s; its rule not saved", server.pk)
            refused.append(server.name)
        elif tool and "\x00" not in tool and tool_rule in valid:
            changed[tool] = tool_rule
        current = {p.tool: p.rule for p in ToolPolicy.objects.filter(server=server)}
        changed = {t: r for t, r in changed.items() if current.get(t, ASK if t == "" else None) != r}
        gone = data.get(f"remove-{server.pk}", "")  # the server's own rule ("") is set, never removed
        gone = gone if gone and gone in current and gone not in changed else ""
        if not changed and not gone:
            continue
        with transaction.atomic():
            for name, value in changed.items():
                ToolPolicy.objects.update_or_create(tenant=tenant, server=server, tool=name, defaults={"rule": value})
            if gone:
                ToolPolicy.objects.filter(server=server, tool=gone).delete()
            policy_changed(tenant.pk, user_id, server, {**changed, **({gone: REMOVED} if gone else {})})
        saved.append(server.name)
    return saved, refused


def _admin_context(tenant: Tenant, form: ModelChoiceForm, listings: dict[int, list[dict[str, Any]] | None]
                   ) -> dict[str, Any]:
    row = choice.current(tenant.pk)
    servers = []
    labels = dict(RULES)
    for server in McpServer.objects.filter(tenant=tenant, owner__isnull=True).order_by("name"):
        rules = {p.tool: p.rule for p in ToolPolicy.objects.filter(server=server)}
        servers.append({"s": server, "rule": rules.pop("", ASK), "listed": listings.get(server.pk),
                        "tools": [(t, labels.get(r, r)) for t, r in sorted(rules.items())]})
    return {"tenant": tenant, "form": form, "row": row, "has_key": bool(row and row.api_key_sealed),
            "servers": servers, "rules": RULES}


async def _listings(user: Any, tenant: Tenant) -> dict[int, list[dict[str, Any]] | None]:
    """The tools each of the tenant's servers lists (kept a while; None: it cannot be listed now)."""
    import asyncio

    from ..chat import tool_lists

    servers = [s async for s in McpServer.objects.filter(tenant=tenant, owner__isnull=True, enabled=True)]
    found = await asyncio.gather(*(tool_lists.listed(user, s) for s in servers))
    return {s.pk: tools for s, tools in zip(servers, found)}


@login_required
async def tenant_model(request: HttpRequest, slug: str) -> HttpResponse:
    user = await _user(request)
    tenant = await sync_to_async(_admin_tenant)(user, slug)
    row = await sync_to_async(choice.current)(tenant.pk)
    initial = {"choice": f"{row.provider}/{row.model}"} if row else {}
    listings = await _listings(user, tenant)
    if request.method == "POST" and request.POST.get("what") == "policy":
        saved, refused = await sync_to_async(_save_policy)(tenant, user.pk, request.POST, listings)
        if refused:
            messages.error(request, _("Not a tool the server lists; that rule was not saved: %(servers)s")
                           % {"servers": ", ".join(refused)})
        if saved:
            messages.success(request, _("Rules saved: %(servers)s") % {"servers": ", ".join(saved)})
        elif not refused:
            messages.info(request, _("No rule changed."))
        return redirect("mrtrweb:tenant-model", slug=slug)
    form = ModelChoiceForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and await sync_to_async(form.is_valid)():
        provider, _sep, model = form.cleaned_data["choice"].partition("/")
        key = "" if form.cleaned_data.get("remove_key") else (form.cleaned_data.get("api_key") or None)
        await sync_to_async(choice.choose)(tenant, user.pk, provider, model, key)
        messages.success(request, _("The tenant's model is saved: %(model)s") % {"model": model})
        return redirect("mrtrweb:tenant-model", slug=slug)
    ctx = await sync_to_async(_admin_context)(tenant, form, listings)
    return TemplateResponse(request, "mrtrweb/tenant_model.html", ctx)
