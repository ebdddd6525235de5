"""Starting an operation: the per-user and per-tenant limits, the row, the gate's
registration (``Gate.register``), then the call in the background (:mod:`.calls`).
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from .. import conf, results
from ..gate import StoreUnavailable
from ..gates import get_gate
from ..models import McpServer, Operation
from ..names import stored_name
from .authorization import _current_auth
from .calls import _drive
from .messages import LIMIT_REACHED, message_for, OperationRefused, STORE_UNAVAILABLE, WORKER_DRAINING
from .runtime import _spawn, new_request_id

logger = logging.getLogger("mrtrweb.operations")


async def start_operation(*, user: Any, server: McpServer, method: str, name: str, params: dict[str, Any]) -> Operation:
    """Register and start an operation; returns at once (the request goes out in the background).

    Raises:
        OperationRefused: this worker is draining (``worker_draining``, 503), a per-user limit is
            reached, or the binding store is unavailable.
        django.db.DatabaseError: the database is unreachable (nothing was sent).
    """
    from .. import leases, workers

    if leases.is_draining():
        logger.info("operation refused: worker %s is draining", workers.WORKER_ID)
        raise OperationRefused(WORKER_DRAINING, message_for(WORKER_DRAINING))
    await _check_limits(user, server.tenant_id)
    request_id = new_request_id()
    auth = await _current_auth(server, user.pk, server.tenant_id)
    await workers.ensure_lease()  # before the operation names this worker
    op = await Operation.objects.acreate(
        tenant_id=server.tenant_id, user=user, server=server, method=method, name=stored_name(name),
        params=results.params_for_storage(params),
        request_id=request_id, latest_request_id=request_id, worker=workers.WORKER_ID, **auth,
    )
    op.server = server
    try:
        await sync_to_async(get_gate().register)(
            request_id=request_id, server_id=str(server.pk), origin=server.origin, user=str(user.pk),
            tenant=str(server.tenant_id), method=method, params=params, operation_id=str(op.id),
            policy=conf.server_policy(server),
        )
    except StoreUnavailable:
        op.status = Operation.Status.FAILED
        op.error_code = STORE_UNAVAILABLE
        op.error_message = message_for(STORE_UNAVAILABLE)
        op.worker = ""
        await op.asave()
        raise OperationRefused(STORE_UNAVAILABLE, message_for(STORE_UNAVAILABLE)) from None
    _spawn(_drive(op.id, request_id, params))
    return op


async def _check_limits(user: Any, tenant_id: Any) -> None:
    """Refuse a new operation when the user or the tenant has too many rounds waiting for an
    answer, or started too many operations in the last minute (``MRTRWEB`` limits)."""
    since = timezone.now() - timezone.timedelta(minutes=1)
    waiting = Operation.Status.AWAITING_INPUT
    checks = (
        (Operation.objects.filter(user=user, status=waiting), "MAX_PENDING_ROUNDS",
         "You have too many rounds waiting for an answer; answer or let them expire first."),
        (Operation.objects.filter(user=user, created_at__gte=since), "MAX_STARTS_PER_MINUTE",
         "You started too many operations in the last minute; wait a moment."),
        (Operation.objects.filter(tenant_id=tenant_id, status=waiting), "MAX_TENANT_PENDING_ROUNDS",
         "Your organisation has too many rounds waiting for an answer right now; try again later."),
        (Operation.objects.filter(tenant_id=tenant_id, created_at__gte=since), "MAX_TENANT_STARTS_PER_MINUTE",
         "Your organisation started too many operations in the last minute; wait a moment."),
    )
    for queryset, key, message in checks:
        if await queryset.acount() >= int(conf.get(key)):
            logger.info("limit %s reached for user %s / tenant %s", key, getattr(user, "pk", "?"), tenant_id)
            raise OperationRefused(LIMIT_REACHED, message)
