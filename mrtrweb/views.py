"""Views: servers and their tools, starting calls, the operation page and answering a round.

Every view requires login; objects are looked up through the requesting user's memberships or
ownership, so another user (same or other tenant) gets 404 and nothing is sent. Each request also
re-checks access (:mod:`mrtrweb.access`: the user active, a member of the tenant, the server there
and enabled): once it ended, the person's own operations are 404 as well, and ended as denied.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.parse
from typing import Any

from django import forms

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.core import signing
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.middleware.csrf import get_token
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

from . import access, audit, conf, connections, display, expiry, names, operations, results, sampling, workers
from .forms import JsonArgumentsForm, SchemaForm, _option_key, refuse_lone_surrogates, stand_in_keys
from .gate import (
    ContentMismatch, GateRejection, SchemaRefused, StoreUnavailable, check_requested_schema, digest,
)
# the very checks the gate applies to sampling/roots answers when it builds the retry (read only)
from .gate.gate import _valid_create_message_result, _valid_list_roots_result, _within_depth
from .gate.ids import is_strict_json
from .authz import pages as authz_pages
from .mcp import McpCallError
from .models import McpServer, Membership, Operation
from .mcp.tasks import flavor as task_flavor
from .operations.tasks import refused as task_refused, requires_task, TASK_REQUIRED_MESSAGE
from .panels import consent_forms, panel_context

logger = logging.getLogger("mrtrweb.views")


async def _user(request: HttpRequest):
    return await request.auser()


_server_for = access.server_for


async def _operation_for(user: Any, op_id: Any) -> Operation:
    """The user's operation while they may act on it (:func:`mrtrweb.access.operation_for`).

    Raises:
        Http404: not theirs; :class:`~mrtrweb.access.AccessEnded` (a 404 too) when their access
            ended (the operation is then ended as denied, nothing sent)."""
    return await operations.operation_for(user, op_id)


@login_required
async def index(request: HttpRequest) -> HttpResponse:
    user = await _user(request)
    memberships = [m async for m in Membership.objects.filter(user=user).select_related("tenant")]
    servers = [s async for s in McpServer.objects.filter(tenant__memberships__user=user, enabled=True)
               .select_related("tenant")]
    # only operations the user may still act on (a server disabled or a tenant left: not listed)
    ops = [o async for o in Operation.objects.filter(user=user, server__enabled=True, tenant__memberships__user=user)
           .select_related("server")[:20]]
    return TemplateResponse(request, "mrtrweb/index.html",
                            {"memberships": memberships, "servers": servers, "operations": ops})


@login_required
async def server_detail(request: HttpRequest, server_id: int) -> HttpResponse:
    """A server's page: its tools, prompts, resource templates and resources as the server lists
    them now (never cached: a list_changed push makes the open page re-read it, ``server.js``), the
    protocol version negotiated and the protocol setting."""
    user = await _user(request)
    server = await _server_for(user, server_id)
    tools: list[dict[str, Any]] = []
    prompts: list[dict[str, Any]] = []
    templates: list[dict[str, Any]] = []
    resources: list[dict[str, Any]] = []
    error = ""
    duplicates = not_shown = 0
    negotiated = None  # the protocol version spoken with the server, once connected
    tasks_declared = False  # whether a tool that runs only as a task is called (as a task) here
    auth = await authz_pages.server_auth(user, server)  # OAuth per person: Connect / Connected (issue 13)
    if not auth["needs_connect"]:  # without the person's connection a listing would only get a 401
        try:
            # the connection operations use too: the same declared capabilities and protocol (issue 15)
            conn = await connections.connection_for(user, server)
            negotiated = conn.protocol_version
            tasks_declared = task_flavor(conn.server_capabilities) is not None
            conn.watch_listings()  # a list_changed from the server is pushed to this page
            listed = (await conn.list_tools(), await _listing(conn.list_prompts, "name"),
                      await _listing(conn.list_resource_templates, "uriTemplate"),
                      await _listing(conn.list_resources, "uri"))
            # off the event loop: a listing may hold tens of thousands of items
            (tools, prompts, templates, resources), duplicates, not_shown = await sync_to_async(
                _shown_lists, thread_sensitive=False)(*listed)
        except McpCallError as exc:
            logger.info("listing tools of server %s failed (%s)", server.pk, exc.code)
            error = operations.failure_message(exc)
            auth["needs_connect"] = exc.code in authz_pages.AUTH_ERROR_CODES and auth["mode"] == "oauth_user"
    is_admin = await Membership.objects.filter(tenant_id=server.tenant_id, user=user,
                                               role=Membership.Role.ADMIN).aexists()
    return TemplateResponse(request, "mrtrweb/server.html", {"server": server, "tools": tools, "prompts": prompts,
                                                             "tasks_declared": tasks_declared,
                                                             "templates": templates, "resources": resources,
                                                             "error": error, "auth": auth,
                                                             "is_admin": is_admin, "duplicates": duplicates,
                                                             "not_shown": not_shown, "negotiated": negotiated,
                                                             "max_shown": names.MAX_LISTED_SHOWN})


def _shown_lists(*listed: list[dict[str, Any]]) -> tuple[list[list[dict[str, Any]]], int, int]:
    """The server page's tools, prompts, resource templates and resources (each name once, at most
    ``MAX_LISTED_SHOWN`` of each, descriptions capped), how many duplicates were dropped and how many
    items are not shown. Blocking: run it off the event loop."""
    shown, duplicates, not_shown = [], 0, 0
    for items, (key, what) in zip(listed, (("name", "tool"), ("name", "prompt"), ("uriTemplate", "resource template"),
                                           ("uri", "resource")), strict=True):
        items, dropped = names.unique_items(items, key, what=what)
        duplicates += dropped
        not_shown += max(len(items) - names.MAX_LISTED_SHOWN, 0)  # a page of bounded size, whatever is listed
        del items[names.MAX_LISTED_SHOWN:]
        results.cap_descriptions(items, results.LISTED_DESCRIPTION_CHARS)
        shown.append(items)
    return shown, duplicates, not_shown


def _find_listed(items: list[dict[str, Any]], key: str, what: str, name: str | None,
                 wanted: str | None) -> dict[str, Any] | None:
    """The listed item a call page names (:func:`names.find` among :func:`names.unique_items`).
    Blocking (digests of every name): run it off the event loop."""
    return names.find(names.unique_items(items, key, what=what)[0], key, name, wanted)


async def _listing(fetch, key: str) -> list[dict[str, Any]]:
    """A server's prompts or resource templates; a server without the capability lists none."""
    try:
        items = await fetch()
    except McpCallError as exc:
        if exc.code == "jsonrpc_error":  # e.g. "Method not found": the server has none
            return []
        raise
    return [i for i in items if isinstance(i, dict) and isinstance(i.get(key), str)]


