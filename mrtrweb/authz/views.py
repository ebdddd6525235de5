"""The person's OAuth pages (issue 13, item 3): Connect, Continue, the callback, Connections,
Disconnect, and the Client ID Metadata Document. URLs in :mod:`mrtrweb.authz.urls`.

Flow: the server page or a stopped operation POSTs **Connect** (CSRF) -> :func:`connect` calls
:func:`mrtrweb.authz.service.start_connect` and shows an interstitial naming the authorization
server's origin and the MCP server's; **Continue** is a GET of :func:`go`, which re-checks that the
pending flow is this person's, this browser session's (:func:`mrtrweb.authz.browser.same_session`),
unused and unexpired, and answers a 302 to the authorization URL (never rendered as a link).
The authorization server sends the browser to :func:`callback` (any worker):
:func:`~mrtrweb.authz.service.finish_connect` checks state, session, ``iss`` and exchanges the code;
then the browser goes back to the flow's ``return_to`` (a path of this site only) -- or, after
"Connect and run again", to the operation started again with the same stored arguments
(:func:`mrtrweb.consent.rerun.start_rerun`).

Refusals are pages with a stable code and a message (``authz/refused.html``), never a 500:
400 for the person's request (``state_invalid``, ``not_oauth``, ``bad_request``), 502 when the
authorization server or the outbound guard refused (``authorization_failed``, ``outbound_refused``).
Nothing in these pages or their logs holds a token, code, state or verifier.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _, gettext_noop
from django.views.decorators.http import require_GET, require_POST

from ..tenancy import access
from .. import conf, operations
from ..consent import rerun
from ..mcp.errors import origin_of
from ..models import McpServer, Operation
from . import browser, crypto, pages, service
from .models import OAuthConnection, PendingAuthorization

logger = logging.getLogger("mrtrweb.authz.views")

#: the session key of a pending "Connect and run again": {"op": uuid, "server": id, "at": epoch s}
RERUN_SESSION_KEY: Final = "mrtrweb.oauth.rerun"
#: refusal codes answered 502 (an upstream refused); the rest are 400
UPSTREAM_CODES: Final = frozenset({"authorization_failed", "outbound_refused"})
#: the longest callback query value looked at (a longer one is refused before the service runs)
MAX_QUERY_VALUE: Final = 4096
#: the largest primary key a URL may name (a 64-bit column; a larger one would overflow the lookup)
MAX_PK: Final = 2 ** 63 - 1

REFUSED_MESSAGES: Final = {
    "not_oauth": gettext_noop("This server does not use OAuth per person: there is nothing to connect."),
    "state_invalid": gettext_noop("This sign-in cannot be completed: it is unknown, was already used, expired, or was started "
                     "by another person or in another browser. Nothing was stored. Start again from the server page."),
    "bad_request": gettext_noop("This request is not valid. Nothing was stored."),
    "signed_out": gettext_noop("You are not signed in (any more), so this sign-in cannot be completed. Nothing was stored. "
                  "Sign in and connect again from the server page."),
}


def redirect_uri(request: HttpRequest) -> str:
    """The exact OAuth redirect URI: ``MRTRWEB["OAUTH_REDIRECT_URI"]``, else this site's callback
    URL as this request sees it."""
    return conf.get("OAUTH_REDIRECT_URI") or request.build_absolute_uri(reverse("mrtrweb:oauth-callback"))


def _refused(request: HttpRequest, code: str, message: str = "", *, server: Any = None) -> HttpResponse:
    status = 502 if code in UPSTREAM_CODES else 400
    return TemplateResponse(request, "mrtrweb/authz/refused.html",
                            {"code": code, "message": message or REFUSED_MESSAGES.get(code, REFUSED_MESSAGES["bad_request"]),
                             "server": server}, status=status)


_server_for = access.server_for


async def _session_key(request: HttpRequest) -> str:
    if not request.session.session_key:
        await request.session.asave()
    return request.session.session_key or ""


async def _rerun_target(user: Any, server: McpServer, value: str) -> Operation | None:
    """The person's operation ``value`` to run again after connecting, when it stopped on
    authorization at ``server``; None otherwise (a bad value is ignored, never an error)."""
    if not value:
        return None
    try:
        op = await operations.operation_for(user, value)
    except Http404:  # also AccessEnded
        return None
    if op.server_id != server.pk or op.status != Operation.Status.FAILED or op.error_code not in pages.AUTH_ERROR_CODES:
        return None
    return op


@login_required
@require_POST
async def connect(request: HttpRequest, server_id: int) -> HttpResponse:
    """POST ``oauth/connect/<server_id>/`` (``return_to``: a path of this site; ``rerun``: the id of
    the person's operation that stopped on authorization, run again after connecting). Starts a flow
    and shows the interstitial. 404: not the person's server; 400 ``not_oauth``; 502 when discovery
    or registration was refused."""
    user = await request.auser()
    server = await _server_for(user, server_id)
    if server.auth_mode != McpServer.AuthMode.OAUTH_USER:
        return _refused(request, "not_oauth", server=server)
    server_page = reverse("mrtrweb:server", args=[server.pk])
    return_to = browser.safe_return_to(request.POST.get("return_to"), host=request.get_host(), default=server_page)
    op = await _rerun_target(user, server, request.POST.get("rerun", ""))
    if op is not None:
        return_to = reverse("mrtrweb:operation", args=[op.id])
    try:
        start = await service.start_connect(user=user, tenant=server.tenant, server=server,
                                            session_key=await _session_key(request), return_to=return_to,
                                            redirect_uri=redirect_uri(request), scope=None)
    except service.ConnectRefused as exc:
        logger.info("connect to server %s refused (%s)", server.pk, exc.code)
        if exc.code == "not_required":  # the server did not ask for authorization: nothing to connect
            messages.info(request, _("This server did not ask for authorization: there is nothing to connect."),
                          fail_silently=True)
            return HttpResponseRedirect(return_to)
        return _refused(request, exc.code, exc.message, server=server)
    if op is not None:
        await request.session.aset(RERUN_SESSION_KEY, {"op": str(op.id), "server": server.pk, "at": time.time()})
    else:
        await request.session.apop(RERUN_SESSION_KEY, None)
    logger.info("connect to server %s started (pending %s)", server.pk, start.pending_id)
    # a mix-up hint: the authorization endpoint at another origin than the issuer's (both shown)
    issuer_origin = _origin_or_blank(start.issuer)
    return TemplateResponse(request, "mrtrweb/authz/connect.html",
                            {"server": server, "authorization_origin": start.authorization_origin,
                             "issuer_origin": issuer_origin if issuer_origin and issuer_origin != _origin_or_blank(
                                 start.authorization_origin) else "",
                             "pending_id": start.pending_id, "return_to": return_to, "rerun": op is not None})


def _origin_or_blank(url: str) -> str:
    try:
        return origin_of(url) if url else ""
    except ValueError:
        return ""


def _go_target(user_id: Any, session_key: str | None, pending_id: int) -> str | None:
    """The authorization URL of the pending flow ``pending_id`` when it is ``user_id``'s, this
    session's, unused, unexpired, its server still theirs, and its URL http(s) at the origin shown
    on the interstitial; else None. Blocking (one query, one unseal)."""
    row = PendingAuthorization.objects.filter(pk=pending_id, user_id=user_id, used_at__isnull=True,
                                              expires_at__gt=timezone.now()).first()
    if row is None or not browser.same_session(row.session_digest, session_key):
        return None
    if access.denial(user_id, row.tenant_id, row.server_id):
        return None
    try:
        flow = crypto.unseal(row.flow_sealed)
        url = flow["authorization_url"]
        if origin_of(url) != origin_of(row.authorization_origin):
            return None
    except (crypto.SecretUnreadable, KeyError, TypeError, ValueError):
        return None
    return url


@login_required
@require_GET
async def go(request: HttpRequest, pending_id: int) -> HttpResponse:
    """GET ``oauth/go/<pending_id>/`` (the interstitial's Continue): 302 to the authorization
    URL; 400 ``state_invalid`` when the flow is not this person's and session's, used or expired."""
    user = await request.auser()
    url = await sync_to_async(_go_target)(user.pk, request.session.session_key, pending_id)
    if url is None:
        logger.info("continue of pending authorization %s refused", pending_id)
        return _refused(request, "state_invalid")
    response = HttpResponseRedirect(url)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


def _query_refusal(query: Any) -> str:
    """``""`` when the callback's query may go to the service, else a refusal code."""
    for key in ("state", "code", "iss", "error", "error_description"):
        values = query.getlist(key)
        if len(values) > 1 or any(len(v) > MAX_QUERY_VALUE for v in values):
            return "bad_request"
    return "" if query.get("state") else "state_invalid"


async def _take_rerun(request: HttpRequest, server_id: Any) -> Any:
    intent = await request.session.apop(RERUN_SESSION_KEY, None)
    if not isinstance(intent, dict) or intent.get("server") != server_id:
        return None
    if not isinstance(intent.get("at"), (int, float)) or time.time() - intent["at"] > float(conf.get("OAUTH_PENDING_TTL_S")):
        return None
    return intent.get("op")


@require_GET
async def callback(request: HttpRequest) -> HttpResponse:
    """GET ``oauth/callback/`` (the redirect URI; any worker): finish the flow named by ``state``.

    Success: 302 to the flow's ``return_to`` (re-checked: a path of this site), or to the
    operation run again. Refused: 400/502 page with the code; nothing stored. A browser that is not
    signed in (any more) gets the ``signed_out`` page, not the sign-in page: a ``next=`` would carry
    the authorization code into another URL (and its log line), and the flow is bound to the
    session that started it, which signing in replaces."""
    user = await request.auser()
    if not user.is_authenticated:
        logger.info("authorization callback refused: not signed in")
        return _refused(request, "signed_out")
    code = _query_refusal(request.GET)
    if code:
        logger.info("authorization callback refused before the exchange (%s)", code)
        return _refused(request, code)
    try:
        done = await service.finish_connect(user=user, session_key=request.session.session_key or "",
                                            query=request.GET)
    except service.ConnectRefused as exc:
        logger.info("authorization callback refused (%s)", exc.code)
        return _refused(request, exc.code, exc.message)
    server_id = getattr(done, "server_id", None)
    default = reverse("mrtrweb:server", args=[server_id]) if server_id else reverse("mrtrweb:connections")
    return_to = browser.safe_return_to(getattr(done, "return_to", None), host=request.get_host(), default=default)
    server = await McpServer.objects.filter(pk=server_id).afirst() if server_id else None
    name = server.name if server is not None else ""
    messages.success(request, _("Connected to %(name)s.") % {"name": name}, fail_silently=True)
    logger.info("authorization to server %s completed for user %s", server_id, user.pk)
    rerun_id = await _take_rerun(request, server_id)
    if rerun_id:
        try:
            old = await operations.operation_for(user, rerun_id)
            new = await rerun.start_rerun(user, old)
        except (Http404, rerun.RerunRefused, operations.OperationRefused) as exc:
            logger.info("run again after connecting not started (%s)", type(exc).__name__)
        else:
            return redirect("mrtrweb:operation", op_id=new.id)
    return HttpResponseRedirect(return_to)


@login_required
@require_GET
async def connections(request: HttpRequest) -> HttpResponse:
    """GET ``connections/``: the person's connected servers (server, tenant, authorization server
    origin, scopes, expiry, connected since) with Disconnect. Never a token."""
    user = await request.auser()
    rows = await sync_to_async(pages.connection_rows)(user.pk)
    return TemplateResponse(request, "mrtrweb/authz/connections.html",
                            {"connections": rows, "csrf_token": get_token(request)})


@login_required
@require_POST
async def disconnect(request: HttpRequest, server_id: int) -> HttpResponse:
    """POST ``connections/<server_id>/disconnect/``: :func:`~mrtrweb.authz.service.disconnect` revokes
    (RFC 7009, where the authorization server supports it; best effort) and deletes the person's
    connection to the server; back to ``return_to``
    (a path of this site) or the Connections page. 404: no such connection of this person."""
    user = await request.auser()
    if not 0 < server_id <= MAX_PK:  # a foreign-key lookup does not range-check (OverflowError, DataError)
        raise Http404("No such connection")
    conn = await OAuthConnection.objects.select_related("server", "tenant").filter(
        user_id=user.pk, server_id=server_id).afirst()
    if conn is None:
        raise Http404("No such connection")
    outcome = await service.disconnect(user=user, tenant=conn.tenant, server=conn.server)
    logger.info("user %s disconnected from server %s (%s)", user.pk, server_id, outcome)
    if outcome == service.REVOKED:
        text = _("Disconnected from %(name)s; the authorization server revoked the tokens.")
    else:
        text = _("Disconnected from %(name)s.")
    messages.success(request, text % {"name": conn.server.name}, fail_silently=True)
    return HttpResponseRedirect(browser.safe_return_to(request.POST.get("return_to"), host=request.get_host(),
                                                       default=reverse("mrtrweb:connections")))


@require_GET
def client_metadata(request: HttpRequest) -> HttpResponse:
    """GET: this deployment's Client ID Metadata Document (public JSON; the client id **is** the
    ``MRTRWEB["OAUTH_CLIENT_METADATA_URL"]`` the deployer routes here). 404 when that is unset."""
    url = conf.get("OAUTH_CLIENT_METADATA_URL")
    if not url:
        raise Http404("No client metadata document")
    document = {"client_id": url, "client_name": conf.get("OAUTH_CLIENT_NAME"),
                "redirect_uris": [redirect_uri(request)],
                "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                "token_endpoint_auth_method": "none"}
    response = JsonResponse(document)
    response["Cache-Control"] = "public, max-age=300"
    response["X-Content-Type-Options"] = "nosniff"
    return response
