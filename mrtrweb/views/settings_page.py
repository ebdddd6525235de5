"""A tenant admin's settings page of one MCP server: authorization (issue 13: the auth mode,
tenant credentials, the OAuth client id / secret, the issuer they were issued by and scope;
:class:`mrtrweb.authz.forms.ServerAuthForm`, secrets write-only; a missing issuer is looked up at
the server and suggested in the error, for the admin to confirm), the protocol spoken to the
server (:class:`ServerProtocolForm`, issue 15: automatic, 2026-07-28 only or 2025-11-25 only), MCP
Apps (:class:`ServerAppsForm`, issue 31: off by default) and the
deprecated exception (sampling / roots; :class:`mrtrweb.consent.sampling.ServerSettingsForm`). The forms are
posted together and saved together (one transaction) only when all are valid; a refusal is a 400 with the form errors, never a 500.
Only tenant admins of the server's tenant see it, and for a personal server (issue 29) its owner
alone (with :class:`mrtrweb.serverconfig.forms.PersonalAuthForm`); others: 404. A saved change is
an event of the tenant's audit chain (``auth_changed`` / ``server_changed``, in the same
transaction; :mod:`mrtrweb.serverconfig.events`)."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.decorators import login_required
from django import forms
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.response import TemplateResponse

from ..tenancy import access
from ..consent import sampling
from ..authz.forms import ServerAuthForm
from ..serverconfig import events as config_events
from ..serverconfig.forms import PersonalAuthForm
from ..models import McpServer, Membership

logger = logging.getLogger("mrtrweb.views")

#: the prefix of the authorization form's fields (``auth-auth_mode``, ``auth-bearer_token``, ...)
AUTH_PREFIX = "auth"
#: the prefix of the protocol form's field (``protocol-protocol``)
PROTOCOL_PREFIX = "protocol"
#: the prefix of the MCP Apps form's fields (``apps-apps_enabled``; ``apps-shown`` marks a post
#: that carries the part: an unticked checkbox posts nothing)
APPS_PREFIX = "apps"


class ServerProtocolForm(forms.ModelForm):
    """The protocol version spoken to the server (``McpServer.protocol``, its choices and help
    text). A changed setting replaces the pooled connections at their next use
    (:meth:`mrtrweb.mcp.ConnectionPool.get`) and changes the server's config digest when pinned."""

    class Meta:
        model = McpServer
        fields = ["protocol"]


class ServerAppsForm(forms.ModelForm):
    """MCP Apps for this server (issue 31, docs/apps.md): on or off (off by default), and whether
    each app's HTML must be approved by its digest first. A change replaces the pooled connections
    (the extension is declared or not) at their next use."""

    class Meta:
        model = McpServer
        fields = ["apps_enabled", "apps_require_approval"]


def _lookup(server: McpServer) -> Any:
    """The issuer suggestion of the authorization form (sync): what the server's metadata names
    (:func:`mrtrweb.authz.service.discover_issuer`), for the admin to confirm."""
    from ..authz import service

    return lambda: async_to_sync(service.discover_issuer)(server)


#: the settings whose change is a ``server_changed`` event (names only, never values; issue 29)
_CHANGED_FIELDS = ("protocol", "allow_sampling", "allow_roots", "roots")
#: the settings whose change is an ``auth_changed`` event
_AUTH_FIELDS = ("auth_mode", "oauth_client_id", "oauth_issuer", "oauth_scope", "auth_secret_digest")


def _audited(server: McpServer) -> dict[str, Any]:
    return {name: getattr(server, name) for name in (*_CHANGED_FIELDS, *_AUTH_FIELDS)}


def _audit(server: McpServer, user_id: Any, before: dict[str, Any], new_secret: Any) -> None:
    """The configuration events of a save (in its transaction): ``auth_changed`` when the
    authorization changed, ``server_changed`` naming the other settings that did."""
    after = _audited(server)
    if any(before[name] != after[name] for name in _AUTH_FIELDS):  # a new secret changes its digest
        config_events.auth_changed(server, user_id, "kept" if new_secret is None else
                                   "replaced" if new_secret else "removed")
    config_events.server_changed(server, user_id, [n for n in _CHANGED_FIELDS if before[n] != after[n]])


def _error_codes(*forms: Any) -> str:
    return ", ".join(sorted({e.code or "invalid" for form in forms for errs in form.errors.as_data().values()
                             for e in errs}))


