"""Listing pages (``tools/list``, ``prompts/list``, ...) checked item by item, off the event loop."""

from __future__ import annotations

from typing import Any, Final

from pydantic import ValidationError

LIST_PAGE_CAP: Final = 100  # a paginator that never ends cannot hang a listing
#: a listing (all its pages) of more items than this is refused as ``invalid_result``
MAX_LISTED_ITEMS: Final = 50_000


class ListingRefused(Exception):
    """A listing page that is not a listing (or holds too many items); the message names why."""


def check_page(raw: Any, field: str, model: Any, room: int) -> tuple[list[dict[str, Any]], str | None]:
    """One raw listing page: its items (each validated by ``model``, as JSON dicts) and its next cursor.

    Runs in a worker thread: item by item, so the event loop gets its turn between items.
    ``room``: how many more items the listing may hold."""
    listed = raw.get(field) if isinstance(raw, dict) else None
    if not isinstance(listed, list):
        raise ListingRefused(f"malformed result (no {field} list)")
    if len(listed) > room:
        raise ListingRefused(f"the server lists more than {MAX_LISTED_ITEMS} items")
    cursor = raw.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise ListingRefused("malformed result (nextCursor is not a string)")
    items: list[dict[str, Any]] = []
    errors = 0
    for item in listed:
        try:
            items.append(model.model_validate(item).model_dump(by_alias=True, mode="json", exclude_none=True))
        except ValidationError as exc:
            errors += exc.error_count()
    if errors:
        raise ListingRefused(f"malformed result ({errors} errors)")
    return items, cursor or None

