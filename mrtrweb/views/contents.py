"""A completed operation's content items on the person's click (issue 28, item 3): the bytes of an
image, audio or embedded file that is not shown (``operation_content``: a download, never
rendered), and **Read** on a ``resource_link`` (``resource_link_read``: a new ``resources/read``
operation on the same server, through the one path every call takes -- access, gate, consent,
audit). A link's URI is never fetched as a URL.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from .. import operations, rendering
from ..models import Operation
from .common import _operation_for, _panel_response, _user, login_required

logger = logging.getLogger("mrtrweb.views")


@login_required
@require_GET
async def operation_content(request: HttpRequest, op_id: Any, index: int) -> HttpResponse:
    """Content item ``index`` of the user's completed operation as an attachment
    (``application/octet-stream``, ``nosniff``, a sandboxing CSP). 404: not the user's, no result,
    or that item has no payload."""
    user = await _user(request)
    op = await _operation_for(user, op_id)
    if op.status != Operation.Status.COMPLETED or op.result is None:
        raise Http404("No result")
    found = rendering.item_bytes(op.method, op.result, index)
    if found is None:
        raise Http404("No such content")
    body, content_type = found
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="content-{op.pk}-{index}.bin"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, no-store"
    return response


@login_required
@require_POST
async def resource_link_read(request: HttpRequest, op_id: Any, index: int) -> HttpResponse:
    """**Read** a ``resource_link`` of the user's completed tool call: ``resources/read`` of its URI
    on the same server, started as a new operation by this person (access re-checked), then its
    page. 404: not the user's, or item ``index`` is not a resource link with a URI."""
    user = await _user(request)
    op = await _operation_for(user, op_id)
    if op.status != Operation.Status.COMPLETED or op.result is None:
        raise Http404("No result")
    items = rendering.content_items(op.method, op.result)
    item = items[index][0] if 0 <= index < len(items) else None
    uri = item.get("uri") if isinstance(item, dict) and item.get("type") == "resource_link" else None
    if not isinstance(uri, str) or not uri or len(uri) > 2000:
        raise Http404("No such resource link")
    try:
        new = await operations.start_operation(user=user, server=op.server, method="resources/read", name=uri,
                                               params={"uri": uri})
    except operations.OperationRefused as exc:
        logger.info("reading a resource link of operation %s refused (%s)", op.pk, exc.code)
        return await _panel_response(request, op, error=exc.message, status=exc.status)
    return redirect("mrtrweb:operation", op_id=new.id)
