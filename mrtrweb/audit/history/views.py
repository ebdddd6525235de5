"""The consent history's views: a person's own rounds, a tenant's events for its admins, one
operation's timeline (see :mod:`mrtrweb.audit.history` for who may see what)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Max, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET

from ...consent import outcomes
from ...models import AuditEvent, Membership, Operation, Tenant
from ...operations import STATE_REUSED
from . import saved
from .export import EXPORT_FORMATS, export
from .forms import CHOICE_PARAMS, FILTER_PARAMS, OWN_OPERATIONS_PER_PAGE, PER_PAGE, TenantHistoryForm
from .rows import (ROW_FIELDS, admin_tenant, first_digest, foreign_view, is_admin, member_names, page_numbers,
                   personal_servers, row, server_names, user_digest)


# ------------------------------------------------------------------------------------------------
# A person's own rounds
# ------------------------------------------------------------------------------------------------


def _own_history(user: Any, page_number: Any) -> dict[str, Any]:
    digest = user_digest(user.pk)
    mine = AuditEvent.objects.filter(user_digest=digest)
    groups = (mine.values("operation_id").annotate(last_at=Max("created_at"))
              .order_by("-last_at", "operation_id"))
    page = Paginator(groups, OWN_OPERATIONS_PER_PAGE).get_page(page_number)  # the tenant's page control
    ids = [g["operation_id"] for g in page.object_list]
    ops = {o.pk: o for o in Operation.objects.filter(pk__in=ids).select_related("server", "tenant")}
    events: dict[Any, list[dict[str, Any]]] = {i: [] for i in ids}
    for event in mine.filter(operation_id__in=ids).order_by("tenant_id", "sequence").values(*ROW_FIELDS):
        events[event["operation_id"]].append(event)
    tenant_names = dict(Tenant.objects.filter(pk__in={e[0]["tenant_id"] for e in events.values() if e})
                        .values_list("pk", "name"))
    names = {digest: str(_("you"))}
    operations = []
    for op_id in ids:
        rows = events[op_id]
        if not rows:
            continue
        op = ops.get(op_id)
        owned = op.user_id == user.pk if op is not None else first_digest(op_id) == digest
        servers = {str(op.server_id): op.server.name} if owned and op is not None else {}
        first = rows[0]
        operations.append({
            "id": op_id,
            "owned": owned,
            # Someone else's operation (an answer attempted on it): only this person's own events,
            # without what the operation is (tool, server, tenant).
            "method": first["method"] if owned else "",
            "name": first["name"] if owned else "",
            "server_origin": first["server_origin"] if owned else "",
            "server_label": servers.get(first["server_id"], "") if owned else "",
            "personal": owned and op is not None and op.server.owner_id is not None,
            "tenant_name": tenant_names.get(first["tenant_id"], "") if owned else "",
            "status": outcomes.status_label(op) if owned and op is not None else "",
            "status_code": op.status if owned and op is not None else "",
            "live": owned and op is not None,
            "last_at": max(r["created_at"] for r in rows),
            "events": [row(r if owned else foreign_view(r), names=names, servers=servers, admin=False) for r in rows],
        })
    administered = list(Tenant.objects.filter(memberships__user=user, memberships__role=Membership.Role.ADMIN)
                        .order_by("name"))
    return {"page_obj": page, "page_numbers": page_numbers(page), "operations": operations,
            "administered": administered}


@login_required
@require_GET
async def own_history(request: HttpRequest) -> HttpResponse:
    user = await request.auser()
    ctx = await sync_to_async(_own_history)(user, request.GET.get("page"))
    return TemplateResponse(request, "mrtrweb/history.html", ctx)


# ------------------------------------------------------------------------------------------------
# A tenant's events, for its admins
# ------------------------------------------------------------------------------------------------


def _tenant_selection(tenant: Tenant, params: Any) -> tuple[TenantHistoryForm, QuerySet | None]:
    """The bound filter form and its events (``None`` when the filters are invalid)."""
    data = {k: params.get(k, "") for k in CHOICE_PARAMS}
    data["per_page"] = data["per_page"] or str(PER_PAGE)
    form = TenantHistoryForm(data, tenant=tenant)
    events = AuditEvent.objects.filter(tenant=tenant)
    return form, form.filter(events) if form.is_valid() else None


def _tenant_history(tenant: Tenant, form: TenantHistoryForm, events: QuerySet | None, params: Any) -> dict[str, Any]:
    page = None
    rows: list[dict[str, Any]] = []
    if events is not None:
        per_page = form.cleaned_data.get("per_page") or PER_PAGE
        page = Paginator(events.order_by("-sequence").values(*ROW_FIELDS), per_page).get_page(params.get("page"))
        names, servers, personal = member_names(tenant.pk), server_names(tenant.pk), personal_servers(tenant.pk)
        rows = [row(e, names=names, servers=servers, personal=personal) for e in page.object_list]
    filtered = any(params.get(k) for k in FILTER_PARAMS)
    reused = AuditEvent.objects.filter(tenant=tenant, event="received", code=STATE_REUSED).count()
    return {"tenant": tenant, "form": form, "page_obj": page, "page_numbers": page_numbers(page), "rows": rows,
            "filtered": filtered, "reused_states": reused, "reused_code": STATE_REUSED}


@login_required
@require_GET
async def tenant_history(request: HttpRequest, slug: str) -> HttpResponse:
    """The tenant's events for its admin: filtered, paginated, exported (``?format=csv|json``).
    The filters the admin applied are kept in the session: a bare visit restores them, ``?clear``
    forgets them."""
    user = await request.auser()
    tenant = await sync_to_async(admin_tenant)(user, slug)
    if "clear" in request.GET:
        await saved.forget(request.session, tenant.pk)
        return HttpResponseRedirect(request.path)
    if not request.GET:
        kept = await saved.recall(request.session, tenant.pk)
        if kept:
            return HttpResponseRedirect(f"{request.path}?{kept}")
    form, events = await sync_to_async(_tenant_selection)(tenant, request.GET)
    fmt = request.GET.get("format", "")
    if fmt in EXPORT_FORMATS and events is not None:
        return export(tenant, events, fmt)
    if events is not None:
        query = saved.chosen_query(request.GET)
        if query is not None:
            await saved.remember(request.session, tenant.pk, query)
            if any(not request.GET.get(k) for k in CHOICE_PARAMS if k in request.GET):
                # the form sends every field: its link names only the chosen ones (page 1 of them)
                return HttpResponseRedirect(f"{request.path}?{query}" if query else request.path)
    ctx = await sync_to_async(_tenant_history)(tenant, form, events, request.GET)
    # Invalid filters export nothing (never the unfiltered trail): the page shows the errors.
    status = 400 if fmt in EXPORT_FORMATS else 200
    return TemplateResponse(request, "mrtrweb/history_tenant.html", ctx, status=status)


# ------------------------------------------------------------------------------------------------
# One operation's timeline
# ------------------------------------------------------------------------------------------------


def _timeline(user: Any, op_id: Any) -> dict[str, Any]:
    op = Operation.objects.select_related("server", "tenant", "user").filter(pk=op_id).first()
    if op is not None:
        tenant_id = op.tenant_id
        owner = op.user_id == user.pk
    else:  # the operation row is gone (its server was removed); its audit events remain
        tenant_id = (AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")
                     .values_list("tenant_id", flat=True).first())
        if tenant_id is None:
            raise Http404("No such operation")
        owner = first_digest(op_id) == user_digest(user.pk)
    from ...tenancy.access import denial

    if owner and denial(user.pk, tenant_id):  # an owner who left the tenant (or was deactivated): not theirs now
        owner = False
    admin = is_admin(user, tenant_id)
    if not (owner or admin):
        raise Http404("No such operation")
    events = list(AuditEvent.objects.filter(tenant_id=tenant_id, operation_id=op_id).order_by("sequence")
                  .values(*ROW_FIELDS))
    names = member_names(tenant_id) if admin else {}
    names[user_digest(user.pk)] = str(_("you"))
    servers = server_names(tenant_id)
    personal = personal_servers(tenant_id)
    rows = [row(e, names=names, servers=servers, admin=admin, personal=personal) for e in events]
    first = rows[0] if rows else None
    tenant = op.tenant if op is not None else Tenant.objects.get(pk=tenant_id)
    return {
        "op_id": op_id,
        "op": op,
        "owner": owner,
        "admin": admin,
        "tenant": tenant,
        "owner_name": op.user.get_username() if op is not None and admin and not owner else "",
        "method": op.method if op is not None else (first["method"] if first else ""),
        "name": op.name if op is not None else (first["name"] if first else ""),
        "server_label": op.server.name if op is not None else (first["server_label"] if first else ""),
        "personal": op.server.personal if op is not None else bool(first and first["personal"]),
        "server_origin": first["server_origin"] if first else (op.server.origin if op is not None else ""),
        "rows": rows,
    }


@login_required
@require_GET
async def operation_timeline(request: HttpRequest, op_id: Any) -> HttpResponse:
    user = await request.auser()
    ctx = await sync_to_async(_timeline)(user, op_id)
    return TemplateResponse(request, "mrtrweb/history_operation.html", ctx)
