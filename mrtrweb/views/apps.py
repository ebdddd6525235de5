"""MCP Apps pages (issue 31, docs/apps.md): the host's two JSON endpoints on the site's origin and
the two pages of the sandbox origin (``MRTRWEB["APPS_SANDBOX_ORIGIN"]``).

On the site (a signed-in person, their own operation; POSTs carry the CSRF token):

* ``app_start`` (POST) -- for a running or completed ``tools/call`` operation of a server with apps on, whose
  tool (in the server's listing now) names a ``ui://`` app: starts ``resources/read`` of that URI on
  the same server, as an operation of this person like any other read (gate, limits, access,
  audit). JSON ``{"read": "<operation id>", "input": {...}, "status": ..., ["result" | "reason"]}``
  (the call's outcome so far, :func:`call_outcome`); 404: no app; 409: the call ended without a result.
* ``app_outcome`` (GET) -- the call's outcome so far, asked while it runs.
* ``app_document`` (GET) -- that read, once completed: checks the content (same URI, mime type
  ``text/html;profile=mcp-app``, at most :data:`MAX_HTML_BYTES`), builds the CSP from its
  ``_meta.ui.csp`` (:mod:`mrtrweb.mcpapps.csp`) and hands the HTML over once, under a random
  token in the binding cache (:data:`DOCUMENT_TTL_S`); JSON ``{"status": "ready", "document": path,
  "domains": [...], "refused": n, "allow": "...", "digest": "sha256:..."}`` or ``{"status": "running"}``;
  with approval required and this digest not approved (:mod:`mrtrweb.appapproval`), nothing handed
  over: ``{"status": "approval", "digest": ..., "domains": [...], "approvals": <the page, for whom may
  decide, else "">}``. ``?call=<operation id>``: the tool call it is shown for (names the tool on the
  approval page).  Too large (its read's result stored truncated at ``MAX_STORED_RESULT_BYTES``, or its HTML past
  :data:`MAX_HTML_BYTES` or that setting): 413 ``{"status": "failed", "error": "too_large",
  "bytes": <the document's size as the server sent it>, "limit": <the most shown>}``, logged.

On the sandbox origin only (any other host: 404):

* ``sandbox_proxy`` -- the proxy page, ``?site=<signed site origin>``; served with
  ``frame-ancestors <site origin>``, its script (``static/mrtrweb/apps-sandbox.js``) refuses to run
  top-level or for another parent;
* ``sandbox_document`` -- the app's document at its one-time path, with the CSP as an HTTP header.

Nothing here answers a round or carries a session, token or ``requestState`` to the sandbox.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.core import signing
from django.core.cache import caches
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.templatetags.static import static
from django.urls import reverse
from django.utils.html import escape
from django.views.decorators.http import require_GET, require_POST

from .. import conf, operations
from ..appapproval import records as approval_records
from ..mcp import McpCallError
from ..mcpapps import csp as app_csp, meta as app_meta
from ..mcpapps.sandbox import addressed_to_sandbox, sandbox_origin
from ..appcalls import host as app_hosts
from ..models import Operation
from ..servers import connections
from ..text import results
from .common import _operation_for, _user, login_required

logger = logging.getLogger("mrtrweb.views")

#: the largest app document handed over (bytes of UTF-8)
MAX_HTML_BYTES = 2 * 1024 * 1024
#: seconds a handed-over document waits for its one load
DOCUMENT_TTL_S = 120
_SIGN_SALT = "mrtrweb.apps.site"
_CACHE_PREFIX = "mrtrweb-app-doc:"


def _cache():
    return caches[conf.get("BINDING_CACHE")]


def apps_on(server: Any) -> bool:
    """Whether ``server``'s tools' apps may render: apps on for it and a sandbox origin configured
    (with approval required, each document besides: :func:`_approval`)."""
    return bool(getattr(server, "apps_enabled", False)) and sandbox_origin() is not None


def site_origin(request: HttpRequest) -> str:
    return f"{request.scheme}://{request.get_host()}"


def proxy_url(request: HttpRequest) -> str:
    """The sandbox proxy's URL for a page of this site (its origin signed into ``?site=``)."""
    signed = signing.dumps(site_origin(request), salt=_SIGN_SALT, compress=False)
    return f"{sandbox_origin()}{reverse('mrtrweb:app-sandbox')}?site={signed}"