def _arguments_form(schema: Any, data: Any = None, budget: results.ShownBudget | None = None,
                    ) -> SchemaForm | JsonArgumentsForm:
    try:
        checked = check_requested_schema(schema if isinstance(schema, dict) else {"type": "object"})
    except SchemaRefused:
        return JsonArgumentsForm(schema, data=data)
    return SchemaForm(checked, data=data, prefix="arg", budget=budget)


def _page_texts(name: Any, description: Any) -> tuple[results.ShownBudget, Any, Any]:
    """A call page's budget of server text (``MAX_SHOWN_CHARS``), and the name in its heading and
    its description as shown, both taken from that budget; its form's labels take the rest."""
    budget = results.ShownBudget()
    heading = budget.label(name)
    return budget, heading, budget.text(description, int(conf.get("MAX_SHOWN_CHARS")))


@login_required
async def tool_call(request: HttpRequest, server_id: int, tool: str | None = None) -> HttpResponse:
    """A tool's call page, the tool named by ``?name=`` or ``?sha256=`` (:mod:`mrtrweb.names`; ``tool``:
    the older path form). The name called is the one the server lists, byte for byte. 404: not listed."""
    user = await _user(request)
    server = await _server_for(user, server_id)
    error = ""
    refused = 0  # the HTTP status of a refused start that a service of ours caused (503)
    asked, wanted = names.requested(request.GET, tool)
    if asked is None and wanted is None:
        raise Http404("No such tool")
    try:
        conn = await connections.connection_for(user, server)
        listed = await conn.list_tools()
    except McpCallError as exc:
        listed, error = [], operations.failure_message(exc)
    spec = await sync_to_async(_find_listed, thread_sensitive=False)(listed, "name", "tool", asked, wanted)
    if spec is None and not error:
        raise Http404("No such tool")
    tool = spec["name"] if spec is not None else (asked or "")
    schema = (spec or {}).get("inputSchema") or {"type": "object"}
    budget, heading, description = _page_texts(tool, (spec or {}).get("description"))
    # execution.taskSupport "required": called as a task where the server declares tasks, else
    # never called; the page says why (mrtrweb.operations.tasks)
    task_required = spec is not None and task_refused(spec, conn.server_capabilities)
    runs_as_task = spec is not None and requires_task(spec) and not task_required
    if task_required and request.method == "POST":
        logger.info("call of a task-only tool on server %s refused: nothing sent", server.pk)
        error = TASK_REQUIRED_MESSAGE
    if request.method == "POST" and not task_required:
        form = _arguments_form(schema, request.POST, budget)
        # off the event loop: checking a server's schema may take up to argschema.CHECK_TIMEOUT_S
        if not error and await sync_to_async(form.is_valid, thread_sensitive=False)():
            try:
                op = await operations.start_operation(user=user, server=server, method="tools/call", name=tool,
                                                      params={"name": tool, "arguments": form.content()})
            except operations.OperationRefused as exc:
                error, refused = exc.message, exc.status
            else:
                return redirect("mrtrweb:operation", op_id=op.id)
    elif request.method in ("GET", "POST"):
        form = _arguments_form(schema, budget=budget)
    else:
        return HttpResponseNotAllowed(["GET", "POST"])
    return TemplateResponse(request, "mrtrweb/tool.html",
                            {"server": server, "tool": spec or {"name": tool}, "form": form, "error": error,
                             "heading": heading, "description": description, "task_required": task_required,
                             "runs_as_task": runs_as_task,
                             "task_required_message": TASK_REQUIRED_MESSAGE},
                            status=409 if task_required and request.method == "POST" else
                            200 if not error else 503 if not spec or refused == 503 else 200)


