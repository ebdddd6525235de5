"""Consent history: the audit trail as people read it.

* ``/history/`` (``mrtrweb:history``) -- a signed-in user's own rounds: the audit events carrying
  their keyed digest, grouped by operation, newest first.
* ``/tenants/<slug>/history/`` (``mrtrweb:tenant-history``) -- a tenant admin's view of the
  tenant's events, filtered by a form (user, server, tool, outcome, code, date range; GET
  parameters), 50 per page; ``?format=csv`` / ``?format=json`` export the same selection.
* ``/history/operations/<uuid>/`` (``mrtrweb:history-operation``) -- one operation's rounds in chain
  order, for its owner and the admins of its tenant.

Every query is scoped to a tenant the requester administers, or to the requester's own digest;
anyone else gets 404. Audit rows hold digests, keys and actions only (never an answer value or a
``requestState``), so the pages and exports show audit fields and nothing else.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Max, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET

from . import display, outcomes
from .audit import keyed_digest
from .models import AuditEvent, McpServer, Membership, Operation, Tenant
from .operations import STATE_REUSED

PER_PAGE = 50
EXPORT_CHUNK = 1000

#: the audit fields an export holds (what the chain hashes, and the hash): digests, ids, keys and
#: actions -- never an answer value or a ``requestState``
EXPORT_FIELDS = ("sequence", "created_at", "tenant_id", "operation_id", "event", "code", "reason", "round_number",
                 "original_request_id", "request_id", "retry_id", "server_id", "server_origin", "method", "name",
                 "user_digest", "tenant_digest", "state_digest", "schema_digests", "display_digest", "config_digest",
                 "actions", "policy_version", "auth_mode", "auth_digest", "auth_identity", "prev_hash", "hash")

#: the columns of the pages (no schema digests: a page shows what a person reads)
ROW_FIELDS = ("pk", "sequence", "created_at", "tenant_id", "operation_id", "event", "code", "reason", "round_number",
              "original_request_id", "request_id", "retry_id", "server_id", "server_origin", "method", "name",
              "user_digest", "state_digest", "display_digest", "config_digest", "actions", "auth_mode", "auth_digest",
              "auth_identity", "hash")


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def user_digest(user_id: Any) -> str:
    """The digest audit rows hold for a user (see :func:`mrtrweb.audit.record`)."""
    return keyed_digest(f"user:{user_id}")


def short_digest(value: str, length: int = 12) -> str:
    """``hmac-sha256:0123456789ab…``: the algorithm and the first ``length`` hex digits."""
    if not value:
        return ""
    algo, sep, hexpart = value.rpartition(":")
    if len(hexpart) <= length:
        return value
    return f"{algo}{sep}{hexpart[:length]}…"


def _actions_text(actions: Any) -> list[tuple[str, str]]:
    """An event's ``actions`` as (key, action) pairs: keys and actions only."""
    if not isinstance(actions, dict):
        return []
    return [(str(k), str(v)) for k, v in sorted(actions.items())]


def _row(event: dict[str, Any], *, names: dict[str, str], servers: dict[str, str], admin: bool = True) -> dict[str, Any]:
    """A template row for one event (``values()`` dict): digests shortened, users resolved only
    through ``names`` (digest -> label), which the caller fills with whom the viewer may know.
    Only an ``admin`` of the tenant reads that a round's ``requestState`` was also received by
    another operation (code ``request_state_reused``: it speaks of other people's operations)."""
    digest = event["user_digest"]
    if not admin and event["code"] == STATE_REUSED:
        event = dict(event, code="", reason="")
    return dict(
        event,
        user_label=names.get(digest, ""),
        user_short=short_digest(digest),
        server_label=servers.get(event["server_id"], ""),
        actions_list=_actions_text(event["actions"]),
        state_short=short_digest(event["state_digest"]),
        display_short=short_digest(event["display_digest"]),
        config_short=short_digest(event["config_digest"]),
        auth_digest_short=short_digest(event["auth_digest"]),
        auth_identity_short=short_digest(event["auth_identity"]),
        hash_short=event["hash"][:12],
    )


def _member_names(tenant_id: int) -> dict[str, str]:
    """Digest -> username for the tenant's current members (an admin may filter by them anyway)."""
    return {user_digest(uid): name for uid, name in
            Membership.objects.filter(tenant_id=tenant_id).values_list("user_id", "user__username")}


def _server_names(tenant_id: int) -> dict[str, str]:
    return {str(pk): name for pk, name in McpServer.objects.filter(tenant_id=tenant_id).values_list("pk", "name")}


def _admin_tenant(user: Any, slug: str) -> Tenant:
    """The tenant ``slug`` if ``user`` administers it, else 404 (sync)."""
    from .access import denial

    try:
        tenant = Tenant.objects.get(slug=slug, memberships__user=user, memberships__role=Membership.Role.ADMIN)
    except Tenant.DoesNotExist:
        raise Http404("No such tenant") from None
    if denial(user.pk, tenant.pk):  # e.g. an inactive admin signed in by a permissive backend
        raise Http404("No such tenant")
    return tenant


