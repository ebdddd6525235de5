"""The tenant history's filters, kept per tenant in the admin's session.

An admin who filtered a tenant's history, went to a timeline or elsewhere and came back finds the
same filters (and page size) applied; "Clear" forgets them. Only choices the form accepted are
kept, as the query string of the filter parameters (no page, no export format).
"""

from __future__ import annotations

from typing import Any

from django.http import QueryDict

from .forms import CHOICE_PARAMS

SESSION_KEY = "mrtrweb.history.filters"  # as before the move: saved filters in sessions keep working
#: a longer query is not kept (the form bounds every field well below this)
MAX_QUERY = 4096


def chosen_query(params: QueryDict) -> str | None:
    """The filter choices in ``params`` as a query string (non-empty values only, in form order),
    ``""`` when they choose nothing, ``None`` when ``params`` names no filter at all (a bare page
    or an export link says nothing about what to keep)."""
    if not any(k in params for k in CHOICE_PARAMS):
        return None
    kept = QueryDict(mutable=True)
    for key in CHOICE_PARAMS:
        value = params.get(key, "")
        if value:
            kept[key] = value
    return kept.urlencode()


async def recall(session: Any, tenant_id: int) -> str:
    """The filter query kept for ``tenant_id`` (``""`` if none)."""
    kept = await session.aget(SESSION_KEY) or {}
    value = kept.get(str(tenant_id), "") if isinstance(kept, dict) else ""
    return value if isinstance(value, str) else ""


async def remember(session: Any, tenant_id: int, query: str) -> None:
    """Keep ``query`` for ``tenant_id`` (an empty one forgets it)."""
    kept = await session.aget(SESSION_KEY) or {}
    kept = dict(kept) if isinstance(kept, dict) else {}
    if query and len(query) <= MAX_QUERY:
        if kept.get(str(tenant_id)) == query:
            return
        kept[str(tenant_id)] = query
    elif kept.pop(str(tenant_id), None) is None:
        return
    await session.aset(SESSION_KEY, kept)


async def forget(session: Any, tenant_id: int) -> None:
    """Forget the filters kept for ``tenant_id`` ("Clear")."""
    await remember(session, tenant_id, "")