async def _current(user: Any, op_id: Any) -> Operation:
    """The user's operation, after settling it if the worker named on it is dead
    (:mod:`mrtrweb.workers`) or its round is past its lifetime (:mod:`mrtrweb.expiry`)."""
    op = await _operation_for(user, op_id)
    settled = False
    if op.status in Operation.LIVE and op.worker:
        settled = bool(await operations.reap_interrupted(op.pk))
    if not settled:
        settled = await expiry.settle_if_due(op)
    if settled:
        op = await _operation_for(user, op_id)
    return op


#: the most fields a prompt's arguments or a resource template's variables make on a call page;
#: a server asking for more gets a form that cannot be sent (it says why), not thousands of fields
MAX_CALL_FIELDS = 100


class _BoundedCallForm(forms.Form):
    """A call page's form whose fields a server chooses: at most :data:`MAX_CALL_FIELDS`."""

    too_many = 0  #: how many fields the server asked for, when that is over the cap

    def _refuse_if_too_many(self, count: int) -> bool:
        if count > MAX_CALL_FIELDS:
            self.too_many = count
            return True
        return False

    def clean(self) -> dict[str, Any]:
        if self.too_many:
            logger.info("call form refused: the server asks for %s fields (at most %s)", self.too_many,
                        MAX_CALL_FIELDS)
            raise forms.ValidationError(
                _("The server asks for %(n)s values here, more than this page takes (%(max)s): nothing can be sent."),
                params={"n": self.too_many, "max": MAX_CALL_FIELDS})
        cleaned = super().clean()
        refuse_lone_surrogates(self)
        return cleaned


