"""The rows the history pages show, and whom the requester may see them as.

Audit rows hold digests, keys and actions only; a row for a template adds what a person reads:
member names for user digests (only those the viewer may know), server names, short digests.
Access helpers answer "does this user administer that tenant" the same way for every page.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page
from django.http import Http404
from django.utils.translation import gettext_lazy as _

from ..events import keyed_digest
from ...models import AuditEvent, McpServer, Membership, Tenant
from ...operations import STATE_REUSED

#: the columns of the pages (no schema digests: a page shows what a person reads)
ROW_FIELDS = ("pk", "sequence", "created_at", "tenant_id", "operation_id", "event", "code", "reason", "round_number",
              "original_request_id", "request_id", "retry_id", "server_id", "server_origin", "method", "name",
              "user_digest", "state_digest", "display_digest", "config_digest", "actions", "auth_mode", "auth_digest",
              "auth_identity", "initiator", "initiator_detail", "hash")


#: what a person's own history does not show of an event on someone else's operation (an answer
#: they attempted on it, refused): its round, ids, place in the other tenant's chain, digests --
#: they would follow that operation's progress and that tenant's audit volume
FOREIGN_HIDDEN = ("sequence", "round_number", "original_request_id", "request_id", "retry_id", "server_id",
                  "server_origin", "method", "name", "state_digest", "display_digest", "config_digest", "auth_mode",
                  "auth_digest", "auth_identity", "initiator_detail", "hash")


#: an audit event as the history shows it (the stored value stays in ``data-event``, the filters and
#: the exports): the audit's own words, translated
EVENT_LABELS = {
    "received": _("received"), "rejected": _("rejected"), "shown": _("shown"), "submitted": _("submitted"),
    "completed": _("completed"), "failed": _("failed"), "cancelled": _("cancelled"), "expired": _("expired"),
    "denied": _("denied"),
    # a server's configuration (issue 29): who did it is the row's user
    "server_added": _("added a server"), "server_changed": _("changed a server"),
    "server_disabled": _("disabled a server"), "server_enabled": _("enabled a server"),
    "server_removed": _("removed a server"), "auth_changed": _("changed a server's authorization"),
    "tenant_changed": _("changed the tenant's settings"),
    # an MCP App's HTML approved or revoked by its digest (issue 31): the row's name is its ui:// URI
    "app_approved": _("approved an MCP App"), "app_revoked": _("revoked an MCP App's approval"),
    # an MCP App rendered on the operation's page (issue 31): its tool, HTML and CSP digests
    "app_rendered": _("app rendered"),
    # a model's proposals (issue 32): who decided is the row's user, the initiator is the model
    "proposed": _("the model proposed a call"), "approved": _("approved the model's call"),
    "edited": _("approved the model's call with changes"), "proposal_denied": _("denied the model's call"),
    "model_changed": _("changed the tenant's model"),
}
#: who made an operation's call (``initiator``; empty on a person's own rows), as the history shows it
INITIATOR_LABELS = {"": _("person"), "person": _("person"), "app": _("app"), "model": _("model")}
#: an app call's ``initiator_detail["confirmation"]``, as the history shows it
CONFIRMATION_LABELS = {"person": _("confirmed by the person"), "read_only": _("read-only, not asked")}
#: events that are a person's decision on a call someone else proposed (the model): the row's user
#: acted; the initiator only proposed
DECISIONS = frozenset({"approved", "edited", "proposal_denied"})
#: a ``denied`` event that is the person's own Stop (code ``denied``, reason ``cancelled``:
#: mrtrweb.operations.stopping), shown as such rather than as a refusal
STOPPED_LABEL = _("stopped by the person")


def event_label(event: dict[str, Any]) -> str:
    """What the history shows for ``event`` (a ``values()`` dict): :data:`EVENT_LABELS`, or
    :data:`STOPPED_LABEL` for the person's own Stop."""
    if event.get("event") == "denied" and event.get("code") == "denied" and event.get("reason") == "cancelled":
        return str(STOPPED_LABEL)
    if event.get("event") == "denied" and event.get("reason") == "timeout":
        # no answer came in time (a legacy server's hold ran out, or the answer came after the round's
        # lifetime): the round expired, as the operation's status says
        return str(EVENT_LABELS["expired"])
    return str(EVENT_LABELS.get(event.get("event"), event.get("event") or ""))


