"""Suggestions as a person types in a prompt's or resource template's form (issue 28):
``POST servers/<id>/complete/<prompt|template>/?<the call page's name query>&field=arg-...`` with the
form's values (``arg-...``) in the body answers ``{"values": [...], "hasMore": bool}`` from the
server's ``completion/complete`` (:mod:`mrtrweb.completions`).

A POST, CSRF-checked, with what the person typed in its body, never in the URL: a URL is written
to every access log on the way (nginx, the ASGI server), and the asks go out as the person types.
The person must be able to use the server (as on its call page: another person's or a revoked
server is a 404), and the ask must come from the product's own pages (a browser's
``Sec-Fetch-Site`` other than ``same-origin`` is a 403, besides the CSRF token); the prompt or template must be listed by the server now, and ``field`` one of
its form's fields. Nothing is asked of a server that does not declare ``completions``, beyond
:data:`~mrtrweb.completions.LIMIT` asks per person and :data:`~mrtrweb.completions.SERVER_LIMIT` per
server and window (429), or for a value longer than
:data:`~mrtrweb.completions.MAX_VALUE_CHARS`. A server that fails, times out or answers
nonsense gives no suggestions (200, ``values: []`` with a ``reason`` code), logged: never a 500.
"""

from __future__ import annotations

import logging
import uuid
from typing import Final

from asgiref.sync import sync_to_async
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from .. import completions
from ..mcp import McpCallError
from ..servers import connections
from ..text import names
from .calls import PromptArgumentsForm, ResourceTemplateForm
from .common import _server_for, _user, login_required
from .servers import _find_listed, _listing

logger = logging.getLogger("mrtrweb.views")

#: how long one ask may take (seconds): a suggestion that comes later is of no use
ASK_TIMEOUT_S: Final = 5.0
#: per kind: the connection's listing, its key, the query parameter naming the item, the form
_KINDS: Final = {
    "prompt": ("list_prompts", "name", names.NAME_PARAM,
               lambda spec: PromptArgumentsForm(spec.get("arguments") or [], prefix="arg")),
    "template": ("list_resource_templates", "uriTemplate", "template",
                 lambda spec: ResourceTemplateForm(spec["uriTemplate"], prefix="arg")),
}


def _none(reason: str, status: int = 200) -> JsonResponse:
    return JsonResponse({"values": [], "hasMore": False, "reason": reason}, status=status)


@login_required
async def complete(request: HttpRequest, server_id: int, kind: str) -> HttpResponse:
    """The suggestions for one field (see the module doc)."""
    if request.method != "POST":  # typed values never in a URL (see the module doc)
        return _none("method_not_allowed", 405)
    if request.headers.get("Sec-Fetch-Site", "same-origin") != "same-origin":
        # another site must not make a person's browser ask servers in their name
        logger.info("completion ask refused: sent from another site (%s)", request.headers["Sec-Fetch-Site"][:20])
        return _none("cross_site", 403)
    if kind not in _KINDS:
        raise Http404("No such kind")
    user = await _user(request)
    server = await _server_for(user, server_id)
    list_name, key, param, make_form = _KINDS[kind]
    asked, wanted = names.requested(request.GET, param=param)
    field = request.GET.get("field", "")
    if (asked is None and wanted is None) or not field.startswith("arg-"):
        return _none("bad_request", 400)
    value = request.POST.get(field, "")
    if len(value) > completions.MAX_VALUE_CHARS:
        return _none("value_too_long")
    if not await sync_to_async(completions.allowed)(user.pk, server.pk):
        logger.info("completion ask of user %s on server %s refused: over the rate limit (the person's or the "
                    "server's)", user.pk, server.pk)
        return _none("rate_limited", 429)
    try:
        conn = await connections.connection_for(user, server)
        if not completions.declares_completions(conn.server_capabilities):
            return _none("not_declared")
        listed = await _listing(getattr(conn, list_name), key)
        spec = await sync_to_async(_find_listed, thread_sensitive=False)(listed, key, kind, asked, wanted)
        if spec is None:
            return _none("not_listed", 404)
        form = make_form(spec)
        by_field = {f"arg-{k}": name for name, k in getattr(form, "keys", {}).items()}
        if field not in by_field:
            return _none("no_such_field", 400)
        context = {by_field[f]: request.POST.get(f, "") for f in by_field if f != field and f in request.POST}
        params = completions.params_for(kind, spec[key], by_field[field], value, context)
        raw = await conn.send("completion/complete", params, f"complete-{uuid.uuid4()}", timeout_s=ASK_TIMEOUT_S)
    except McpCallError as exc:
        logger.info("completion ask on server %s failed (%s)", server.pk, exc.code)
        return _none(exc.code)
    values, has_more, dropped = completions.values_of(raw)
    if dropped or not isinstance((raw or {}).get("completion"), dict):
        logger.info("completion answer of server %s: %s values left out%s", server.pk, dropped,
                    "" if isinstance((raw or {}).get("completion"), dict) else " (no completion object)")
    return JsonResponse({"values": values, "hasMore": has_more})
