"""Starting an operation: the per-user and per-tenant limits, the row, the gate's
registration (``Gate.register``), then the call in the background (:mod:`.calls`).
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone
from django.utils.translation import gettext_noop

from .. import conf
from ..text import results
from ..gate import StoreUnavailable
from ..runtime.gates import get_gate
from ..models import McpServer, Operation
from ..text.names import stored_name
from .authorization import current_auth
from .calls import _drive
from .messages import LIMIT_REACHED, message_for, OperationRefused, STORE_UNAVAILABLE, WORKER_DRAINING
from .runtime import _spawn, new_request_id

logger = logging.getLogger("mrtrweb.operations")


async def start_operation(*, user: Any, server: McpServer, method: str, name: str, params: dict[str, Any],
                          destructive: bool = False, output_schema: Any = None) -> Operation:
    """Register and start an operation; returns at once (the request goes out in the background).
    ``destructive``: the tool's listing says it may destroy (:func:`mrtrweb.catalog.is_destructive`);
    stored, so that every card of the operation warns. ``output_schema``: the tool's listed
    ``outputSchema``, kept (:func:`kept_output_schema`) to check its structured result against.

    Raises:
        OperationRefused: this worker is draining (``worker_draining``, 503), a per-user limit is
            reached, or the binding store is unavailable.
        django.db.DatabaseError: the database is unreachable (nothing was sent).
    """
    from ..runtime import leases, workers

    if leases.is_draining():
        logger.info("operation refused: worker %s is draining", workers.WORKER_ID)
        raise OperationRefused(WORKER_DRAINING, message_for(WORKER_DRAINING))
    await workers.ensure_lease()  # before the operation names this worker
    op = await sync_to_async(_start_sync)(user, server, method, name, params, destructive,
                                         kept_output_schema(output_schema))
    _spawn(_drive(op.id, op.request_id, params, checked=op))  # access checked with the start
    return op


def _start_sync(user: Any, server: McpServer, method: str, name: str, params: dict[str, Any],
                destructive: bool = False, output_schema: Any = None) -> Operation:
    """:func:`start_operation`'s database and binding work, in one thread hop: the limits (one
    query), the authorization identity, the row, the gate's registration.

    Raises:
        OperationRefused: the user may not act on the server now (``denied``, nothing created),
            a limit is reached, or the binding store is unavailable (the row then says ``failed``).
    """
    from ..tenancy import access
    from ..runtime import workers

    if access.denial(user.pk, server.tenant_id, server.pk):  # the first request goes out right after
        raise OperationRefused("denied", str(access.MESSAGE))
    check_limits_sync(user, server.tenant_id)
    request_id = new_request_id()
    auth = current_auth(server, user.pk, server.tenant_id)
    op = Operation.objects.create(
        tenant_id=server.tenant_id, user=user, server=server, method=method, name=stored_name(name),
        params=results.params_for_storage(params),
        request_id=request_id, latest_request_id=request_id, worker=workers.WORKER_ID, destructive=destructive,
        output_schema=output_schema, **auth,
    )
    op.server = server
    try:
        get_gate().register(
            request_id=request_id, server_id=str(server.pk), origin=server.origin, user=str(user.pk),
            tenant=str(server.tenant_id), method=method, params=params, operation_id=str(op.id),
            policy=conf.server_policy(server),
        )
    except StoreUnavailable:
        op.status = Operation.Status.FAILED
        op.error_code = STORE_UNAVAILABLE
        op.error_message = message_for(STORE_UNAVAILABLE)
        op.worker = ""
        op.save()
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    return op


#: the largest tool outputSchema an operation keeps (compact JSON, bytes); a larger one is not kept
#: and the structured result then reads "no output schema"
MAX_OUTPUT_SCHEMA_BYTES = 64 * 1024


def kept_output_schema(schema: Any) -> dict[str, Any] | None:
    """``schema`` when it is a JSON object of at most :data:`MAX_OUTPUT_SCHEMA_BYTES` without NUL
    characters (PostgreSQL keeps none), else None."""
    import json

    if not isinstance(schema, dict):
        return None
    try:
        text = json.dumps(schema, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return schema if len(text.encode("utf-8", "surrogatepass")) <= MAX_OUTPUT_SCHEMA_BYTES and "\\u0000" not in text \
        else None


#: the limits checked before an operation starts: (count, setting, message)
_LIMITS = (
    ("user_pending", "MAX_PENDING_ROUNDS",
     gettext_noop("You have too many rounds waiting for an answer; answer or let them expire first.")),
    ("user_starts", "MAX_STARTS_PER_MINUTE",
     gettext_noop("You started too many operations in the last minute; wait a moment.")),
    ("tenant_pending", "MAX_TENANT_PENDING_ROUNDS",
     gettext_noop("Your organisation has too many rounds waiting for an answer right now; try again later.")),
    ("tenant_starts", "MAX_TENANT_STARTS_PER_MINUTE",
     gettext_noop("Your organisation started too many operations in the last minute; wait a moment.")),
)


def check_limits_sync(user: Any, tenant_id: Any) -> None:
    """Refuse a new operation when the user or the tenant has too many rounds waiting for an
    answer, or started too many operations in the last minute (``MRTRWEB`` limits): the four
    counts in one query (the user's in every tenant, the tenant's of every user).

    Raises:
        OperationRefused: ``limit_reached``, with the message of the first limit reached.
    """
    from django.db.models import Count, Q

    since = timezone.now() - timezone.timedelta(minutes=1)
    waiting = Q(status=Operation.Status.AWAITING_INPUT)
    recent = Q(created_at__gte=since)
    mine, ours = Q(user=user), Q(tenant_id=tenant_id)  # the user's rows in every tenant count for them
    counts = limits_queryset(user.pk, tenant_id, since).aggregate(
        user_pending=Count("pk", filter=mine & waiting), user_starts=Count("pk", filter=mine & recent),
        tenant_pending=Count("pk", filter=ours & waiting), tenant_starts=Count("pk", filter=ours & recent))
    for name, key, message in _LIMITS:
        if (counts[name] or 0) >= int(conf.get(key)):
            logger.info("limit %s reached for user %s / tenant %s", key, getattr(user, "pk", "?"), tenant_id)
            raise OperationRefused(LIMIT_REACHED, message)


def limits_queryset(user_id: Any, tenant_id: Any, since: Any):
    """The rows the limit check counts (the benchmark EXPLAINs it): the user's and the tenant's
    operations waiting for an answer or started since ``since``."""
    from django.db.models import Q

    return Operation.objects.filter(Q(user_id=user_id) | Q(tenant_id=tenant_id)).filter(
        Q(status=Operation.Status.AWAITING_INPUT) | Q(created_at__gte=since))
