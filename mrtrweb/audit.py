"""Audit events for every round: digests only (mrtr-gate.md §4).

User and tenant are recorded as keyed digests (HMAC-SHA256 with ``MRTRWEB["AUDIT_SECRET"]`` or a
key derived from ``SECRET_KEY``) so small id spaces cannot be brute-forced; ``requestState`` and
each ``requestedSchema`` as SHA-256 digests; answers as their keys and actions only.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

from django.conf import settings

from . import conf
from .models import AuditEvent, Operation

logger = logging.getLogger("mrtrweb.audit")


class AuditUnavailable(Exception):
    """The audit event could not be written or read back: the retry must not be sent."""


def keyed_digest(value: str) -> str:
    """``hmac-sha256:<hex>`` of ``value`` under the audit key."""
    secret = conf.get("AUDIT_SECRET") or ("mrtrweb.audit/" + settings.SECRET_KEY)
    mac = hmac.new(str(secret).encode(), value.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()


def record(operation: Operation, event: str, *, code: str = "", round_number: int = 0, request_id: Any = "",
           retry_id: Any = "", state_digest: str | None = None, schema_digests: dict[str, str] | None = None,
           actions: dict[str, str] | None = None, read_back: bool = False) -> AuditEvent:
    """Append one event for ``operation`` (sync; call through ``sync_to_async`` from async code).

    Args:
        read_back: re-read the row from the database and compare it (used before a retry leaves).

    Raises:
        AuditUnavailable: the write or the read-back failed (reason logged).
    """
    try:
        row = AuditEvent.objects.create(
            tenant_id=operation.tenant_id,
            operation_id=operation.id,
            event=event,
            code=code,
            round_number=round_number,
            request_id=str(request_id or ""),
            retry_id=str(retry_id or ""),
            server_id=str(operation.server_id),
            server_origin=operation.server.origin,
            method=operation.method,
            name=operation.name[:500],
            user_digest=keyed_digest(f"user:{operation.user_id}"),
            tenant_digest=keyed_digest(f"tenant:{operation.tenant_id}"),
            state_digest=state_digest or "",
            schema_digests=schema_digests or {},
            actions=actions or {},
            policy_version=str(conf.get("POLICY_VERSION")),
        )
        if read_back:
            again = AuditEvent.objects.get(pk=row.pk)
            if (again.event, again.operation_id, again.retry_id, again.actions) != \
                    (row.event, row.operation_id, row.retry_id, row.actions):
                raise AuditUnavailable("the audit event read back differs from what was written")
        return row
    except AuditUnavailable:
        logger.error("audit read-back mismatch for operation %s (%s)", operation.id, event)
        raise
    except Exception as exc:  # noqa: BLE001 -- any sink failure denies the retry
        logger.error("audit write failed for operation %s (%s): %s", operation.id, event, exc.__class__.__name__)
        raise AuditUnavailable(f"audit sink failed: {exc.__class__.__name__}") from exc