class PromptArgumentsForm(_BoundedCallForm):
    """``prompts/get`` arguments: strings, required where the server says so. An argument named
    ``""`` gets a field too (labelled as having no name). Titles and descriptions are bounded
    (``budget``: the page's :class:`~mrtrweb.results.ShownBudget`)."""

    def __init__(self, arguments: list[Any], *args: Any, budget: results.ShownBudget | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._refuse_if_too_many(len(arguments)):
            return
        budget = budget if budget is not None else results.ShownBudget()
        arguments = [a for a in arguments if isinstance(a, dict) and isinstance(a.get("name"), str)]
        # a long name is keyed by a short stand-in in the page (forms.stand_in_keys)
        self.keys = stand_in_keys([a["name"] for a in arguments])
        for arg in arguments:
            if self.keys[arg["name"]] not in self.fields:
                title = arg.get("title") if isinstance(arg.get("title"), str) and arg.get("title") else arg["name"]
                # server text: bounded, cleaned and escaped (a SafeString), whatever form template prints it
                self.fields[self.keys[arg["name"]]] = forms.CharField(
                    label=display.html(budget.label(title) if title else _("(an argument with an empty name)")),
                    help_text=display.html(budget.description(arg.get("description"))
                                           if isinstance(arg.get("description"), str) else "", multiline=True),
                    required=arg.get("required") is True, strip=False)

    def content(self) -> dict[str, str]:
        names_of = {key: name for name, key in getattr(self, "keys", {}).items()}
        return {names_of.get(k, k): v for k, v in self.cleaned_data.items() if v != ""}


_TEMPLATE_VAR = re.compile(r"\{([A-Za-z0-9_.]+)\}")


class ResourceTemplateForm(_BoundedCallForm):
    """The variables of a resource URI template (RFC 6570 simple expansion)."""

    def __init__(self, template: str, *args: Any, budget: results.ShownBudget | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.template = template
        variables = list(dict.fromkeys(_TEMPLATE_VAR.findall(template)))
        if self._refuse_if_too_many(len(variables)):
            return
        budget = budget if budget is not None else results.ShownBudget()
        self.keys = stand_in_keys(variables)  # a long name is keyed by a short stand-in in the page
        for name in variables:
            self.fields[self.keys[name]] = forms.CharField(label=display.html(budget.label(name)), max_length=500)

    def uri(self) -> str:
        return _TEMPLATE_VAR.sub(lambda m: urllib.parse.quote(self.cleaned_data[self.keys[m.group(1)]], safe=""),
                                 self.template)


async def _listed_call(request: HttpRequest, server_id: int, *, kind: str, title: str | None, list_name: str,
                       key: str, make_form, build, wanted: str | None = None) -> HttpResponse:
    """The shared flow of a prompt or resource call page: find ``title`` (or the name whose digest
    is ``wanted``) among the server's listing (``list_name`` of the connection, items keyed by
    ``key``; the first of a repeated name), show ``make_form(spec, data, budget)`` (``budget``: the
    page's :class:`~mrtrweb.results.ShownBudget`, the heading and description taken), and on a valid POST
    start ``build(spec, form) -> (method, name, params)``. 404: not listed (or nothing named)."""
    user = await _user(request)
    server = await _server_for(user, server_id)
    if title is None and wanted is None:
        raise Http404(f"No such {kind}")
    ctx: dict[str, Any] = {"server": server, "kind": kind, "title": title or ""}
    try:
        conn = await connections.connection_for(user, server)
        listed = await _listing(getattr(conn, list_name), key)
    except McpCallError as exc:
        ctx["error"] = operations.failure_message(exc)
        return TemplateResponse(request, "mrtrweb/call.html", ctx, status=503)
    spec = await sync_to_async(_find_listed, thread_sensitive=False)(listed, key, kind, title, wanted)
    if spec is None:
        raise Http404(f"No such {kind}")
    # the name in the heading, the description and the form's labels share one budget
    budget, ctx["title"], description = _page_texts(spec[key], spec.get("description"))
    form = make_form(spec, request.POST if request.method == "POST" else None, budget)
    ctx.update(description=description, form=form, error="")
    if request.method == "POST" and form.is_valid():
        method, name, params = build(spec, form)
        try:
            op = await operations.start_operation(user=user, server=server, method=method, name=name, params=params)
        except operations.OperationRefused as exc:
            ctx["error"] = exc.message
            if exc.status == 503:  # a service of ours (or this worker, draining): nothing was sent
                return TemplateResponse(request, "mrtrweb/call.html", ctx, status=503)
        else:
            return redirect("mrtrweb:operation", op_id=op.id)
    return TemplateResponse(request, "mrtrweb/call.html", ctx)


@login_required
async def prompt_get(request: HttpRequest, server_id: int, prompt: str | None = None) -> HttpResponse:
    """Get a prompt with its arguments (``prompts/get``); its rounds go through the same card.
    The prompt is named by ``?name=`` or ``?sha256=`` (``prompt``: the older path form)."""
    asked, wanted = names.requested(request.GET, prompt)
    return await _listed_call(
        request, server_id, kind="prompt", title=asked, wanted=wanted, list_name="list_prompts", key="name",
        make_form=lambda spec, data, budget: PromptArgumentsForm(spec.get("arguments") or [], data, prefix="arg",
                                                                 budget=budget),
        build=lambda spec, form: ("prompts/get", spec["name"], {"name": spec["name"], "arguments": form.content()}))


@login_required
async def resource_read(request: HttpRequest, server_id: int) -> HttpResponse:
    """Read a resource (``resources/read``) from a template, named by ``?template=`` (or ``?sha256=``),
    or a listed resource, named by ``?uri=`` (or ``?uri_sha256=``): its URI is read exactly as listed."""
    if "uri" in request.GET or "uri_sha256" in request.GET:
        uri, wanted = names.requested(request.GET, param="uri", digest_param="uri_sha256")
        return await _listed_call(
            request, server_id, kind="resource", title=uri, wanted=wanted, list_name="list_resources", key="uri",
            make_form=lambda spec, data, budget: forms.Form(data),
            build=lambda spec, form: ("resources/read", spec["uri"], {"uri": spec["uri"]}))
    template, wanted = names.requested(request.GET, param="template")
    return await _listed_call(
        request, server_id, kind="resource", title=template, wanted=wanted, list_name="list_resource_templates",
        key="uriTemplate",
        make_form=lambda spec, data, budget: ResourceTemplateForm(spec["uriTemplate"], data, prefix="arg", budget=budget),
        build=lambda spec, form: ("resources/read", form.uri(), {"uri": form.uri()}))


async def _render_operation(request: HttpRequest, op_id: Any, template: str) -> HttpResponse:
    user = await _user(request)
    op = await _current(user, op_id)
    ctx = await sync_to_async(panel_context)(op)
    ctx["csrf_token"] = get_token(request)
    return TemplateResponse(request, template, ctx)


@login_required
async def operation_detail(request: HttpRequest, op_id: Any) -> HttpResponse:
    return await _render_operation(request, op_id, "mrtrweb/operation.html")


@login_required
async def operation_panel(request: HttpRequest, op_id: Any) -> HttpResponse:
    """The panel alone (the page's fallback refresh when the WebSocket is down)."""
    return await _render_operation(request, op_id, "mrtrweb/_panel.html")


@login_required
@require_POST
async def operation_answer(request: HttpRequest, op_id: Any) -> HttpResponse:
    """Answer the open round: ``action`` is ``accept``, ``decline`` or ``cancel`` (for every
    request of the card); form fields are validated by the form, then by the gate."""
    user = await _user(request)
    try:
        op = await _operation_for(user, op_id)
    except access.AccessEnded as exc:
        await _record_refused_after_access(exc, "answer")
        raise
    except Http404:
        await _record_foreign_attempt(user, op_id)
        raise
    action = request.POST.get("action")
    round_no = request.POST.get("round")
    try:
        state = await sync_to_async(operations.get_gate().state)(operations.handle_of(op))
    except StoreUnavailable:
        return await _panel_response(request, op, error=operations.message_for(operations.STORE_UNAVAILABLE),
                                     status=503)
    rnd = state.round if state else None
    if op.status == Operation.Status.AWAITING_INPUT and _expired(state, op):
        await operations.deny(op, "timeout")  # the round expired before this answer: denied, nothing sent
        return await _panel_response(request, op, error=operations.DENY_MESSAGES["timeout"], status=409)
    if rnd is None or op.status != Operation.Status.AWAITING_INPUT or round_no != str(rnd.number):
        return await _panel_response(request, op, error=operations.message_for("inactive_mrtr_round"), status=409)
    if action not in ANSWER_ACTIONS:
        return await _panel_response(request, op, error="Choose Accept, Decline or Cancel.", status=400)
    if any(view.kind in sampling.DEPRECATED_KINDS for view in rnd.requests.values()):
        return await _answer_deprecated(request, op, rnd, action, user)
    if action in ("decline", "cancel"):  # no review: nothing but the action is sent
        return await _send(request, op, {key: {"action": action} for key in rnd.requests}, {})
    forms = consent_forms(rnd, request.POST)
    if action == "change":
        return await _panel_response(request, op, forms=forms, status=200)
    if not all(f.is_valid() for f in forms.values()):
        await sync_to_async(_all_messages, thread_sensitive=False)(forms)  # patterns: off the event loop
        return await _panel_response(request, op, forms=forms, error="Some answers need attention.", status=400)
    responses: dict[str, Any] = {}
    for key, view in rnd.requests.items():
        if view.kind == "form":
            responses[key] = {"action": "accept", "content": forms[key].content()}
        elif view.kind == "url":
            responses[key] = {"action": "accept"}
        else:  # sampling/roots cards are answered by _answer_deprecated
            return await _panel_response(request, op, error="This request type cannot be answered here.",
                                         status=400)
    failed = await _precheck(op, rnd, forms, responses)
    if failed is not None:
        return await _panel_response(request, op, forms=forms, error=failed, status=400)
    if action == "accept":
        return await _review_response(request, op, rnd, forms, responses, {})
    refused = _check_review(request, op, rnd, responses, {})
    if refused is not None:
        return await _panel_response(request, op, forms=forms, error=refused, status=400)
    return await _send(request, op, responses, forms)


# -- the review step ---------------------------------------------------------------------------
# Accept with valid answers sends nothing: the person sees what will be sent (review) and chooses
# Send or Change. The review carries a signed token bound to the operation, the round and the
# digest of the exact answers; Send re-validates the posted answers and sends only if they are
# the reviewed ones.

#: the card's actions: ``accept`` (to the review), ``send`` / ``change`` (from the review),
#: ``decline`` / ``cancel`` (sent at once)
ANSWER_ACTIONS = ("accept", "send", "change", "decline", "cancel")
REVIEW_SALT = "mrtrweb.views.review"
#: seconds a review stays valid for Send (the round's own lifetime still applies)
REVIEW_MAX_AGE_S = 600
REVIEW_CHANGED_MESSAGE = ("These answers are not the ones you reviewed, so nothing was sent. "
                          "Check them and review them again.")
REVIEW_INVALID_MESSAGE = ("Your review is no longer valid (it expired or was damaged), so nothing was sent. "
                          "Review your answers again.")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def _answers_digest(op: Operation, rnd: Any, responses: dict[str, Any], forms: dict[str, Any]) -> str:
    """The digest of exactly what Send would send (and of the sampling card's own fields)."""
    provider_data = {key: f.provider_data() for key, f in forms.items() if hasattr(f, "provider_data")}
    return digest({"op": str(op.id), "round": rnd.number, "responses": _jsonable(responses),
                   "provider_data": _jsonable(provider_data)})


def _review_token(op: Operation, rnd: Any, responses: dict[str, Any], forms: dict[str, Any],
                  provided: dict[str, Any]) -> str:
    return signing.dumps({"op": str(op.id), "round": rnd.number, "digest": _answers_digest(op, rnd, responses, forms),
                          "provided": _jsonable(provided)}, salt=REVIEW_SALT, compress=True)


def _review_payload(request: HttpRequest, op: Operation, rnd: Any) -> tuple[dict[str, Any] | None, str]:
    """The posted review token's payload, or ``(None, reason)`` (the reason is for the log only)."""
    token = request.POST.get("review_token", "")
    if not token:
        return None, "no review token"
    try:
        payload = signing.loads(token, salt=REVIEW_SALT, max_age=REVIEW_MAX_AGE_S)
    except signing.SignatureExpired:
        return None, "review token expired"
    except signing.BadSignature:
        return None, "review token bad signature"
    if not isinstance(payload, dict) or payload.get("op") != str(op.id) or payload.get("round") != rnd.number:
        return None, "review token for another operation or round"
    if not isinstance(payload.get("provided"), dict) or not isinstance(payload.get("digest"), str):
        return None, "review token malformed"
    return payload, ""


def _check_review(request: HttpRequest, op: Operation, rnd: Any, responses: dict[str, Any],
                  forms: dict[str, Any]) -> str | None:
    """``None`` when the posted answers are the reviewed ones, else the message shown (reason logged)."""
    payload, reason = _review_payload(request, op, rnd)
    if payload is not None and payload["digest"] != _answers_digest(op, rnd, responses, forms):
        reason = "answers differ from the reviewed ones"
    if not reason:
        return None
    logger.warning("operation %s round %s: Send refused, nothing sent (%s)", op.id, rnd.number, reason)
    return REVIEW_CHANGED_MESSAGE if reason == "answers differ from the reviewed ones" else REVIEW_INVALID_MESSAGE


def _all_messages(forms: dict[str, Any]) -> None:
    """An invalid card: add the gate's messages for the fields Django accepted (see
    :meth:`SchemaForm.add_gate_errors_to_valid_fields`), so one Accept shows every problem."""
    for form in forms.values():
        if hasattr(form, "add_gate_errors_to_valid_fields"):
            form.add_gate_errors_to_valid_fields()


async def _precheck(op: Operation, rnd: Any, forms: dict[str, Any], responses: dict[str, Any]) -> str | None:
    """The gate's own checks of the answers, before they are reviewed (the gate checks them again
    when Send builds the retry): a form's content against its schema (pattern, bounds, item counts,
    formats: the per-field messages go on the form), a sampling/roots answer as a valid result.
    ``None`` when all pass; else the message shown, the refusal logged and audited (code only)
    as a refused answer is."""
    failed, code = None, ""
    for key, view in rnd.requests.items():
        response = responses.get(key)
        if view.kind == "form" and key in forms:
            try:
                await sync_to_async(forms[key].checked.validate, thread_sensitive=False)(response["content"])
            except ContentMismatch as exc:
                forms[key].add_gate_errors(exc.errors)
                failed, code = failed or "Some answers need attention.", code or "input_response_schema_mismatch"
        elif view.kind in sampling.DEPRECATED_KINDS:
            valid = _valid_list_roots_result if view.kind == "roots" else _valid_create_message_result
            if not (valid(response) and _within_depth(response) and is_strict_json(response)):
                failed, code = sampling.INVALID_ANSWER_MESSAGE, sampling.INVALID_ANSWER
    if failed is not None:
        logger.info("operation %s round %s: answer refused before review (%s)", op.id, rnd.number, code)
        try:
            await sync_to_async(audit.record)(op, "rejected", code=code, round_number=rnd.number,
                                              request_id=op.latest_request_id)
        except audit.AuditUnavailable:
            pass
    return failed


def _shown_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _form_rows(form: Any, content: dict[str, Any]) -> list[dict[str, Any]]:
    """Field label -> the value as it will be sent (server defaults filled as the gate fills them).
    Labels and option labels as the card showed them (bounded, :class:`~mrtrweb.results.ShownBudget`);
    a value longer than ``MAX_SHOWN_CHARS`` is shown cut, saying so (it is sent whole)."""
    rows = []
    defaults = getattr(form.checked, "defaults", {}) or {}
    shown_labels = getattr(form, "shown_labels", {})
    shown_options = getattr(form, "shown_options", {})
    for spec in form.checked.fields:
        row: dict[str, Any] = {"name": results.shown_text(spec.name, results.MAX_LABEL_CHARS),
                               "label": shown_labels.get(spec.name, spec.title), "kind": spec.kind,
                               "default": False, "omitted": False, "option": ""}
        if spec.name in content:
            value = content[spec.name]
        elif spec.name in defaults:
            value, row["default"] = defaults[spec.name], True
        else:
            row["omitted"] = True
            rows.append(row)
            continue
        cut = shown_options.get(spec.name, {})
        labels = {json.dumps(o.value): cut.get(_option_key(o.value), o.label) for o in spec.options}
        if spec.kind == "choice":
            label = labels.get(json.dumps(value))
            row["option"] = label if label not in (None, _shown_value(value)) else ""
        elif spec.kind == "multi" and isinstance(value, list):
            shown = [labels.get(json.dumps(v), _shown_value(v)) for v in value]
            row["option"] = ", ".join(shown) if shown != [_shown_value(v) for v in value] else ""
        row["value"] = results.shown_text(_shown_value(value))
        rows.append(row)
    return rows


def _review_context(op: Operation, rnd: Any, request: HttpRequest, forms: dict[str, Any],
                    responses: dict[str, Any], token: str) -> dict[str, Any]:
    items = []
    messages = results.shown_messages(rnd.requests)  # as the card showed them
    for key, view in rnd.requests.items():
        item: dict[str, Any] = {"key": key, "kind": view.kind, "message": messages[key]}
        response = responses.get(key) or {}
        if view.kind == "form":
            item["rows"] = _form_rows(forms[key], response.get("content") or {})
        elif view.kind == "url":
            item["url"] = view.url
        elif view.kind == "roots":
            item["roots"] = response.get("roots") or []
        elif view.kind == "sampling":
            content = response.get("content")
            blocks = content if isinstance(content, list) else [content]
            item["reply"] = {"model": str(response.get("model", "")), "role": str(response.get("role", "")),
                             "blocks": [sampling._block_text(b) for b in blocks]}
        items.append(item)
    hidden = [(name, value) for name, values in request.POST.lists() if name.startswith("in-") for value in values]
    return {"token": token, "items": items, "hidden": hidden}


async def _review_response(request: HttpRequest, op: Operation, rnd: Any, forms: dict[str, Any],
                           responses: dict[str, Any], provided: dict[str, Any]) -> HttpResponse:
    """The review of valid answers: nothing is sent; Send or Change follow."""
    token = _review_token(op, rnd, responses, forms, provided)
    review = _review_context(op, rnd, request, forms, responses, token)
    logger.info("operation %s round %s: answers reviewed", op.id, rnd.number)
    return await _panel_response(request, op, review=review, status=200)


async def _send(request: HttpRequest, op: Operation, responses: dict[str, Any], forms: dict[str, Any],
                *, deprecated: bool = False) -> HttpResponse:
    """Send ``responses`` as the retry of the round (exactly once: the gate settles races)."""
    try:
        await operations.answer_round(op, responses)
    except GateRejection as exc:
        cause = exc.__cause__
        if exc.code == "input_response_schema_mismatch" and exc.key in forms and hasattr(cause, "errors"):
            forms[exc.key].add_gate_errors(cause.errors)
            return await _panel_response(request, op, forms=forms, error="Some answers need attention.", status=400)
        if deprecated and exc.code == sampling.INVALID_ANSWER:
            return await _panel_response(request, op, forms=forms, error=sampling.INVALID_ANSWER_MESSAGE, status=400)
        return await _panel_response(request, op, error=operations.message_for(exc.code), status=409)
    except operations.OperationRefused as exc:
        # 503 only when a service of ours is down; a denied or ended round is a 409
        logger.info("operation %s: answer refused (%s), HTTP %s", op.id, exc.code, exc.status)
        return await _panel_response(request, op, error=exc.message, status=exc.status)
    return redirect("mrtrweb:operation", op_id=op.id)


async def _answer_deprecated(request: HttpRequest, op: Operation, rnd: Any, action: str, user: Any) -> HttpResponse:
    """Answer a card holding an allowed sampling or roots request (the deprecated exception).

    Decline/Cancel ends the operation (denied, ``deprecated_request_refused``): no retry is sent.
    Accept needs every form valid and every sampling request approved; roots are answered with
    the server's configured roots, sampling by the configured provider (called once, for the
    review: Send sends the reviewed reply); the gate validates both."""
    if action in ("decline", "cancel"):
        await operations.deny(op, "deprecated_request_refused")
        return redirect("mrtrweb:operation", op_id=op.id)
    try:
        forms = await sync_to_async(consent_forms)(rnd, request.POST)
        valid = await sync_to_async(lambda: all(f.is_valid() for f in forms.values()))()
        if not valid:
            await sync_to_async(_all_messages)(forms)
    except (ImportError, TypeError, AttributeError) as exc:  # a misconfigured SAMPLING_PROVIDER
        logger.error("sampling provider unusable: %s", exc)
        return await _panel_response(request, op, error=sampling.PROVIDER_FAILED_MESSAGE, status=503)
    if action == "change":
        return await _panel_response(request, op, forms=forms, status=200)
    if not valid:
        return await _panel_response(request, op, forms=forms, error="Some answers need attention.", status=400)
    responses: dict[str, Any] = {}
    for key, view in rnd.requests.items():
        if view.kind == "form":
            responses[key] = {"action": "accept", "content": forms[key].content()}
        elif view.kind == "url":
            responses[key] = {"action": "accept"}
        elif view.kind == "roots":
            responses[key] = sampling.roots_answer(op.server)
    sampled = [key for key, view in rnd.requests.items() if view.kind == "sampling"]
    if action == "send":
        payload, reason = _review_payload(request, op, rnd)
        provided = payload["provided"] if payload is not None else {}
        if payload is not None and set(provided) != set(sampled):
            reason = "review token does not cover the round's sampling requests"
        if reason:
            logger.warning("operation %s round %s: Send refused, nothing sent (%s)", op.id, rnd.number, reason)
            return await _panel_response(request, op, forms=forms, error=REVIEW_INVALID_MESSAGE, status=400)
        responses.update({key: provided[key] for key in sampled})  # the reply the person reviewed
        refused = _check_review(request, op, rnd, responses, forms)
        if refused is not None:
            return await _panel_response(request, op, forms=forms, error=refused, status=400)
        return await _send(request, op, responses, forms, deprecated=True)
    provided = {}
    if sampled:
        provider = sampling.get_provider()
        for key in sampled:
            try:
                provided[key] = await sampling.provide(provider, dict(rnd.requests[key].params), user=user,
                                                       operation=op, form_data=forms[key].provider_data())
            except Exception:  # noqa: BLE001 -- a provider failure sends nothing
                logger.exception("sampling provider failed for operation %s", op.id)
                return await _panel_response(request, op, forms=forms, error=sampling.PROVIDER_FAILED_MESSAGE,
                                             status=502)
        responses.update(provided)
    failed = await _precheck(op, rnd, forms, responses)
    if failed is not None:
        return await _panel_response(request, op, forms=forms, error=failed, status=400)
    return await _review_response(request, op, rnd, forms, responses, provided)


def _expired(state: Any, op: Operation) -> bool:
    """Whether the open round of ``op`` is past its lifetime (not merely answered concurrently)."""
    if state is not None:
        return state.round is not None and state.round.expires_at <= time.time()
    # no binding at all: gone after its lifetime (the store keeps it TTL + a minute)
    return (timezone.now() - op.updated_at).total_seconds() > float(conf.get("TTL_S"))


@login_required
@require_POST
async def operation_stop(request: HttpRequest, op_id: Any) -> HttpResponse:
    """Stop an operation whose round waits for the person (nothing is sent; outcome denied/cancelled)."""
    user = await _user(request)
    try:
        op = await _operation_for(user, op_id)
    except access.AccessEnded as exc:
        await _record_refused_after_access(exc, "stop")
        raise
    if not await operations.stop_operation(op):
        return await _panel_response(request, op, error=operations.message_for("inactive_mrtr_round"), status=409)
    return redirect("mrtrweb:operation", op_id=op.id)


async def _record_refused_after_access(exc: access.AccessEnded, what: str) -> None:
    """An answer or a stop posted by the owner after their access ended: refused (404, nothing
    sent) and recorded as ``rejected`` with code ``access_revoked``."""
    logger.warning("%s on operation %s refused: access ended (%s)", what, exc.op.id, exc.cause)
    try:
        await sync_to_async(audit.record)(exc.op, "rejected", code=access.ACCESS_REVOKED,
                                          reason=f"{what} after access ended: {exc.cause}", round_number=exc.op.rounds,
                                          request_id=exc.op.latest_request_id)
    except audit.AuditUnavailable:
        pass


@login_required
@require_GET
async def operation_result(request: HttpRequest, op_id: Any) -> HttpResponse:
    """The stored result of the user's completed operation as a download (``mrtrweb.results.download``):
    an attachment, ``nosniff``, a sandboxing CSP, never rendered as a page. 404: not the user's,
    or no result."""
    user = await _user(request)
    op = await _operation_for(user, op_id)
    if op.status != Operation.Status.COMPLETED or op.result is None:
        raise Http404("No result")
    body, content_type, filename = results.download(op)
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, no-store"
    return response


async def _record_foreign_attempt(user: Any, op_id: Any) -> None:
    """An answer posted by someone who does not own the operation: recorded (the owner's tenant
    chain, the attempting user's digest), never acted on."""
    try:
        op = await Operation.objects.select_related("server", "tenant").aget(pk=op_id)
    except (Operation.DoesNotExist, ValueError):
        return
    logger.warning("answer attempt on operation %s by another user", op.id)
    try:
        await sync_to_async(audit.record)(op, "rejected", code="mrtr_identity_or_argument_mismatch",
                                          reason="answer attempt by another user", round_number=op.rounds,
                                          request_id=op.latest_request_id, user_id=user.pk)
    except audit.AuditUnavailable:
        pass


async def _panel_response(request: HttpRequest, op: Operation, *, status: int, **kwargs: Any) -> HttpResponse:
    """The operation's page as it is now. A card or review (``forms``/``review``) whose round was
    answered meanwhile (from another tab or worker) is not shown: 409 with the inactive-round
    message instead, so the person knows this answer was not sent."""
    op = await Operation.objects.select_related("server", "tenant").aget(pk=op.pk)
    if (kwargs.get("forms") or kwargs.get("review")) and op.status != Operation.Status.AWAITING_INPUT:
        logger.info("operation %s: card or review not shown, the round is no longer open (%s)", op.id, op.status)
        kwargs = {"error": operations.message_for("inactive_mrtr_round")}
        status = 409
    ctx = await sync_to_async(panel_context)(op, **kwargs)
    ctx["csrf_token"] = get_token(request)
    return TemplateResponse(request, "mrtrweb/operation.html", ctx, status=status)

