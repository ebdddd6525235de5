"""The operation page and its panel (the round's card, rendered server-side), Stop, and the
result download.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_POST

from ..tenancy import access
from .. import operations
from ..text import results
from ..models import Operation
from ..consent.panels import panel_context
from ..operations import serverlog
from ..mcpapps.sandbox import sandbox_origin
from ..appcalls import sampling as app_sampling
from . import apps as mcp_apps
from .common import (NOTHING_TO_STOP, _current, _operation_for, _panel_response, _record_refused_after_access,
                     _user, login_required)

def _log_lines(kept: Any) -> list[tuple[str, str, str, str]]:
    """The kept server log as the page shows it: ``(level, logger, data, held)``, ``held`` the
    sentence of a :data:`~mrtrweb.operations.serverlog.HELD` line (else ``""``)."""
    out = []
    for line in kept if isinstance(kept, list) else []:
        if not isinstance(line, list) or len(line) != 3:
            continue
        level, name, data = (str(part) for part in line)
        if level == serverlog.HELD:
            held = gettext("({n} more messages were not shown: too many, too fast)").replace("{n}", data)
            out.append(("", "", "", held))
        else:
            out.append((level, name, data, ""))
    return out


async def _render_operation(request: HttpRequest, op_id: Any, template: str) -> HttpResponse:
    user = await _user(request)
    op = await _current(user, op_id)
    ctx = await sync_to_async(panel_context)(op)
    ctx["csrf_token"] = get_token(request)
    ctx["kept_log_lines"] = serverlog.KEPT_LINES  # the page's server log pane says how many are kept
    ctx["log_lines"] = _log_lines(op.server_log)
    app = await sync_to_async(_app_host)(request, op) if template == "mrtrweb/operation.html" else None
    if app is not None and await mcp_apps.tool_has_app(user, op) is False:
        app = None  # the tool has no app: the page does not ask for one
    ctx["app_proxy_url"] = app
    ctx["app_conversation"] = await sync_to_async(_app_conversation)(op) if app else None
    ctx["app_sampling"] = bool(app) and await sync_to_async(app_sampling.offered)(op.server, op.tenant_id)
    response = TemplateResponse(request, template, ctx)
    if app is not None:  # the page may frame the sandbox origin, nothing else (issue 31)
        response._csp_update = {"frame-src": [sandbox_origin()]}  # type: ignore[attr-defined]
    return response


def _app_host(request: HttpRequest, op: Any) -> str | None:
    """The sandbox proxy's URL when this operation's page may host its tool's app (a tool call on a
    server with apps on, live or completed with a result: an ended call without one has no app to
    show, :func:`mrtrweb.views.apps.app_start` answers it 409), else None. Whether the tool has an
    app is asked by the page's view (:func:`mrtrweb.views.apps.tool_has_app`)."""
    if op.method != "tools/call" or not mcp_apps.apps_on(op.server):
        return None
    if op.status not in Operation.LIVE and (op.status != Operation.Status.COMPLETED or not isinstance(op.result, dict)):
        return None
    if mcp_apps.site_origin(request) == sandbox_origin():
        return None
    return mcp_apps.proxy_url(request)


def _app_conversation(op: Any) -> str | None:
    """Sync: the conversation an app on this page may hand ``ui/message`` / ``ui/update-model-context``
    to (issue 31 item 4, issue 32 item 5: :func:`mrtrweb.chat.app_offers.offer` decides again), or
    None (the app is answered "not offered", -32601): the call must be one the model proposed in a
    conversation of this person, and the tenant must have a model now."""
    from ..chat import choice
    from ..models import Conversation

    detail = op.initiator_detail if isinstance(op.initiator_detail, dict) else {}
    if op.initiator != Operation.Initiator.MODEL or not detail.get("conversation"):
        return None
    if choice.current(op.tenant_id) is None:
        return None
    found = Conversation.objects.filter(pk=detail["conversation"], user_id=op.user_id).values_list("pk", flat=True).first()
    return str(found) if found else None


@login_required
async def operation_detail(request: HttpRequest, op_id: Any) -> HttpResponse:
    return await _render_operation(request, op_id, "mrtrweb/operation.html")


@login_required
async def operation_panel(request: HttpRequest, op_id: Any) -> HttpResponse:
    """The panel alone (the page's fallback refresh when the WebSocket is down)."""
    return await _render_operation(request, op_id, "mrtrweb/_panel.html")


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
        return await _panel_response(request, op, error=gettext(NOTHING_TO_STOP), status=409)
    return redirect("mrtrweb:operation", op_id=op.id)


@login_required
@require_GET
async def operation_result(request: HttpRequest, op_id: Any) -> HttpResponse:
    """The stored result of the user's completed operation as a download (``mrtrweb.text.results.download``):
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
