"""The tenant history's exports: ``?format=csv`` / ``?format=json`` of the selected events.

Streamed in chain order, read in chunks; they hold the audit fields (what the chain hashes, and
the hash) and nothing else: never an answer value or a ``requestState``.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import AsyncIterator
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.utils import timezone

from ...text import display
from ...models import Tenant

EXPORT_CHUNK = 1000
EXPORT_FORMATS = ("csv", "json")

#: the audit fields an export holds (what the chain hashes, and the hash): digests, ids, keys and
#: actions -- never an answer value or a ``requestState``
EXPORT_FIELDS = ("sequence", "created_at", "tenant_id", "operation_id", "event", "code", "reason", "round_number",
                 "original_request_id", "request_id", "retry_id", "server_id", "server_origin", "method", "name",
                 "user_digest", "tenant_digest", "state_digest", "schema_digests", "display_digest", "config_digest",
                 "actions", "policy_version", "auth_mode", "auth_digest", "auth_identity", "initiator", "initiator_detail",
                 "prev_hash", "hash")


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
    with its control and bidi characters made visible (:func:`mrtrweb.text.display.shown`), and
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


def export(tenant: Tenant, events: QuerySet, fmt: str) -> StreamingHttpResponse:
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
