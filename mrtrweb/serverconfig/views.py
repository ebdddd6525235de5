"""The servers pages (issue 29): a tenant admin's servers, a person's own servers.

* ``/tenants/<slug>/servers/`` (``mrtrweb:tenant-servers``): the tenant's servers with their state,
  Add / Edit / Settings / Disable / Enable / Remove; the personal servers of its members (name,
  origin, owner, state; never a credential) with Disable / Enable; the switch that allows personal
  servers (turning it off disables every personal server: their waiting rounds end). Tenant
  admins of that tenant only.
* ``/tenants/<slug>/servers/add/``: Add (name, Streamable HTTP URL, protocol; a ``server.json``
  may fill it in), then the server's settings page (authorization, sampling, roots).
* ``/tenants/<slug>/my-servers/`` and ``.../my-servers/add/``: a member's own servers, when the
  tenant allows them.
* ``/servers/<id>/edit/``, ``/servers/<id>/state/`` (POST ``enabled=0|1``), ``/servers/<id>/remove/``
  (a confirmation page, then POST): a tenant server by its tenant's admins; a personal server by its
  owner (its tenant's admins may disable it, and enable it again once they did; the owner may not
  enable or remove a server an admin disabled, nor add or re-point one of theirs to its origin).

Anyone else: 404. Every POST carries Django's CSRF token. Disabling and removing go through the
ORM, whose signals end the server's pending operations (:mod:`mrtrweb.operations.revocation`:
``denied``, ``access_revoked``, nothing sent). Each change and its audit event (:mod:`.events`)
are one transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from .. import conf
from ..models import McpServer, Membership, Operation, Tenant
from ..tenancy import access
from . import events, limits
from .forms import RegistryImportForm, ServerForm

logger = logging.getLogger("mrtrweb.serverconfig")


# -- who may do what -------------------------------------------------------------------------------

def _tenant_for(user: Any, slug: str, *, admin: bool) -> Tenant:
    """The tenant ``slug`` of which ``user`` is an active member (an admin with ``admin``), else 404."""
    memberships = Membership.objects.filter(user=user, tenant__slug=slug)
    if admin:
        memberships = memberships.filter(role=Membership.Role.ADMIN)
    membership = memberships.select_related("tenant").first()
    if membership is None or access.denial(user.pk, membership.tenant_id):
        raise Http404("No such tenant")
    return membership.tenant


def _is_admin(user: Any, tenant_id: Any) -> bool:
    return Membership.objects.filter(user=user, tenant_id=tenant_id, role=Membership.Role.ADMIN).exists()


def _server_as(user: Any, server_id: Any) -> tuple[McpServer, str]:
    """The server and how ``user`` may manage it: ``"admin"`` (a tenant server, its tenant's
    admin), ``"owner"`` (their personal server), ``"overseer"`` (someone's personal server, its
    tenant's admin: disable / enable only). Else 404."""
    server = McpServer.objects.select_related("tenant", "owner").filter(pk=server_id).first()
    if server is None or access.denial(user.pk, server.tenant_id):
        raise Http404("No such server")
    if server.owner_id is not None and server.owner_id == user.pk:
        return server, "owner"
    if _is_admin(user, server.tenant_id):
        return server, "overseer" if server.owner_id is not None else "admin"
    raise Http404("No such server")


def _back(server: McpServer, role: str) -> str:
    if role == "owner":
        return reverse("mrtrweb:own-servers", args=[server.tenant.slug])
    return reverse("mrtrweb:tenant-servers", args=[server.tenant.slug])


def _pending(server: McpServer) -> int:
    return Operation.objects.filter(server=server, status__in=access.PENDING).count()


# -- the lists -------------------------------------------------------------------------------------

def _tenant_servers(request: HttpRequest, user: Any, slug: str) -> HttpResponse:
    tenant = _tenant_for(user, slug, admin=True)
    servers = list(McpServer.objects.filter(tenant=tenant, owner__isnull=True).order_by("name"))
    personal = list(McpServer.objects.filter(tenant=tenant, owner__isnull=False).select_related("owner")
                    .order_by("owner__username", "name"))
    return TemplateResponse(request, "mrtrweb/serverconfig/tenant_servers.html",
                            {"tenant": tenant, "servers": servers, "personal": personal, "count": len(servers),
                             "max_servers": conf.get("MAX_TENANT_SERVERS")})


@login_required
async def tenant_servers(request: HttpRequest, slug: str) -> HttpResponse:
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    user = await request.auser()
    return await sync_to_async(_tenant_servers)(request, user, slug)


def _own_servers(request: HttpRequest, user: Any, slug: str) -> HttpResponse:
    tenant = _tenant_for(user, slug, admin=False)
    servers = list(McpServer.objects.filter(tenant=tenant, owner=user).order_by("name"))
    return TemplateResponse(request, "mrtrweb/serverconfig/own_servers.html",
                            {"tenant": tenant, "servers": servers, "allowed": tenant.allow_personal_servers, "count": len(servers),
                             "max_servers": conf.get("MAX_PERSONAL_SERVERS")})


@login_required
async def own_servers(request: HttpRequest, slug: str) -> HttpResponse:
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    user = await request.auser()
    return await sync_to_async(_own_servers)(request, user, slug)


def _personal_switch(request: HttpRequest, user: Any, slug: str) -> HttpResponse:
    tenant = _tenant_for(user, slug, admin=True)
    allow = request.POST.get("allow") == "1"
    with transaction.atomic():
        tenant = limits.lock_tenant(tenant.pk)
        if tenant.allow_personal_servers != allow:
            tenant.allow_personal_servers = allow
            tenant.save(update_fields=["allow_personal_servers"])
            personal_switch_saved(tenant, user.pk)
    logger.info("tenant %s: personal servers %s by user %s", tenant.pk, "allowed" if allow else "not allowed", user.pk)
    return HttpResponseRedirect(reverse("mrtrweb:tenant-servers", args=[tenant.slug]))


def personal_switch_saved(tenant: Tenant, user_id: Any) -> None:
    """What follows ``tenant.allow_personal_servers`` saved with a new value (in its transaction,
    the tenant's row locked): the ``tenant_changed`` event and, when turned off, every enabled
    personal server of the tenant disabled (each through the ORM: the revocation signals end their
    waiting rounds), each a ``server_disabled`` event. The servers page and the superuser's admin
    both call it."""
    events.tenant_changed(tenant, user_id, tenant.allow_personal_servers)
    if not tenant.allow_personal_servers:
        for server in McpServer.objects.filter(tenant=tenant, owner__isnull=False, enabled=True):
            server.enabled = False
            server.save(update_fields=["enabled", "updated_at"])
            events.server_enabled(server, user_id, False)


@login_required
@require_POST
async def personal_switch(request: HttpRequest, slug: str) -> HttpResponse:
    """POST ``allow=1|0``: whether the tenant's members may add personal servers."""
    user = await request.auser()
    return await sync_to_async(_personal_switch)(request, user, slug)


# -- Add, Edit -------------------------------------------------------------------------------------

def _add(request: HttpRequest, user: Any, slug: str, *, personal: bool) -> HttpResponse:
    tenant = _tenant_for(user, slug, admin=not personal)
    owner = user if personal else None
    if personal and not tenant.allow_personal_servers:
        raise Http404("Personal servers are not allowed in this tenant")
    importer, notes, status, limit_error = RegistryImportForm(), [], 200, ""
    form = ServerForm(tenant=tenant, owner=owner)
    if request.method == "POST" and "import" in request.POST:
        importer = RegistryImportForm(request.POST, request.FILES)
        if importer.is_valid():
            imported = importer.cleaned_data["imported"]
            notes = imported.notes
            form = ServerForm(initial={"name": imported.name, "url": imported.url}, tenant=tenant, owner=owner)
            importer = RegistryImportForm()
        else:
            status = 400
            logger.info("tenant %s: a server.json was refused (%s)", tenant.pk,
                        ", ".join(e.code or "invalid" for e in importer.non_field_errors().as_data()))
    elif request.method == "POST":
        form = ServerForm(request.POST, tenant=tenant, owner=owner)
        if form.is_valid():
            try:
                with transaction.atomic():
                    locked = limits.lock_tenant(tenant.pk)  # as the allowance switch: it holds at commit
                    if personal and not locked.allow_personal_servers:
                        raise Http404("Personal servers are not allowed in this tenant")  # turned off meanwhile
                    limits.check_room(tenant.pk, owner.pk if owner else None)
                    server = form.save(commit=False)
                    server.added_by = user
                    server.save()
                    events.server_added(server, user.pk)
            except limits.LimitReached as exc:
                logger.info("tenant %s: a server was refused (%s)", tenant.pk, exc.code)
                limit_error, status = exc.message, 400
            else:
                logger.info("server %s added to tenant %s by user %s%s", server.pk, tenant.pk, user.pk,
                            " (personal)" if personal else "")
                return HttpResponseRedirect(reverse("mrtrweb:server-settings", args=[server.pk]))
        else:
            status = 400
            logger.info("tenant %s: a server was refused (%s)", tenant.pk, _codes(form))
    elif request.method != "GET":
        return HttpResponseNotAllowed(["GET", "POST"])
    return TemplateResponse(request, "mrtrweb/serverconfig/server_form.html",
                            {"tenant": tenant, "form": form, "importer": importer, "notes": notes,
                             "personal": personal, "limit_error": limit_error, "adding": True,
                             "back": reverse("mrtrweb:own-servers" if personal else "mrtrweb:tenant-servers",
                                             args=[tenant.slug])}, status=status)


def _codes(form: Any) -> str:
    return ", ".join(sorted({e.code or "invalid" for errs in form.errors.as_data().values() for e in errs}))


@login_required
async def server_add(request: HttpRequest, slug: str) -> HttpResponse:
    """A tenant admin adds one of the tenant's servers."""
    user = await request.auser()
    return await sync_to_async(_add)(request, user, slug, personal=False)


@login_required
async def own_server_add(request: HttpRequest, slug: str) -> HttpResponse:
    """A member adds a server of their own (where the tenant allows it)."""
    user = await request.auser()
    return await sync_to_async(_add)(request, user, slug, personal=True)


def _edit(request: HttpRequest, user: Any, server_id: Any) -> HttpResponse:
    server, role = _server_as(user, server_id)
    if role == "overseer":
        raise Http404("No such server")
    status = 200
    if request.method == "POST":
        form = ServerForm(request.POST, instance=server, tenant=server.tenant, owner=server.owner)
        if form.is_valid():
            with transaction.atomic():
                form.save()
                events.server_changed(server, user.pk, form.changed_data)
            logger.info("server %s changed by user %s (%s)", server.pk, user.pk, ", ".join(form.changed_data) or "nothing")
            return HttpResponseRedirect(_back(server, role))
        status = 400
        logger.info("server %s: a change was refused (%s)", server.pk, _codes(form))
    elif request.method == "GET":
        form = ServerForm(instance=server, tenant=server.tenant, owner=server.owner)
    else:
        return HttpResponseNotAllowed(["GET", "POST"])
    return TemplateResponse(request, "mrtrweb/serverconfig/server_form.html",
                            {"tenant": server.tenant, "form": form, "server": server, "personal": role == "owner",
                             "adding": False, "back": _back(server, role)}, status=status)


@login_required
async def server_edit(request: HttpRequest, server_id: int) -> HttpResponse:
    user = await request.auser()
    return await sync_to_async(_edit)(request, user, server_id)


# -- Disable / Enable, Remove ---------------------------------------------------------------------

def _state(request: HttpRequest, user: Any, server_id: Any) -> HttpResponse:
    server, role = _server_as(user, server_id)
    enable = request.POST.get("enabled") == "1"
    with transaction.atomic():
        # under the tenant's lock, as the allowance switch and the other state changes: what is
        # judged here (the allowance, who disabled it) is what holds when this commits
        server.tenant = limits.lock_tenant(server.tenant_id)
        server.refresh_from_db(fields=["enabled", "disabled_by_admin"])
        if enable and role == "owner" and (server.disabled_by_admin or not server.tenant.allow_personal_servers):
            raise Http404("This server may not be enabled by its owner now")
        if enable and role == "overseer" and not server.tenant.allow_personal_servers:
            raise Http404("Personal servers are not allowed in this tenant")
        if server.enabled != enable:
            server.enabled = enable
            server.disabled_by_admin = (not enable) and role == "overseer"
            server.save(update_fields=["enabled", "disabled_by_admin", "updated_at"])  # signals end its rounds
            events.server_enabled(server, user.pk, enable)
            logger.info("server %s %s by user %s", server.pk, "enabled" if enable else "disabled", user.pk)
    return HttpResponseRedirect(_back(server, role))


@login_required
@require_POST
async def server_state(request: HttpRequest, server_id: int) -> HttpResponse:
    """POST ``enabled=1|0``."""
    user = await request.auser()
    return await sync_to_async(_state)(request, user, server_id)


def _remove(request: HttpRequest, user: Any, server_id: Any) -> HttpResponse:
    server, role = _server_as(user, server_id)
    if role == "overseer" or (role == "owner" and server.disabled_by_admin):
        # an admin's disable is not undone by removing the server and adding it again
        raise Http404("No such server")
    if request.method == "POST":
        back = _back(server, role)
        with transaction.atomic():
            events.server_removed(server, user.pk)
            server.delete()  # the pre_delete signal ends its pending operations
        logger.info("server %s removed by user %s", server_id, user.pk)
        return HttpResponseRedirect(back)
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET", "POST"])
    return TemplateResponse(request, "mrtrweb/serverconfig/server_remove.html",
                            {"server": server, "pending": _pending(server), "back": _back(server, role),
                             "personal": server.personal})


@login_required
async def server_remove(request: HttpRequest, server_id: int) -> HttpResponse:
    user = await request.auser()
    return await sync_to_async(_remove)(request, user, server_id)
