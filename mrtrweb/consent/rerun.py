"""Run an operation again with exactly its stored arguments (issue 13, item 3: "the operation that
needed it can be run again with the same arguments in one click").

The arguments never travel through the browser: :func:`start_rerun` starts a new operation from
the old one's ``params`` column (:func:`mrtrweb.text.results.stored_params`: the params as sent, byte
for byte) -- same method, same server, same user. The view :func:`operation_rerun` (POST, CSRF)
offers it from the panel of an operation that ended without a result (failed, interrupted,
denied -- the person's own Stop included --, expired: :func:`mrtrweb.consent.outcomes.rerunnable`);
access is checked again by :func:`~mrtrweb.operations.operation_for` and by the new operation's
start. The OAuth callback calls
:func:`start_rerun` after "Connect and run again" (:mod:`mrtrweb.authz.views`).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_POST

from ..tenancy import access
from .. import operations
from . import outcomes
from ..text import results
from ..models import Operation
from .panels import panel_context

logger = logging.getLogger("mrtrweb.rerun")

__all__ = ["RERUNNABLE", "RerunRefused", "operation_rerun", "start_rerun"]

#: the statuses an operation may be run again from (it ended without a result:
#: :func:`mrtrweb.consent.outcomes.rerunnable`)
RERUNNABLE: Final = outcomes.ENDED_WITHOUT_RESULT
METHODS: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class RerunRefused(Exception):
    """``op`` cannot be run again (still pending, completed, or its params are unusable)."""


async def start_rerun(user: Any, op: Operation) -> Operation:
    """A new operation of ``user`` with ``op``'s method, server and stored params.

    ``op`` must be ``user``'s, loaded with its server and checked for access
    (:func:`mrtrweb.tenancy.access.operation_for`).

    Raises:
        RerunRefused: ``op`` is not :data:`RERUNNABLE`, its stored params are not usable, or it was
            already run again (``Operation.rerun_as``: one run again per operation).
        operations.OperationRefused: a limit is reached or the binding store is down (nothing sent).
    """
    if op.initiator == Operation.Initiator.APP:
        raise RerunRefused("an app's call is run again by the app, not from its page")
    if op.user_id != user.pk or not outcomes.rerunnable(op):
        raise RerunRefused("only an operation that ended without a result can be run again")
    params = results.stored_params(op.params)
    key = METHODS.get(op.method)
    if key is None or not isinstance(params, dict) or not isinstance(params.get(key), str):
        raise RerunRefused("this operation's arguments cannot be sent again")
    # One run again per operation: claimed before anything is sent (a double submit, a reload, a
    # second tab, the callback of a second Connect all find it claimed); released if nothing started.
    claim = uuid.uuid4()
    if not await Operation.objects.filter(pk=op.pk, rerun_as__isnull=True).aupdate(rerun_as=claim):
        raise RerunRefused("this operation was already run again")
    try:
        new = await operations.start_operation(user=user, server=op.server, method=op.method, name=params[key],
                                               params=params, destructive=op.destructive,
                                               output_schema=op.output_schema)
    except BaseException:
        await Operation.objects.filter(pk=op.pk, rerun_as=claim).aupdate(rerun_as=None)
        raise
    await Operation.objects.filter(pk=op.pk, rerun_as=claim).aupdate(rerun_as=new.id)
    logger.info("operation %s started again as %s", op.id, new.id)
    return new


@login_required
@require_POST
async def operation_rerun(request: HttpRequest, op_id: Any) -> HttpResponse:
    """POST ``operations/<id>/rerun/``: start ``op_id`` again (same arguments), then its page.
    404: not the person's (or their access ended); 409: it cannot be run again (the panel with
    the reason); 503/409 from :class:`~mrtrweb.operations.OperationRefused`."""
    user = await request.auser()
    op = await operations.operation_for(user, op_id)
    try:
        new = await start_rerun(user, op)
    except RerunRefused as exc:
        return await _refused(request, op, str(exc), 409)
    except operations.OperationRefused as exc:
        return await _refused(request, op, exc.message, exc.status)
    return redirect("mrtrweb:operation", op_id=new.id)


async def _refused(request: HttpRequest, op: Operation, message: str, status: int) -> HttpResponse:
    ctx = await sync_to_async(panel_context)(op, error=message)
    ctx["csrf_token"] = get_token(request)
    return TemplateResponse(request, "mrtrweb/operation.html", ctx, status=status)