def _is_admin(user: Any, tenant_id: int) -> bool:
    from .access import denial

    return Membership.objects.filter(tenant_id=tenant_id, user=user, role=Membership.Role.ADMIN).exists() \
        and not denial(user.pk, tenant_id)


def _first_digest(op_id: Any) -> str | None:
    """The digest of an operation's first event: its owner (every later event of another person is
    an attempt on a round the owner's events opened)."""
    return (AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")
            .values_list("user_digest", flat=True).first())


# ------------------------------------------------------------------------------------------------
# A person's own rounds
# ------------------------------------------------------------------------------------------------


def _own_history(user: Any, page_number: Any) -> dict[str, Any]:
    digest = user_digest(user.pk)
    mine = AuditEvent.objects.filter(user_digest=digest)
    groups = (mine.values("operation_id").annotate(last_at=Max("created_at"))
              .order_by("-last_at", "operation_id"))
    page = Paginator(groups, PER_PAGE).get_page(page_number)
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
        owned = op.user_id == user.pk if op is not None else _first_digest(op_id) == digest
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
            "tenant_name": tenant_names.get(first["tenant_id"], "") if owned else "",
            "status": outcomes.status_label(op) if owned and op is not None else "",
            "status_code": op.status if owned and op is not None else "",
            "live": owned and op is not None,
            "last_at": max(r["created_at"] for r in rows),
            "events": [_row(r, names=names, servers=servers, admin=False) for r in rows],
        })
    administered = list(Tenant.objects.filter(memberships__user=user, memberships__role=Membership.Role.ADMIN)
                        .order_by("name"))
    return {"page_obj": page, "operations": operations, "administered": administered}


@login_required
@require_GET
async def own_history(request: HttpRequest) -> HttpResponse:
    user = await request.auser()
    ctx = await sync_to_async(_own_history)(user, request.GET.get("page"))
    return TemplateResponse(request, "mrtrweb/history.html", ctx)


# ------------------------------------------------------------------------------------------------
# A tenant's events, for its admins
# ------------------------------------------------------------------------------------------------


class DateInput(forms.DateInput):
    input_type = "date"


class TenantHistoryForm(forms.Form):
    """Filters of the tenant history; every choice is limited to the tenant."""

    user = forms.ChoiceField(label=_("User"), required=False)
    server = forms.ModelChoiceField(label=_("Server"), queryset=McpServer.objects.none(), required=False,
                                    empty_label=_("any"))
    tool = forms.CharField(label=_("Tool"), required=False, max_length=500,
                           help_text=_("The exact tool or prompt name, or resource URI."))
    outcome = forms.ChoiceField(label=_("Event"), required=False,
                                choices=[("", _("any"))] + list(AuditEvent.Event.choices))
    code = forms.CharField(label=_("Code"), required=False, max_length=64)

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.members = dict(Membership.objects.filter(tenant=tenant).order_by("user__username")
                            .values_list("user__username", "user_id"))
        # names chosen by users and admins: shown with their control and bidi characters visible
        self.fields["user"].choices = [("", _("anyone"))] + [(name, display.shown(name)) for name in self.members]
        self.fields["server"].queryset = McpServer.objects.filter(tenant=tenant).order_by("name")
        self.fields["server"].label_from_instance = lambda server: display.shown(server.name)
        # "from" and "to" are Python keywords: declared here rather than as class attributes.
        self.fields["from"] = forms.DateField(label=_("From"), required=False, widget=DateInput,
                                              input_formats=["%Y-%m-%d"])
        self.fields["to"] = forms.DateField(label=_("To"), required=False, widget=DateInput,
                                            input_formats=["%Y-%m-%d"])

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("from"), data.get("to")
        if start and end and start > end:
            self.add_error("to", _("The end date is before the start date."))
        return data

    def filter(self, events: QuerySet) -> QuerySet:
        """``events`` narrowed by the (valid) filters."""
        data = self.cleaned_data
        if data.get("user"):
            events = events.filter(user_digest=user_digest(self.members[data["user"]]))
        if data.get("server") is not None:
            events = events.filter(server_id=str(data["server"].pk))
        if data.get("tool"):
            events = events.filter(name=data["tool"])
        if data.get("outcome"):
            events = events.filter(event=data["outcome"])
        if data.get("code"):
            events = events.filter(code=data["code"])
        tz = timezone.get_current_timezone()
        if data.get("from"):
            events = events.filter(created_at__gte=dt.datetime.combine(data["from"], dt.time.min, tzinfo=tz))
        if data.get("to"):
            end = data["to"] + dt.timedelta(days=1)
            events = events.filter(created_at__lt=dt.datetime.combine(end, dt.time.min, tzinfo=tz))
        return events


FILTER_PARAMS = ("user", "server", "tool", "outcome", "code", "from", "to")


def _tenant_selection(user: Any, slug: str, params: Any) -> tuple[Tenant, TenantHistoryForm, QuerySet | None]:
    """The tenant (404 unless ``user`` administers it), the bound filter form and its events (``None``
    when the filters are invalid)."""
    tenant = _admin_tenant(user, slug)
    data = {k: params.get(k, "") for k in FILTER_PARAMS}
    form = TenantHistoryForm(data, tenant=tenant)
    events = AuditEvent.objects.filter(tenant=tenant)
    return tenant, form, form.filter(events) if form.is_valid() else None


