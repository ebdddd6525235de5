"""What every view shares: the requesting user, their server and operation looked up through
their memberships (another user's is a 404; access that ended is a 404 and ends the operation),
the round panel's response, and the audit of refused attempts.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import user_passes_test
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils.translation import gettext, gettext_lazy

from ..tenancy import access
from ..tenancy.reads import ANY_USER, operation_row
from ..audit import events as audit
from ..operations import expiry
from .. import operations
from ..models import Operation
from ..consent.panels import panel_context

logger = logging.getLogger("mrtrweb.views")


async def _user(request: HttpRequest):
    return await request.auser()


async def _signed_in(user: Any) -> bool:
    return user.is_authenticated


#: Django's ``login_required`` for these async views, its test a coroutine: no thread hop for
#: reading ``is_authenticated`` of the user ``request.auser()`` loaded (mrtrweb.runtime.onehop)
login_required = user_passes_test(_signed_in)


_server_for = access.server_for

#: the 409 of an answer to a round no longer open (a second tab, a resubmitted card): said once,
#: above the operation as it is now (its real status, its result or "Run again")
ANSWER_NOT_SENT = gettext_lazy("Your answer was not sent: this round is no longer open (it was already answered, "
                               "expired or ended). The operation as it is now:")
#: the 409 of a Stop of an operation that had already ended
NOTHING_TO_STOP = gettext_lazy("This operation had already ended: there was nothing to stop.")


async def _operation_for(user: Any, op_id: Any) -> Operation:
    """The user's operation while they may act on it (:func:`mrtrweb.tenancy.access.operation_for`).

    Raises:
        Http404: not theirs; :class:`~mrtrweb.tenancy.access.AccessEnded` (a 404 too) when their access
            ended (the operation is then ended as denied, nothing sent)."""
    return await operations.operation_for(user, op_id)


async def _current(user: Any, op_id: Any) -> Operation:
    """The user's operation, after settling it if the worker named on it is dead
    (:mod:`mrtrweb.runtime.workers`) or its round is past its lifetime (:mod:`mrtrweb.operations.expiry`)."""
    op = await _operation_for(user, op_id)
    settled = False
    if op.status in Operation.LIVE and op.worker:
        settled = bool(await operations.reap_interrupted(op.pk))
    if not settled:
        settled = await expiry.settle_if_due(op)
    if settled:
        op = await _operation_for(user, op_id)
    return op


async def _record_refused_after_access(exc: access.AccessEnded, what: str) -> None:
    """An answer or a stop posted by the owner after their access ended: refused (404, nothing
    sent) and recorded as ``rejected`` with code ``access_revoked``."""
    logger.warning("%s on operation %s refused: access ended (%s)", what, exc.op.id, exc.cause)
    try:
        await sync_to_async(audit.record)(exc.op, "rejected", code=access.ACCESS_REVOKED,
                                          reason=f"{what} after access ended: {exc.cause}", round_number=exc.op.rounds,
                                          request_id=exc.op.latest_request_id)
    except audit.AuditUnavailable:
        pass


async def _record_foreign_attempt(user: Any, op_id: Any) -> None:
    """An answer posted by someone who does not own the operation: recorded (the owner's tenant
    chain, the attempting user's digest), never acted on."""
    try:
        op = await Operation.objects.select_related("server", "tenant").aget(pk=op_id)
    except (Operation.DoesNotExist, ValueError):
        return
    logger.warning("answer attempt on operation %s by another user", op.id)
    try:
        await sync_to_async(audit.record)(op, "rejected", code="mrtr_identity_or_argument_mismatch",
                                          reason="answer attempt by another user", round_number=op.rounds,
                                          request_id=op.latest_request_id, user_id=user.pk)
    except audit.AuditUnavailable:
        pass


async def _panel_response(request: HttpRequest, op: Operation, *, status: int, **kwargs: Any) -> HttpResponse:
    """The operation's page as it is now, re-read and rendered in one thread hop. A card or review
    (``forms``/``review``) whose round was answered meanwhile (from another tab or worker) is not
    shown: 409 with the inactive-round message instead, so the person knows this answer was not sent."""
    csrf = get_token(request)

    def page() -> tuple[str, int]:
        fresh = operation_row(op.pk, ANY_USER)  # (SQL built once: no ORM query compiled)
        if fresh is None:
            raise Operation.DoesNotExist(f"operation {op.pk} is gone")
        shown, code = kwargs, status
        if (shown.get("forms") or shown.get("review")) and fresh.status != Operation.Status.AWAITING_INPUT:
            logger.info("operation %s: card or review not shown, the round is no longer open (%s)", fresh.id,
                        fresh.status)
            shown, code = {"error": gettext(ANSWER_NOT_SENT)}, 409
        ctx = panel_context(fresh, **shown)
        ctx["csrf_token"] = csrf
        return render_to_string("mrtrweb/operation.html", ctx, request=request), code

    body, code = await sync_to_async(page)()
    return HttpResponse(body, status=code)