def _no_app() -> JsonResponse:
    return JsonResponse({"error": "no_app"}, status=404)


@login_required
@require_POST
async def app_start(request: HttpRequest, op_id: Any) -> HttpResponse:
    """See the module doc."""
    user = await _user(request)
    op = await _operation_for(user, op_id)
    server = await sync_to_async(lambda: op.server)()
    if op.method != "tools/call" or not apps_on(server) or site_origin(request) == sandbox_origin():
        return _no_app()
    if op.status not in Operation.LIVE and (op.status != Operation.Status.COMPLETED or not isinstance(op.result, dict)):
        return JsonResponse({"status": op.status}, status=409)  # ended without a result: no app
    try:
        conn = await connections.connection_for(user, server)
        listed = await conn.list_tools()
    except McpCallError as exc:
        logger.info("app of operation %s: the tools could not be listed (%s)", op.pk, exc.code)
        return JsonResponse({"error": "unavailable"}, status=503)
    spec = next((t for t in listed if isinstance(t, dict) and t.get("name") == op.name), None)
    uri = app_meta.resource_uri(spec) if spec is not None else None
    if uri is None or app_meta.app_only(spec):
        return _no_app()
    try:
        read = await operations.start_operation(user=user, server=server, method="resources/read", name=uri,
                                                params={"uri": uri})
    except operations.OperationRefused as exc:
        logger.info("app of operation %s: its read was refused (%s)", op.pk, exc.code)
        return JsonResponse({"error": exc.code}, status=exc.status or 409)
    await sync_to_async(app_hosts.note_read)(read.id, op.id)  # its rendering is audited on this operation
    arguments = (op.params or {}).get("arguments")
    return JsonResponse({"read": str(read.id), "input": {"arguments": arguments if isinstance(arguments, dict) else {}},
                         **call_outcome(op)})


async def tool_has_app(user: Any, op: Operation) -> bool | None:
    """Whether the tool of ``op`` (a ``tools/call``) has an app the person's page may show: its
    listing (the connection's kept one when it has one, :meth:`~mrtrweb.mcp.listing.Listings.tools_known`)
    names a ``ui://`` resource and the tool is not its app's alone. None when the tools could not be
    listed now (the page leaves it to apps.js, which asks :func:`app_start` again)."""
    server = await sync_to_async(lambda: op.server)()
    try:
        conn = await connections.connection_for(user, server)
        listed = await conn.tools_known()
    except McpCallError as exc:
        logger.info("operation %s: the tools could not be listed for its page (%s)", op.pk, exc.code)
        return None
    spec = next((t for t in listed if isinstance(t, dict) and t.get("name") == op.name), None)
    return spec is not None and app_meta.resource_uri(spec) is not None and not app_meta.app_only(spec)


#: what the app is told when its call ends without a result (``ui/notifications/tool-cancelled``'s
#: ``reason``): the product's own words, never a server's text
CANCELLED_REASONS = {Operation.Status.FAILED: "failed", Operation.Status.INTERRUPTED: "failed",
                     Operation.Status.DENIED: "denied", Operation.Status.EXPIRED: "expired"}


def call_outcome(op: Operation) -> dict[str, Any]:
    """Where the call stands for its app: ``{"status": "running"}``, ``{"status": "completed",
    "result": <the CallToolResult>}`` or ``{"status": "cancelled", "reason": "stopped" | "failed" |
    "denied" | "expired"}`` (stopped: the person's Stop)."""
    if op.status in Operation.LIVE:
        return {"status": "running"}
    if op.status == Operation.Status.COMPLETED and isinstance(op.result, dict):
        return {"status": "completed", "result": op.result}
    reason = "stopped" if op.stop_requested_by else CANCELLED_REASONS.get(op.status, "failed")
    return {"status": "cancelled", "reason": reason}


@login_required
@require_GET
async def app_outcome(request: HttpRequest, op_id: Any) -> HttpResponse:
    """Where the person's tool call whose app is shown stands (:func:`call_outcome`, JSON); apps.js asks
    while the call runs, then sends ``tool-result`` or ``tool-cancelled``. 404: not a tool call of
    this person on a server with apps on."""
    user = await _user(request)
    op = await _operation_for(user, op_id)
    server = await sync_to_async(lambda: op.server)()
    if op.method != "tools/call" or not apps_on(server):
        return _no_app()
    return JsonResponse(call_outcome(op))