def _settings_form(server: McpServer, *args: Any, **kwargs: Any) -> Any:
    """The sampling and roots form; for a personal server without ``allow_sampling`` (sampling is
    answered by the deployment's provider: a tenant admin's choice, never a person's; it stays off)."""
    form = sampling.ServerSettingsForm(*args, **kwargs)
    if server.owner_id is not None:
        del form.fields["allow_sampling"]
    return form


def _server_settings_sync(request: HttpRequest, user: Any, server_id: int) -> HttpResponse:
    # a tenant server: its tenant's admins; a personal server (issue 29): its owner alone
    server = McpServer.objects.select_related("tenant").filter(pk=server_id).first()
    if server is None or access.denial(user.pk, server.tenant_id):  # e.g. an inactive user
        raise Http404("No such server")
    if server.owner_id is not None:
        if server.owner_id != user.pk:
            raise Http404("No such server")
    elif not Membership.objects.filter(tenant_id=server.tenant_id, user=user, role=Membership.Role.ADMIN).exists():
        raise Http404("No such server")
    AuthForm = PersonalAuthForm if server.owner_id is not None else ServerAuthForm
    before = _audited(server)
    saved = False
    if request.method == "POST":
        form = _settings_form(server, request.POST, instance=server)
        # a post without the authorization part (an older page, a script) leaves authorization as it is
        posted_auth = f"{AUTH_PREFIX}-auth_mode" in request.POST
        auth_form = AuthForm(request.POST if posted_auth else None, instance=server, prefix=AUTH_PREFIX,
                                   issuer_lookup=_lookup(server))
        # likewise a post without the protocol part leaves the protocol as it is
        posted_protocol = f"{PROTOCOL_PREFIX}-protocol" in request.POST
        protocol_form = ServerProtocolForm(request.POST if posted_protocol else None, instance=server,
                                           prefix=PROTOCOL_PREFIX)
        posted_apps = f"{APPS_PREFIX}-shown" in request.POST
        apps_form = ServerAppsForm(request.POST if posted_apps else None, instance=server, prefix=APPS_PREFIX)
        valid = form.is_valid()
        auth_valid = not posted_auth or auth_form.is_valid()  # all checked: every error shown at once
        protocol_valid = not posted_protocol or protocol_form.is_valid()
        apps_valid = not posted_apps or apps_form.is_valid()
        if valid and auth_valid and protocol_valid and apps_valid:
            with transaction.atomic():
                form.save()
                if posted_auth:
                    auth_form.instance = server
                    auth_form.save()
                if posted_protocol:
                    protocol_form.instance = server
                    protocol_form.save()
                if posted_apps:
                    apps_form.instance = server
                    apps_form.save()
                _audit(server, user.pk, before, auth_form.new_secret if posted_auth else None)
            logger.info("server %s: settings changed by user %s", server.pk, user.pk)
            saved = True
            server.refresh_from_db()
            form = _settings_form(server, instance=server)
            auth_form = AuthForm(instance=server, prefix=AUTH_PREFIX)
            protocol_form = ServerProtocolForm(instance=server, prefix=PROTOCOL_PREFIX)
            apps_form = ServerAppsForm(instance=server, prefix=APPS_PREFIX)
        else:
            logger.info("server %s: settings refused (%s)", server.pk,
                        _error_codes(form, *([auth_form] if posted_auth else []),
                                     *([protocol_form] if posted_protocol else []),
                                     *([apps_form] if posted_apps else [])))
    elif request.method == "GET":
        form = _settings_form(server, instance=server)
        auth_form = AuthForm(instance=server, prefix=AUTH_PREFIX)
        protocol_form = ServerProtocolForm(instance=server, prefix=PROTOCOL_PREFIX)
        apps_form = ServerAppsForm(instance=server, prefix=APPS_PREFIX)
    else:
        return HttpResponseNotAllowed(["GET", "POST"])
    from .. import conf
    from ..authz.views import redirect_uri

    return TemplateResponse(request, "mrtrweb/server_settings.html",
                            {"server": server, "form": form, "auth_form": auth_form, "saved": saved,
                             "protocol_form": protocol_form, "apps_form": apps_form,
                             "apps_pending": server.app_approvals.filter(status="pending").count(),
                             "redirect_uri": redirect_uri(request),
                             "client_metadata_url": conf.get("OAUTH_CLIENT_METADATA_URL") or ""},
                            status=400 if request.method == "POST" and not saved else 200)


@login_required
async def server_settings(request: HttpRequest, server_id: int) -> HttpResponse:
    """A tenant admin's settings of one server (see module doc). Others get 404."""
    user = await request.auser()
    response = await sync_to_async(_server_settings_sync)(request, user, server_id)
    return response