def foreign_view(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` (a ``values()`` dict) as the person who attempted an answer on another person's
    operation may read it: when, what was refused and why (:data:`FOREIGN_HIDDEN` blanked)."""
    return dict(event, **{field: "" for field in FOREIGN_HIDDEN}, actions=None)


def user_digest(user_id: Any) -> str:
    """The digest audit rows hold for a user (see :func:`mrtrweb.audit.events.record`)."""
    return keyed_digest(f"user:{user_id}")


def _actions_text(actions: Any) -> list[tuple[str, str]]:
    """An event's ``actions`` as (key, action) pairs: keys and actions only."""
    if not isinstance(actions, dict):
        return []
    return [(str(k), str(v)) for k, v in sorted(actions.items())]


def row(event: dict[str, Any], *, names: dict[str, str], servers: dict[str, str], admin: bool = True,
        personal: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """A template row for one event (``values()`` dict): users resolved only
    through ``names`` (digest -> label), which the caller fills with whom the viewer may know.
    Only an ``admin`` of the tenant reads that a round's ``requestState`` was also received by
    another operation (code ``request_state_reused``: it speaks of other people's operations).
    ``personal``: the ids (as text) of the tenant's personal servers (issue 29): their rows are
    marked ``personal`` (a configuration event of a personal server carries code ``personal``)."""
    digest = event["user_digest"]
    if not admin and event["code"] == STATE_REUSED:
        event = dict(event, code="", reason="")
    return dict(
        event,
        user_label=names.get(digest, ""),
        event_label=event_label(event),
        server_label=servers.get(event["server_id"], ""),
        actions_list=_actions_text(event["actions"]),
        initiator_label=str(INITIATOR_LABELS.get(event.get("initiator") or "", event.get("initiator") or "")),
        confirmation_label=_confirmation(event.get("initiator_detail")),
        decision=event["event"] in DECISIONS,
        # a round only when the event belongs to one (0: the call itself, before any round)
        round_shown=isinstance(event["round_number"], int) and event["round_number"] > 0,
        personal=event["server_id"] in personal or (event["event"] in AuditEvent.CONFIG and event["code"] == "personal"),
    )


def _confirmation(detail: Any) -> str:
    value = detail.get("confirmation") if isinstance(detail, dict) else None
    return str(CONFIRMATION_LABELS.get(value, "")) if isinstance(value, str) else ""


def member_names(tenant_id: int) -> dict[str, str]:
    """Digest -> username for the tenant's current members (an admin may filter by them anyway)."""
    return {user_digest(uid): name for uid, name in
            Membership.objects.filter(tenant_id=tenant_id).values_list("user_id", "user__username")}


def personal_servers(tenant_id: int) -> set[str]:
    """The ids (as text, as audit rows hold them) of the tenant's personal servers (issue 29)."""
    return {str(pk) for pk in McpServer.objects.filter(tenant_id=tenant_id, owner__isnull=False)
            .values_list("pk", flat=True)}


def server_names(tenant_id: int) -> dict[str, str]:
    return {str(pk): name for pk, name in McpServer.objects.filter(tenant_id=tenant_id).values_list("pk", "name")}


def admin_tenant(user: Any, slug: str) -> Tenant:
    """The tenant ``slug`` if ``user`` administers it, else 404 (sync)."""
    from ...tenancy.access import denial

    try:
        tenant = Tenant.objects.get(slug=slug, memberships__user=user, memberships__role=Membership.Role.ADMIN)
    except Tenant.DoesNotExist:
        raise Http404("No such tenant") from None
    if denial(user.pk, tenant.pk):  # e.g. an inactive admin signed in by a permissive backend
        raise Http404("No such tenant")
    return tenant


def is_admin(user: Any, tenant_id: int) -> bool:
    from ...tenancy.access import denial

    return Membership.objects.filter(tenant_id=tenant_id, user=user, role=Membership.Role.ADMIN).exists() \
        and not denial(user.pk, tenant_id)


def first_digest(op_id: Any) -> str | None:
    """The digest of an operation's first event: its owner (every later event of another person is
    an attempt on a round the owner's events opened)."""
    return (AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")
            .values_list("user_digest", flat=True).first())




def page_numbers(page: Page | None) -> list[Any]:
    """The page links to show around ``page``: the first and last, two either side of the
    current one, :attr:`Paginator.ELLIPSIS` for the gaps (empty for a single page)."""
    if page is None or page.paginator.num_pages <= 1:
        return []
    return list(page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1))
