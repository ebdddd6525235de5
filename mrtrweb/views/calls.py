"""Starting a call: the tool page (a form derived from the tool's ``inputSchema``), the prompt and
resource forms; a valid form starts an operation (:func:`mrtrweb.operations.start_operation`).
"""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _, gettext_noop

from ..completions import declares_completions
from ..servers import connections
from ..text import display, names, results
from .. import argforms, catalog, operations
from ..argforms import NestedArgumentsForm, ROWS_ACTION
from ..models import Operation
from ..consent.forms import JsonArgumentsForm, refuse_lone_surrogates, SchemaForm, stand_in_keys
from ..gate import check_requested_schema, SchemaRefused
from ..mcp import McpCallError
from ..operations.tasks import refused as task_refused, requires_task, TASK_REQUIRED_MESSAGE
from ..mcpapps import meta as app_meta
from .common import _server_for, _user, login_required
from .servers import _find_listed, _listing, _page_texts

logger = logging.getLogger("mrtrweb.views")


def _arguments_form(schema: Any, data: Any = None, budget: results.ShownBudget | None = None, *,
                    values: dict[str, Any] | None = None, as_json: bool = False,
                    ) -> SchemaForm | NestedArgumentsForm | JsonArgumentsForm:
    """The call form of a tool whose ``inputSchema`` is ``schema``: a flat one's fields
    (:class:`SchemaForm`, checked by the gate's reading), generated fields for nested objects,
    arrays, nullable and variant parts (:mod:`mrtrweb.argforms`), else -- or when the person asked
    for it (``as_json``), or posted the JSON box (``arguments``) -- the JSON box, its starting text
    built from the schema. ``values``: arguments to show ("Change the arguments")."""
    schema = schema if isinstance(schema, dict) else {"type": "object"}
    # the JSON box was posted: its ``arguments`` and no field of the schema's form (a page shows one
    # form; a scripted client posting both gets the fields, as before the JSON box could be chosen)
    posted_json = data is not None and "arguments" in data and not any(k.startswith("arg-") for k in data)
    fell_back = False
    if not as_json and not posted_json:
        try:
            checked = check_requested_schema(schema)
        except SchemaRefused:
            pass
        else:
            form: SchemaForm | NestedArgumentsForm = SchemaForm(checked, data=data, prefix="arg", budget=budget)
            if values is not None:
                _prefill(form, values)
            return form
        try:
            return NestedArgumentsForm(schema, argforms.read_schema(schema), data, values=values, budget=budget)
        except argforms.Unsupported as exc:
            logger.info("tool arguments as the JSON box: the inputSchema has no fields here (%s)", exc.code)
            fell_back = True
    box = JsonArgumentsForm(schema, data=data)
    box.initial["arguments"] = (json.dumps(values, ensure_ascii=False, indent=2) if values is not None
                                else argforms.template_for(schema))
    box.has_fields = not fell_back and _expressible(schema)  # "Fill in fields instead" is offered
    return box


def _expressible(schema: dict[str, Any]) -> bool:
    """Whether the tool page can show ``schema`` as fields (flat, or generated)."""
    try:
        check_requested_schema(schema)
        return True
    except SchemaRefused:
        pass
    try:
        NestedArgumentsForm(schema, argforms.read_schema(schema))  # its own budget: nothing of the page's spent
        return True
    except argforms.Unsupported:
        return False


def _previous_arguments(user: Any, server: Any, tool: str, op_id: str) -> dict[str, Any] | None:
    """Sync: the arguments the user's own ``tools/call`` of ``tool`` on ``server`` (operation
    ``op_id``) sent, or None (not theirs, another call, not an id: the form is then left empty)."""
    try:
        op = Operation.objects.get(pk=op_id, user_id=user.pk, server_id=server.pk, method="tools/call")
    except (Operation.DoesNotExist, ValueError, ValidationError):
        return None
    params = results.stored_params(op.params)
    if not isinstance(params, dict) or params.get("name") != tool or not isinstance(params.get("arguments"), dict):
        return None
    return params["arguments"]


