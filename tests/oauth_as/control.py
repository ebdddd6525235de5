"""The test's window into the test authorization server (never part of a real one).

* :class:`EventMiddleware` records what each OAuth endpoint was asked and answered, without any
  token, code or secret: ``GET /_test/events`` returns them as ``{"events": [EVENT, ...]}``, oldest
  first, each ``{"kind": "authorize"|"token"|"introspect"|"revoke", "status": int, ...}`` (keys
  per kind below).
* Views under ``/_test/``, each requiring the header ``X-Control-Secret`` (403 otherwise):
  ``POST clients`` (JSON ``{"name", "redirect_uris": [...], "client_type": "confidential"|"public",
  "grant_type": "authorization-code"|"client-credentials"}`` → ``{"client_id", "client_secret"}``),
  ``POST settings`` (``{"access_token_ttl_s": int}``: the lifetime of tokens issued from now on),
  ``GET tokens?username=U`` (``{"access": n, "refresh": n}``: U's unexpired, unrevoked tokens),
  ``POST expire`` (``{"username": U}``: U's access tokens expire now), ``POST events/clear``.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import threading
import urllib.parse
from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

_lock = threading.Lock()
_events: list[dict[str, Any]] = []


def _client_id(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("basic "):
        try:
            raw = base64.b64decode(header[6:]).decode()
            return urllib.parse.unquote(raw.partition(":")[0])
        except (ValueError, UnicodeDecodeError):
            return None
    return request.POST.get("client_id") or request.GET.get("client_id")


def _token_user(token: str | None) -> str | None:
    """The username of the access token ``token`` (looked up by checksum, as DOT stores it)."""
    import hashlib

    from oauth2_provider.models import get_access_token_model

    if not token:
        return None
    found = (get_access_token_model().objects.select_related("user")
             .filter(token_checksum=hashlib.sha256(token.encode()).hexdigest()).first())
    return found.user.get_username() if found is not None and found.user is not None else None


class EventMiddleware:
    """Records one event per request to ``/o/authorize/``, ``/o/token/``, ``/o/introspect/`` and
    ``/o/revoke_token/``.

    authorize: ``method``, ``user`` (signed-in username or None), ``query`` (the parameter names
    and the values of ``response_type``, ``code_challenge_method``, ``scope``, ``resource``,
    ``redirect_uri``; never ``state`` or the challenge), ``location`` (the redirect's scheme, host,
    port and path, and its parameter names). token: ``grant_type``, ``client_id``,
    ``resource`` (list), ``scope``, ``has_code_verifier``, ``username`` (whose token was issued),
    ``refresh_token_issued``, ``expires_in``, ``error``. introspect: ``client_id``, ``active``,
    ``username``. revoke: ``client_id``, ``token_type_hint``, ``username`` (of an access token).
    """

    KINDS = {"/o/authorize/": "authorize", "/o/token/": "token", "/o/introspect/": "introspect",
             "/o/revoke_token/": "revoke"}
    SHOWN = ("response_type", "code_challenge_method", "scope", "resource", "redirect_uri")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        kind = self.KINDS.get(request.path)
        if kind is None:
            return self.get_response(request)
        event: dict[str, Any] = {"kind": kind, "method": request.method}
        if kind == "revoke":
            event["username"] = _token_user(request.POST.get("token"))
        response = self.get_response(request)
        event["status"] = response.status_code
        try:
            getattr(self, f"_{kind}")(request, response, event)
        except Exception as exc:  # noqa: BLE001 -- a recording failure must show in the events, not break the AS
            event["record_error"] = repr(exc)
        with _lock:
            _events.append(event)
        return response

    def _authorize(self, request, response, event) -> None:
        user = getattr(request, "user", None)
        event["user"] = user.get_username() if user is not None and user.is_authenticated else None
        q = request.GET if request.method == "GET" else request.POST
        event["query"] = {"names": sorted(q.keys()),
                          **{k: q.getlist(k) for k in self.SHOWN if k in q}}
        if response.has_header("Location"):
            loc = urllib.parse.urlsplit(response["Location"])
            event["location"] = {"origin": f"{loc.scheme}://{loc.netloc}", "path": loc.path,
                                 "names": sorted(k for k, _ in urllib.parse.parse_qsl(loc.query))}

    def _token(self, request, response, event) -> None:
        event.update(grant_type=request.POST.get("grant_type"), client_id=_client_id(request),
                     resource=request.POST.getlist("resource"), scope=request.POST.get("scope"),
                     has_code_verifier=bool(request.POST.get("code_verifier")))
        body = json.loads(response.content or b"{}")
        event.update(username=_token_user(body.get("access_token")),
                     refresh_token_issued=bool(body.get("refresh_token")),
                     expires_in=body.get("expires_in"), error=body.get("error"))

    def _introspect(self, request, response, event) -> None:
        body = json.loads(response.content or b"{}")
        event.update(client_id=_client_id(request), active=body.get("active"), username=body.get("username"))

    def _revoke(self, request, response, event) -> None:
        event.update(client_id=_client_id(request), token_type_hint=request.POST.get("token_type_hint"))


def _authorized(request: HttpRequest) -> bool:
    given = request.headers.get("X-Control-Secret", "")
    return hmac.compare_digest(given.encode(), os.environ.get("OAUTH_AS_CONTROL_SECRET", "").encode()) and bool(given)


def _control(view):
    @csrf_exempt
    def wrapped(request: HttpRequest) -> HttpResponse:
        if not _authorized(request):
            return JsonResponse({"error": "forbidden"}, status=403)
        try:
            data = json.loads(request.body or b"{}") if request.method == "POST" else {}
        except ValueError:
            return JsonResponse({"error": "bad json"}, status=400)
        return JsonResponse(view(request, data))
    return wrapped


def create_client(*, name: str, redirect_uris: list[str], client_type: str = "confidential",
                  grant_type: str = "authorization-code") -> dict[str, str]:
    """A DOT ``Application``; returns its ``client_id`` and plaintext ``client_secret`` (stored hashed)."""
    from oauth2_provider.generators import generate_client_secret
    from oauth2_provider.models import get_application_model

    secret = generate_client_secret() if client_type == "confidential" else ""
    app = get_application_model().objects.create(
        name=name, redirect_uris=" ".join(redirect_uris), client_type=client_type,
        authorization_grant_type=grant_type, client_secret=secret, algorithm="")
    return {"client_id": app.client_id, "client_secret": secret}


def _clients(request, data):
    return create_client(name=str(data.get("name", "client")), redirect_uris=list(data.get("redirect_uris", [])),
                         client_type=str(data.get("client_type", "confidential")),
                         grant_type=str(data.get("grant_type", "authorization-code")))


def _settings(request, data):
    from oauth2_provider.settings import oauth2_settings

    ttl = int(data["access_token_ttl_s"])
    oauth2_settings.ACCESS_TOKEN_EXPIRE_SECONDS = ttl  # read at each token issuance
    return {"access_token_ttl_s": ttl}


def _tokens(request, data):
    from oauth2_provider.models import get_access_token_model, get_refresh_token_model

    username = request.GET.get("username", "")
    access = get_access_token_model().objects.filter(user__username=username, expires__gt=timezone.now())
    refresh = get_refresh_token_model().objects.filter(user__username=username, revoked__isnull=True)
    return {"access": access.count(), "refresh": refresh.count()}


def _expire(request, data):
    from oauth2_provider.models import get_access_token_model

    n = get_access_token_model().objects.filter(user__username=str(data.get("username", ""))).update(
        expires=timezone.now() - timedelta(seconds=1))
    return {"expired": n}


def _events_view(request, data):
    with _lock:
        return {"events": list(_events)}


def _clear(request, data):
    with _lock:
        _events.clear()
    return {"cleared": True}


urlpatterns = [
    path("clients", _control(_clients)),
    path("settings", _control(_settings)),
    path("tokens", _control(_tokens)),
    path("expire", _control(_expire)),
    path("events", _control(_events_view)),
    path("events/clear", _control(_clear)),
]
