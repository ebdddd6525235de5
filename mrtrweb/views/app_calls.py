"""The host's endpoints for an MCP App's own requests (issue 31 item 4, :mod:`mrtrweb.appcalls`,
docs/apps.md). Called by ``static/mrtrweb/apps-requests.js`` on the site's origin (never by the
app: it runs on the sandbox origin, without the site's cookies); every POST carries the CSRF token.
``<op_id>`` is the host operation: the person's own completed tool call whose page renders the app.

* ``app_request`` (POST, JSON ``{"method": ..., ...}``) -- ``tools/call`` ``{"name", "arguments"}``:
  ``{"status": "started", "operation": id}`` (read-only tool) or ``{"status": "confirm", "card":
  html}`` (the host-rendered confirmation, outside the frame); ``resources/read`` ``{"uri"}``:
  started; ``ui/open-link`` ``{"url"}``: ``{"status": "offered", "card": html}`` (the URL-mode
  interstitial); ``ui/download-file`` ``{"contents"}``: ``{"status": "offered", "card": html}``;
  ``sampling/createMessage`` ``{"params"}`` (:mod:`mrtrweb.appcalls.sampling`): held for the
  person, no model asked: ``{"status": "confirm", "card": html}`` (the request, outside the frame,
  with Draft with the model / Write the reply myself / Refuse), or ``not_offered`` (JSON-RPC ``-32601``) where the page does not offer sampling; every one
  of them counts toward the app's ``APPS_CALLS_PER_SECOND`` (429 ``rate_limited``).
  A refusal: 4xx ``{"error": code, "message": text, "rpc": <JSON-RPC error code for the app>}``
  (:class:`mrtrweb.appcalls.AppCallRefused`: ``-32602`` for ``bad_arguments``, else ``-32001``).
* ``app_decide`` (POST, ``decision`` = ``confirm`` | ``decline``) -- the person's decision on a card:
  started, or ``{"error": "declined"}``.
* ``app_sampling_decide`` (POST, ``token`` -- in the body, so that no log holds it --, ``decision`` =
  ``draft`` | ``write`` | ``send`` | ``refuse``, ``reply``) -- the person's decision on an app's
  sampling card: ``draft`` (only now the tenant's model is asked) ``{"status": "drafted", "card":
  html}`` (the request and the draft, editable, under a new token; or ``model_failed``: the request
  still waits); ``write`` (the person's reply, no model asked) or ``send`` (the draft, as it is or
  edited): ``{"status": "sampled", "result": CreateMessageResult}`` (what the app receives); or a
  refusal (``declined``, ``expired``, ``bad_reply``, ``bad_request``).
* ``app_call`` (GET) -- an app's operation as the page waits for it (:func:`mrtrweb.appcalls.calls.outcome`).
* ``app_download`` (GET) -- an offered file, once, as an attachment.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_POST

from .. import catalog
from ..appcalls import AppCallRefused, calls, offers, rights
from ..appcalls import sampling as app_sampling
from ..appcalls.host import app_host
from ..models import Operation
from .common import _user, login_required

logger = logging.getLogger("mrtrweb.views")

#: the largest request body the page may post (bytes)
MAX_BODY_BYTES = 8 * 1024 * 1024
_MAX_SHOWN_ARGUMENTS = 4000


def _refused(exc: AppCallRefused) -> JsonResponse:
    message = gettext(exc.message) + (" " + exc.detail if exc.detail else "")
    return JsonResponse({"error": exc.code, "message": message, "rpc": exc.rpc}, status=exc.status)


def _started(op: Operation) -> JsonResponse:
    return JsonResponse({"status": "started", "operation": str(op.id)})


def _card(request: HttpRequest, **ctx: Any) -> str:
    return render_to_string("mrtrweb/_app_request.html", ctx, request=request)


def _sampling_card(request: HttpRequest, host: Any, view: dict[str, Any], token: str,
                   draft: app_sampling.Draft | None = None) -> str:
    """An app's sampling card: the request (stage ``asked``) or the request and the model's draft."""
    return _card(request, kind="sampling", stage="drafted" if draft else "asked", host=host, view=view,
                 draft=draft.text if draft else "", model=draft.model if draft else "",
                 max_reply=app_sampling.MAX_REPLY_CHARS, sampling_token=token,
                 decide_url=reverse("mrtrweb:app-sampling-decide", args=[host.op.id]))


@login_required
@require_POST
async def app_request(request: HttpRequest, op_id: Any) -> HttpResponse:
    """See the module doc."""
    user = await _user(request)
    try:
        if len(request.body) > MAX_BODY_BYTES:
            raise AppCallRefused("bad_request", calls.BAD_REQUEST, 413)
        try:
            body = json.loads(request.body)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past the decoder's depth
            raise AppCallRefused("bad_request", calls.BAD_REQUEST) from None
        if not isinstance(body, dict):
            raise AppCallRefused("bad_request", calls.BAD_REQUEST)
        host = await app_host(user, op_id)
        method = body.get("method")
        if method == "tools/call":
            started = await calls.request_tool_call(user, host, body.get("name"), body.get("arguments"))
            if isinstance(started, Operation):
                return _started(started)
            shown = json.dumps(started.arguments, ensure_ascii=False, indent=2)
            card = await sync_to_async(_card)(
                request, kind="confirm", host=host, spec=started.spec, arguments=shown[:_MAX_SHOWN_ARGUMENTS],
                cut=len(shown) > _MAX_SHOWN_ARGUMENTS, destructive=catalog.is_destructive(started.spec),
                destructive_source="server" if catalog.tool_hints(started.spec).destructive_stated else "default",
                decide_url=reverse("mrtrweb:app-decide", args=[host.op.id, started.token]))
            return JsonResponse({"status": "confirm", "card": card})
        if method == "resources/read":
            return _started(await calls.read_resource(user, host, body.get("uri")))
        if method in ("ui/open-link", "ui/download-file"):
            # each is a card on the page, a download its bytes in the binding cache: counted as calls
            await sync_to_async(rights.take_slot)(host.op.pk)
        if method == "ui/open-link":
            view = offers.checked_link(body.get("url"))
            logger.info("app of operation %s: a link offered to the person (%s)", host.op.pk, view.host[:100])
            return JsonResponse({"status": "offered", "card": await sync_to_async(_card)(request, kind="link", url=view)})
        if method == "ui/download-file":
            files = await sync_to_async(offers.offer_download)(user, host, body.get("contents"))
            for f in files:
                f["url"] = reverse("mrtrweb:app-download", args=[host.op.id, f["token"]])
            logger.info("app of operation %s: %d file(s) offered to the person", host.op.pk, len(files))
            return JsonResponse({"status": "offered",
                                 "card": await sync_to_async(_card)(request, kind="download", files=files)})
        if method == app_sampling.METHOD:  # held for the person: no model is asked yet
            asked = await app_sampling.request(user, host, body.get("params"))
            return JsonResponse({"status": "confirm", "card": await sync_to_async(_sampling_card)(
                request, host, asked.view, asked.token)})
        raise AppCallRefused("bad_request", calls.BAD_REQUEST)
    except AppCallRefused as exc:
        logger.info("app of operation %s: request refused (%s)", op_id, exc.code)
        return _refused(exc)


@login_required
@require_POST
async def app_decide(request: HttpRequest, op_id: Any, token: str) -> HttpResponse:
    """See the module doc."""
    user = await _user(request)
    try:
        host = await app_host(user, op_id)
        decision = request.POST.get("decision")
        if decision not in ("confirm", "decline"):
            raise AppCallRefused("bad_request", calls.BAD_REQUEST)
        return _started(await calls.confirm(user, host, token, yes=decision == "confirm"))
    except AppCallRefused as exc:
        return _refused(exc)


@login_required
@require_POST
async def app_sampling_decide(request: HttpRequest, op_id: Any) -> HttpResponse:
    """See the module doc."""
    user = await _user(request)
    try:
        host = await app_host(user, op_id)
        decision = request.POST.get("decision")
        if decision not in ("draft", "write", "send", "refuse"):
            raise AppCallRefused("bad_request", calls.BAD_REQUEST)
        token = request.POST.get("token", "")
        if decision == "draft":  # only now the request goes to the tenant's model
            drafted = await app_sampling.draft(user, host, token)
            return JsonResponse({"status": "drafted", "card": await sync_to_async(_sampling_card)(
                request, host, drafted.view, drafted.token, drafted)})
        result = await app_sampling.decide(user, host, token, decision=decision, reply=request.POST.get("reply"))
    except AppCallRefused as exc:
        return _refused(exc)
    return JsonResponse({"status": "sampled", "result": result})


@login_required
@require_GET
async def app_call(request: HttpRequest, op_id: Any, call_id: Any) -> HttpResponse:
    """See the module doc."""
    user = await _user(request)
    try:
        host = await app_host(user, op_id)
    except AppCallRefused as exc:
        return _refused(exc)
    op = await calls.app_operation(user, host, call_id)
    out = await calls.outcome(op)
    if "message" in out:
        out["message"] = gettext(out["message"])
    return JsonResponse(out)


@login_required
@require_GET
async def app_download(request: HttpRequest, op_id: Any, token: str) -> HttpResponse:
    """See the module doc. 404: unknown, used, expired, or another person's."""
    user = await _user(request)
    taken = await sync_to_async(offers.take_download)(user, token)
    if taken is None:
        raise Http404("No such file")
    body, filename = taken
    response = HttpResponse(body, content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, no-store"
    return response