def _prefill(form: SchemaForm, arguments: dict[str, Any]) -> None:
    """A flat call form showing ``arguments``: each field the schema still has gets its value;
    what the schema no longer has is left out (the generated and JSON forms take ``values``)."""
    for name, value in arguments.items():
        key = form.keys.get(name) if isinstance(name, str) else None
        if key in form.fields:
            form.initial[key] = value


@login_required
async def tool_call(request: HttpRequest, server_id: int, tool: str | None = None) -> HttpResponse:
    """A tool's call page, the tool named by ``?name=`` or ``?sha256=`` (:mod:`mrtrweb.text.names`; ``tool``:
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
    destructive = spec is not None and catalog.is_destructive(spec)  # the warning here and on its cards
    # whether the server said destructiveHint: true itself, or the tool is destructive by MCP's default
    destructive_source = ("server" if catalog.tool_hints(spec).destructive_stated else "default") if destructive else ""
    hints = {"title": catalog.title_of("tool", spec), "badges": catalog.describe("tool", spec)["catalog"]["badges"]} \
        if spec is not None else None  # no schema rendered here: the form is the schema
    # a tool whose _meta.ui.visibility leaves out "model" is its app's alone: never a person's call
    app_only = spec is not None and app_meta.app_only(spec)
    if app_only:
        task_required = True  # shown, never called: the same path as a task-only tool
        if request.method == "POST":
            logger.info("call of an app-only tool on server %s refused: nothing sent", server.pk)
    if task_required and not app_only and request.method == "POST":
        logger.info("call of a task-only tool on server %s refused: nothing sent", server.pk)
        error = TASK_REQUIRED_MESSAGE
    if app_only and request.method == "POST":
        error = APP_ONLY_MESSAGE
    rows_action = request.POST.get(f"arg-{ROWS_ACTION}") if request.method == "POST" else None
    if rows_action is not None and not task_required:
        # "Add a row" / "Remove": the same page again with the rows changed; nothing is sent
        changed = NestedArgumentsForm.rows_changed(request.POST, rows_action)
        form = _arguments_form(schema, changed if changed is not None else request.POST, budget)
        if isinstance(form, NestedArgumentsForm):
            form.quiet()
        else:
            form = _arguments_form(schema, budget=budget)
    elif request.method == "POST" and request.POST.get(CHECK_ONLY) == "1":
        return await _checked_only(schema, request.POST, error)
    elif request.method == "POST" and not task_required:
        form = _arguments_form(schema, request.POST, budget)
        # off the event loop: checking a server's schema may take up to argschema.CHECK_TIMEOUT_S
        if not error and await sync_to_async(form.is_valid, thread_sensitive=False)():
            try:
                op = await operations.start_operation(user=user, server=server, method="tools/call", name=tool,
                                                      params={"name": tool, "arguments": form.content()},
                                                      destructive=destructive,
                                                      output_schema=(spec or {}).get("outputSchema"))
            except operations.OperationRefused as exc:
                error, refused = exc.message, exc.status
            else:
                return redirect("mrtrweb:operation", op_id=op.id)
    elif request.method in ("GET", "POST"):
        previous = None
        if request.GET.get("from"):  # "Change the arguments" of an ended operation: its arguments, to edit
            previous = await sync_to_async(_previous_arguments)(user, server, tool, request.GET["from"])
        form = _arguments_form(schema, budget=budget, values=previous, as_json=request.GET.get("json") == "1")
    else:
        return HttpResponseNotAllowed(["GET", "POST"])
    # the schemas, one click away, from what the page's budget of server text has left
    input_schema = budget.text(catalog.pretty_schema((spec or {}).get("inputSchema")), catalog.MAX_SCHEMA_CHARS)
    output_schema = budget.text(catalog.pretty_schema((spec or {}).get("outputSchema")), catalog.MAX_SCHEMA_CHARS)
    # the other way to give the arguments: the JSON box, or back to the fields (same page, ASCII query)
    query = {k: v for k, v in request.GET.items() if k != "json"}
    json_url = "?" + urllib.parse.urlencode({**query, "json": "1"})
    fields_url = "?" + urllib.parse.urlencode(query)
    return TemplateResponse(request, "mrtrweb/tool.html",
                            {"json_url": json_url, "fields_url": fields_url, "server": server,
                             "json_box": isinstance(form, JsonArgumentsForm), "tool": spec or {"name": tool},
                             "form": form, "error": error,
                             "heading": heading, "description": description, "task_required": task_required,
                             "runs_as_task": runs_as_task, "app_only": app_only, "destructive": destructive,
                             "destructive_source": destructive_source, "hints": hints,
                             "input_schema": input_schema, "output_schema": output_schema,
                             "task_required_message": APP_ONLY_MESSAGE if app_only else TASK_REQUIRED_MESSAGE},
                            status=409 if task_required and request.method == "POST" else
                            200 if not error else 503 if not spec or refused == 503 else 200)


#: what the person reads on the page of a tool only its app may call (issue 31; nothing is sent)
APP_ONLY_MESSAGE = gettext_noop(
    'This tool is for its app alone (the server lists it with _meta.ui.visibility ["app"]): it is not '
    "offered as a call of yours. Nothing was sent.")


#: a POST of the JSON box with this field "1" only checks its arguments (argcheck.js, as the person types)
CHECK_ONLY = "check_only"


async def _checked_only(schema: Any, data: Any, error: Any) -> HttpResponse:
    """The JSON box's arguments checked against the tool's ``inputSchema`` exactly as "Call tool"
    checks them (:class:`JsonArgumentsForm`: bounded, nothing fetched), and nothing sent:
    ``{"ok": true}`` or ``{"ok": false, "error": "<the form's message>"}`` (text, shown as text).
    A server whose tools could not be read now answers ``{"ok": null}`` (no verdict)."""
    if error:
        return JsonResponse({"ok": None})
    form = JsonArgumentsForm(schema, data={"arguments": data.get("arguments", "")})
    if await sync_to_async(form.is_valid, thread_sensitive=False)():
        return JsonResponse({"ok": True})
    return JsonResponse({"ok": False, "error": " ".join(str(m) for m in form.errors.get("arguments", []))[:500]})


#: the most fields a prompt's arguments or a resource template's variables make on a call page;
#: a server asking for more gets a form that cannot be sent (it says why), not thousands of fields
MAX_CALL_FIELDS = 100


class _BoundedCallForm(forms.Form):
    """A call page's form whose fields a server chooses: at most :data:`MAX_CALL_FIELDS`."""

    too_many = 0  #: how many fields the server asked for, when that is over the cap
    #: a required argument's label is marked like the card's (app.css); checked on the server
    required_css_class = "required"
    use_required_attribute = False

    def has_required(self) -> bool:
        """Whether any argument must be given (the page then explains its asterisk)."""
        return any(f.required for f in self.fields.values())

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
    (``budget``: the page's :class:`~mrtrweb.text.results.ShownBudget`)."""

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
                       key: str, make_form, build, wanted: str | None = None,
                       complete: tuple[str, str] | None = None) -> HttpResponse:
    """The shared flow of a prompt or resource call page: find ``title`` (or the name whose digest
    is ``wanted``) among the server's listing (``list_name`` of the connection, items keyed by
    ``key``; the first of a repeated name), show ``make_form(spec, data, budget)`` (``budget``: the
    page's :class:`~mrtrweb.text.results.ShownBudget`, the heading and description taken), and on a valid POST
    start ``build(spec, form) -> (method, name, params)``. 404: not listed (or nothing named).
    ``complete``: ``(kind, name query parameter)`` of the suggestions endpoint
    (:mod:`.completions`), offered where the server declares ``completions``."""
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
    if complete is not None and getattr(form, "keys", None) and declares_completions(conn.server_capabilities):
        ctx["complete_url"] = (reverse("mrtrweb:complete", args=[server.pk, complete[0]]) + "?"
                               + names.name_query(spec[key], complete[1]))
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
        complete=("prompt", names.NAME_PARAM),
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
        key="uriTemplate", complete=("template", "template"),
        make_form=lambda spec, data, budget: ResourceTemplateForm(spec["uriTemplate"], data, prefix="arg", budget=budget),
        build=lambda spec, form: ("resources/read", form.uri(), {"uri": form.uri()}))