def _max_document_bytes() -> int:
    """The largest app document the product shows: :data:`MAX_HTML_BYTES`, or less when the read's
    stored result (``MAX_STORED_RESULT_BYTES``, compact JSON) cannot hold one that large."""
    return min(MAX_HTML_BYTES, int(conf.get("MAX_STORED_RESULT_BYTES")))


def _too_large(read: Operation) -> int | None:
    """The size in bytes of an app document too large to show (its read's result was stored
    truncated -- then the size of the whole result as the server sent it -- or its HTML is past
    :func:`_max_document_bytes`), else None."""
    result = read.result if isinstance(read.result, dict) else {}
    mark = result.get(results.TRUNCATED_KEY)
    if isinstance(mark, dict):
        return int(mark.get("original_bytes") or 0)
    contents = result.get("contents")
    for item in contents if isinstance(contents, list) else []:
        if isinstance(item, dict) and item.get("uri") == read.name and isinstance(item.get("text"), str):
            size = len(item["text"].encode("utf-8", "surrogatepass"))
            if size > _max_document_bytes():
                return size
    return None


def _html_of(read: Operation) -> tuple[str, Any] | None:
    """The app's HTML and its ``_meta.ui`` from a completed ``resources/read``, or None."""
    contents = read.result.get("contents") if isinstance(read.result, dict) else None
    for item in contents if isinstance(contents, list) else []:
        if not isinstance(item, dict) or item.get("uri") != read.name:
            continue
        mime = item.get("mimeType")
        if not isinstance(mime, str) or mime.replace(" ", "").lower() != app_meta.MIME_TYPE:
            return None
        text = item.get("text")
        if not isinstance(text, str) and isinstance(item.get("blob"), str):
            try:
                text = base64.b64decode(item["blob"], validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return None
        if not isinstance(text, str) or len(text.encode("utf-8", "surrogatepass")) > MAX_HTML_BYTES:
            return None
        meta = item.get("_meta")
        ui = meta.get("ui") if isinstance(meta, dict) else None
        return text, ui if isinstance(ui, dict) else {}
    return None


@login_required
@require_GET
async def app_document(request: HttpRequest, op_id: Any) -> HttpResponse:
    """See the module doc."""
    user = await _user(request)
    read = await _operation_for(user, op_id)
    server = await sync_to_async(lambda: read.server)()
    if read.method != "resources/read" or not read.name.startswith("ui://") or not apps_on(server):
        return _no_app()
    if read.status in Operation.LIVE:
        return JsonResponse({"status": "running"})
    if read.status != Operation.Status.COMPLETED:
        return JsonResponse({"status": "failed", "error": read.error_code or read.status}, status=502)
    too_large = _too_large(read)
    if too_large is not None:
        logger.info("app read %s: %s is %d bytes, past the %d an app document may have; not rendered", read.pk,
                    read.name[:200], too_large, _max_document_bytes())
        return JsonResponse({"status": "failed", "error": "too_large", "bytes": too_large,
                             "limit": _max_document_bytes()}, status=413)
    found = _html_of(read)
    if found is None:
        logger.info("app read %s: not an MCP App document (mime type, size or shape)", read.pk)
        return JsonResponse({"status": "failed", "error": "not_an_app"}, status=502)
    html, ui = found
    policy = app_csp.build(ui.get("csp"), own=(site_origin(request), sandbox_origin()))
    if policy.refused:
        logger.info("app read %s: %d declared domain(s) refused: %s", read.pk, len(policy.refused),
                    "; ".join(f"{name}: {why}" for name, _, why in policy.refused[:5]))
    digest = "sha256:" + hashlib.sha256(html.encode("utf-8", "surrogatepass")).hexdigest()
    if server.apps_require_approval:
        waiting = await _approval(request, user, server, read, digest, policy, ui, html)
        if waiting is not None:
            return waiting
    allow = app_csp.allow_attribute(ui.get("permissions"), allowed=())
    token = secrets.token_urlsafe(32)
    await sync_to_async(_cache().set)(_CACHE_PREFIX + token, {"html": html, "csp": policy.header,
                                                                        "site": site_origin(request)}, DOCUMENT_TTL_S)
    try:  # the rendering is an event of the tenant's chain (issue 31 item 5), or nothing is handed over
        await sync_to_async(app_hosts.record_rendered)(read, digest=digest, csp_header=policy.header,
                                                       domains=policy.outside_domains, refused=len(policy.refused))
    except Exception:  # noqa: BLE001 -- AuditUnavailable or the database: the app is not shown
        logger.warning("app read %s: its rendering could not be audited; not handed over", read.pk)
        await sync_to_async(_cache().delete)(_CACHE_PREFIX + token)
        return JsonResponse({"status": "failed", "error": "audit_unavailable"}, status=503)
    return JsonResponse({"status": "ready", "document": reverse("mrtrweb:app-sandbox-document", args=[token]),
                         "domains": list(policy.outside_domains), "refused": len(policy.refused), "allow": allow,
                         "digest": digest})


async def _approval(request: HttpRequest, user: Any, server: Any, read: Operation, digest: str,
                    policy: app_csp.CspPolicy, ui: dict[str, Any], html: str) -> HttpResponse | None:
    """None when this exact document (``digest``) is approved for ``server``'s app; else the
    "waiting for approval" answer (the document is recorded as pending on first sight; the
    tool is the one of the call named by ``?call=<operation id>``, when it is this person's, on
    this server). ``approvals`` (the page to decide on) only for whom may decide."""
    tool = ""
    call_id = request.GET.get("call", "")
    if call_id:
        call = await Operation.objects.filter(pk=call_id if _is_uuid(call_id) else None, user=user, server=server,
                                              method="tools/call").values_list("name", flat=True).afirst()
        tool = call or ""
    status = await sync_to_async(approval_records.status_for)(
        server, read.name, digest, tool=tool, policy=policy, permissions=ui.get("permissions"),
        size=len(html.encode("utf-8", "surrogatepass")))
    if status == "approved":
        return None
    logger.info("app read %s: %s %s not approved (%s); not rendered", read.pk, read.name[:200], digest, status)
    manager = await sync_to_async(approval_records.manageable_server)(user, server.pk)
    return JsonResponse({"status": "approval", "digest": digest, "domains": list(policy.outside_domains),
                         "approvals": reverse("mrtrweb:app-approvals", args=[server.pk]) if manager else ""})


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _sandbox_only(request: HttpRequest) -> None:
    if not addressed_to_sandbox(request.scheme, request.get_host()):
        raise Http404("Not here")


def _exempt(response: HttpResponse) -> HttpResponse:
    response._csp_exempt = True  # type: ignore[attr-defined]  -- its own policy, set here
    response.xframe_options_exempt = True  # type: ignore[attr-defined]  -- frame-ancestors decides
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_GET
def sandbox_proxy(request: HttpRequest) -> HttpResponse:
    """The sandbox proxy page (see the module doc). 404 off the sandbox origin; 400 without a valid
    signed site origin."""
    _sandbox_only(request)
    try:
        site = signing.loads(request.GET.get("site", ""), salt=_SIGN_SALT)
    except signing.BadSignature:
        return _exempt(HttpResponse("Not embedded by this site.", status=400, content_type="text/plain"))
    script = static("mrtrweb/apps-sandbox.js")
    body = (f'<!doctype html><html><head><meta charset="utf-8"><title>sandbox</title>'
            f'<style>html,body{{margin:0;padding:0;height:100%;overflow:hidden}}'
            f'iframe{{border:0;width:100%;height:100%;display:block}}</style></head>'
            f'<body data-site="{escape(site)}" data-document-prefix="{escape(reverse("mrtrweb:app-sandbox"))}doc/">'
            f'<script src="{escape(script)}"></script></body></html>')
    response = HttpResponse(body, content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = (f"default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; "
                                           f"frame-src 'self'; base-uri 'none'; form-action 'none'; "
                                           f"frame-ancestors {site}")
    return _exempt(response)


@require_GET
def sandbox_document(request: HttpRequest, token: str) -> HttpResponse:
    """The app's document, once (see the module doc). 404 off the sandbox origin or when the token is
    unknown, used or expired."""
    _sandbox_only(request)
    cache = _cache()
    key = _CACHE_PREFIX + token
    held = cache.get(key)
    cache.delete(key)
    if not isinstance(held, dict):
        raise Http404("No such document")
    response = HttpResponse(held["html"], content_type="text/html; charset=utf-8")
    # frame-ancestors names every ancestor: the proxy (this origin) and the site's page above it
    response["Content-Security-Policy"] = held["csp"] + f"; frame-ancestors {sandbox_origin()} {held['site']}"
    return _exempt(response)
