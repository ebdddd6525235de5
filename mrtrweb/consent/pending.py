"""The rounds waiting for a person, for the navigation of every page ("Waiting for you").

A round that arrives while its person is on another page of the app must not go unseen until it
expires. Every page's navigation shows how many of the person's operations await their answer
(:func:`nav_summary`, rendered server-side in one query by ``{% nav_summary %}``), and the pages
keep it current over the per-user WebSocket: a socket that asked for it (``{"type":
"pending.watch"}``) is sent :func:`payload` at once and again whenever one of the person's
operations enters or leaves ``awaiting_input`` (:class:`mrtrweb.live.consumers.OperationsConsumer`).

Only rounds the person may still answer are counted or listed: the checks of
:func:`mrtrweb.tenancy.access.denial` as one filter (:func:`mrtrweb.tenancy.access.actionable_operations`), so
another user's rounds, a tenant left, a server disabled or moved never show, even when the
revocation signals were bypassed. A round past its lifetime is not counted either.

The payload carries ids, a count, times and the server's and tool's names made visible
(:func:`mrtrweb.text.display.shown`, cut to :data:`NAME_CHARS`); the page inserts them as text.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, OuterRef, QuerySet, Subquery, Value, Window
from django.db.models.functions import Coalesce
from django.urls import reverse

from ..text import display
from ..tenancy.access import actionable_operations, open_rounds
from ..tenancy.reads import PerUser
from ..models import Membership, Operation

#: at most this many waiting rounds are listed in a push (the count is exact)
LISTED = 20
#: characters of a server's or tool's name in a push (a longer one is cut, with "…")
NAME_CHARS = 120


def _name(value: Any) -> str:
    text = str(display.shown(str(value or "")))
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1] + "…"


def _waiting(user_id: Any, limit: int = LISTED) -> QuerySet:
    return (actionable_operations(user_id).filter(open_rounds())
            .order_by(F("round_expires_at").asc(nulls_last=True), "created_at")
            .annotate(total=Window(Count("pk")))
            .values("id", "method", "name", "server__name", "round_expires_at", "total")[:limit])


def _nav(user_id: Any) -> QuerySet:
    waiting = (actionable_operations(user_id).filter(open_rounds(), tenant_id=OuterRef("tenant_id"))
               .order_by().values("tenant_id").annotate(n=Count("pk")).values("n")[:1])
    return (Membership.objects.filter(user_id=user_id)
            .annotate(waiting=Coalesce(Subquery(waiting), Value(0)))
            .order_by("tenant__name").values("role", "tenant__slug", "tenant__name", "waiting"))


#: the two queries, their SQL compiled once (every page's navigation, every push that changes it)
_WAITING, _NAV = PerUser(_waiting, Operation), PerUser(_nav, Membership)


def waiting_rounds(user_id: Any, limit: int = LISTED) -> tuple[int, list[dict[str, Any]]]:
    """Sync, one query: ``(count, rounds)`` of ``user_id``'s operations whose round awaits their
    answer now (soonest to expire first; at most ``limit`` listed, the count is all of them). Each
    round: ``id``, ``server`` and ``tool`` (names, shown), ``method``, ``expires`` (ISO 8601, or
    ``""`` without a lifetime) and ``url`` (its operation page)."""
    rows = _WAITING.rows(user_id) if limit == LISTED else list(_waiting(user_id, limit))
    rounds = [{"id": str(r["id"]), "server": _name(r["server__name"]), "tool": _name(r["name"]),
               "method": str(r["method"])[:32],
               "expires": r["round_expires_at"].isoformat() if r["round_expires_at"] else "",
               "url": reverse("mrtrweb:operation", args=[r["id"]])} for r in rows]
    return (int(rows[0]["total"]) if rows else 0), rounds


def payload(user_id: Any) -> dict[str, Any]:
    """Sync, one query: the push a watching socket is sent (``{"type": "pending", "count",
    "rounds"}``, :func:`waiting_rounds`)."""
    count, rounds = waiting_rounds(user_id)
    return {"type": "pending", "count": count, "rounds": rounds}


def nav_summary(user_id: Any) -> dict[str, Any]:
    """Sync, one query: what the navigation shows for ``user_id`` -- ``count`` (their rounds
    waiting, as :func:`waiting_rounds` counts them) and ``admin_tenants`` (``(slug, name)`` of each
    tenant where they are a tenant admin, for its consent history)."""
    rows = _NAV.rows(user_id)
    count, admin = 0, []
    for row in rows:
        count += int(row["waiting"] or 0)
        if row["role"] == Membership.Role.ADMIN:
            admin.append((row["tenant__slug"], row["tenant__name"]))
    return {"count": count, "admin_tenants": admin}