def _tenant_history(user: Any, slug: str, params: Any) -> dict[str, Any]:
    tenant, form, events = _tenant_selection(user, slug, params)
    page = None
    rows: list[dict[str, Any]] = []
    if events is not None:
        page = Paginator(events.order_by("-sequence").values(*ROW_FIELDS), PER_PAGE).get_page(params.get("page"))
        names, servers = _member_names(tenant.pk), _server_names(tenant.pk)
        rows = [_row(e, names=names, servers=servers) for e in page.object_list]
    filtered = any(params.get(k) for k in FILTER_PARAMS)
    reused = AuditEvent.objects.filter(tenant=tenant, event="received", code=STATE_REUSED).count()
    return {"tenant": tenant, "form": form, "page_obj": page, "rows": rows, "filtered": filtered,
            "reused_states": reused, "reused_code": STATE_REUSED}


def _safe_filename_part(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", value).strip("-")[:60] or "tenant"


def _export_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return value
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return str(value)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> str:
    """A CSV cell: JSON for structured values (control and bidi characters as ``\\uXXXX``); text
    with its control and bidi characters made visible (:func:`mrtrweb.display.shown`), and
    prefixed with ``'`` where a spreadsheet would run it as a formula (the JSON export carries
    every value exactly)."""
    if isinstance(value, (dict, list)):
        return display.json_text(value, sort_keys=True, separators=(",", ":"))
    text = "" if value is None else display.shown(str(value))
    return "'" + text if text.startswith(_FORMULA_START) else text


async def _export_events(events: QuerySet) -> AsyncIterator[dict[str, Any]]:
    """The selected events in chain order, read in chunks (keyset on ``sequence``)."""
    last = -1
    while True:
        chunk = [e async for e in events.filter(sequence__gt=last).order_by("sequence")
                 .values(*EXPORT_FIELDS)[:EXPORT_CHUNK]]
        if not chunk:
            return
        for event in chunk:
            yield {k: _export_value(event[k]) for k in EXPORT_FIELDS}
        last = chunk[-1]["sequence"]


async def _csv_stream(events: QuerySet) -> AsyncIterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: Any) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue()

    yield line(EXPORT_FIELDS)
    async for event in _export_events(events):
        yield line([_csv_cell(event[k]) for k in EXPORT_FIELDS])


async def _json_stream(events: QuerySet) -> AsyncIterator[str]:
    yield "["
    first = True
    async for event in _export_events(events):
        # exact values; control and bidi characters written as \uXXXX escapes (nothing invisible)
        yield ("\n" if first else ",\n") + display.json_text(event, sort_keys=True)
        first = False
    yield "\n]\n"


def _export(tenant: Tenant, events: QuerySet, fmt: str) -> StreamingHttpResponse:
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    filename = f"mrtr-audit-{_safe_filename_part(tenant.slug)}-{stamp}.{fmt}"
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_stream(events), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(_json_stream(events), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_GET
async def tenant_history(request: HttpRequest, slug: str) -> HttpResponse:
    user = await request.auser()
    fmt = request.GET.get("format", "")
    if fmt in ("csv", "json"):
        tenant, form, events = await sync_to_async(_tenant_selection)(user, slug, request.GET)
        if events is not None:
            return _export(tenant, events, fmt)
        # Invalid filters export nothing (never the unfiltered trail): the page shows the errors.
        ctx = await sync_to_async(_tenant_history)(user, slug, request.GET)
        return TemplateResponse(request, "mrtrweb/history_tenant.html", ctx, status=400)
    ctx = await sync_to_async(_tenant_history)(user, slug, request.GET)
    return TemplateResponse(request, "mrtrweb/history_tenant.html", ctx)


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
        owner = _first_digest(op_id) == user_digest(user.pk)
    from .access import denial

    if owner and denial(user.pk, tenant_id):  # an owner who left the tenant (or was deactivated): not theirs now
        owner = False
    admin = _is_admin(user, tenant_id)
    if not (owner or admin):
        raise Http404("No such operation")
    events = list(AuditEvent.objects.filter(tenant_id=tenant_id, operation_id=op_id).order_by("sequence")
                  .values(*ROW_FIELDS))
    names = _member_names(tenant_id) if admin else {}
    names[user_digest(user.pk)] = str(_("you"))
    servers = _server_names(tenant_id)
    rows = [_row(e, names=names, servers=servers, admin=admin) for e in events]
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
        "server_origin": first["server_origin"] if first else (op.server.origin if op is not None else ""),
        "rows": rows,
    }


@login_required
@require_GET
async def operation_timeline(request: HttpRequest, op_id: Any) -> HttpResponse:
    user = await request.auser()
    ctx = await sync_to_async(_timeline)(user, op_id)
    return TemplateResponse(request, "mrtrweb/history_operation.html", ctx)
