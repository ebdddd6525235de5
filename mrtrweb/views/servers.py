"""The server list and a server's page: its tools, prompts and resources listed live through the
person's connection (:mod:`mrtrweb.servers.connections`), server text bounded and escaped.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from .. import catalog, conf, operations
from ..servers import connections
from ..tenancy import access
from ..text import names, results
from ..authz import pages as authz_pages
from ..mcp import McpCallError
from ..mcp.tasks import flavor as task_flavor
from ..models import McpServer, Membership, Operation, ServerLogLevel
from .common import _server_for, _user, login_required
from .server_log import level_of

logger = logging.getLogger("mrtrweb.views")


@login_required
async def index(request: HttpRequest) -> HttpResponse:
    user = await _user(request)
    memberships = [m async for m in Membership.objects.filter(user=user).select_related("tenant")]
    # the tenants' servers and the person's own (issue 29), never another person's personal server
    servers = [s async for s in McpServer.objects.filter(access.mine(user.pk), tenant__memberships__user=user,
                                                         enabled=True).select_related("tenant")]
    # only operations the user may still act on (a server disabled or a tenant left: not listed)
    ops = [o async for o in Operation.objects.filter(access.mine(user.pk, prefix="server__"), user=user,
                                                     server__enabled=True, tenant__memberships__user=user)
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
    identity = None  # serverInfo, instructions and capabilities, once connected (mrtrweb.catalog)
    unreachable = None  # why a connect failed (mrtrweb.mcp.reachability), with Try again
    tasks_declared = False  # whether a tool that runs only as a task is called (as a task) here
    log_levels = None  # the levels a person may ask log messages at, where the server declares logging
    auth = await authz_pages.server_auth(user, server)  # OAuth per person: Connect / Connected (issue 13)
    if not auth["needs_connect"]:  # without the person's connection a listing would only get a 401
        try:
            # the connection operations use too: the same declared capabilities and protocol (issue 15)
            conn = await connections.connection_for(user, server)
            negotiated = conn.protocol_version
            tasks_declared = task_flavor(conn.server_capabilities) is not None
            identity = catalog.server_identity(conn.server_info, conn.instructions, conn.server_capabilities)
            if isinstance((conn.server_capabilities or {}).get("logging"), dict):
                log_levels = ServerLogLevel.Level.choices
            conn.watch_listings()  # a list_changed from the server is pushed to this page
            listed = (await conn.list_tools(), await _listing(conn.list_prompts, "name"),
                      await _listing(conn.list_resource_templates, "uriTemplate"),
                      await _listing(conn.list_resources, "uri"))
            # off the event loop: a listing may hold tens of thousands of items
            (tools, prompts, templates, resources), duplicates, not_shown = await sync_to_async(
                _shown_lists, thread_sensitive=False)(*listed)
        except McpCallError as exc:
            logger.info("listing tools of server %s failed (%s, %s)", server.pk, exc.code, getattr(exc, "reason", None))
            error = operations.failure_message(exc)
            unreachable = {"reason": getattr(exc, "reason", None), "status": exc.http_status}
            auth["needs_connect"] = exc.code in authz_pages.AUTH_ERROR_CODES and auth["mode"] == "oauth_user"
    # who reaches the settings: a tenant server's admins; a personal server's owner (the only one
    # server_for lets through)
    is_admin = server.personal or await Membership.objects.filter(tenant_id=server.tenant_id, user=user,
                                                                  role=Membership.Role.ADMIN).aexists()
    return TemplateResponse(request, "mrtrweb/server.html", {"server": server, "tools": tools, "prompts": prompts,
                                                             "tasks_declared": tasks_declared,
                                                             "templates": templates, "resources": resources,
                                                             "error": error, "auth": auth,
                                                             "is_admin": is_admin, "duplicates": duplicates,
                                                             "not_shown": not_shown, "negotiated": negotiated,
                                                             "identity": identity, "unreachable": unreachable,
                                                             "max_shown": names.MAX_LISTED_SHOWN,
                                                             "log_levels": log_levels,
                                                             "log_level": await level_of(user, server)
                                                             if log_levels else ""})


def _shown_lists(*listed: list[dict[str, Any]]) -> tuple[list[list[dict[str, Any]]], int, int]:
    """The server page's tools, prompts, resource templates and resources (each name once, at most
    ``MAX_LISTED_SHOWN`` of each, descriptions capped), how many duplicates were dropped and how many
    items are not shown. Blocking: run it off the event loop."""
    shown, duplicates, not_shown = [], 0, 0
    for items, (key, what, kind) in zip(listed, (("name", "tool", "tool"), ("name", "prompt", "prompt"),
                                                 ("uriTemplate", "resource template", "template"),
                                                 ("uri", "resource", "resource")), strict=True):
        items, dropped = names.unique_items(items, key, what=what)
        duplicates += dropped
        not_shown += max(len(items) - names.MAX_LISTED_SHOWN, 0)  # a page of bounded size, whatever is listed
        del items[names.MAX_LISTED_SHOWN:]
        results.cap_descriptions(items, results.LISTED_DESCRIPTION_CHARS)
        shown.append(catalog.describe_all(kind, items))  # titles, badges, schemas, icons (issue 28)
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


def _page_texts(name: Any, description: Any) -> tuple[results.ShownBudget, Any, Any]:
    """A call page's budget of server text (``MAX_SHOWN_CHARS``), and the name in its heading and
    its description as shown, both taken from that budget; its form's labels take the rest."""
    budget = results.ShownBudget()
    heading = budget.label(name)
    return budget, heading, budget.text(description, int(conf.get("MAX_SHOWN_CHARS")))
