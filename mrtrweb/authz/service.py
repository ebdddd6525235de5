"""The authorization operations the browser views and ``mrtr_client`` share (one code path).

Shapes::

    start = await start_connect(user=u, tenant=t, server=s, session_key=k, return_to="/mcp/servers/3/",
                                redirect_uri="https://app.example/mcp/oauth/callback", scope=None)
    start.authorization_url     # where the browser goes (shown first as start.authorization_origin)
    conn = await finish_connect(user=u, session_key=k, query=request.GET)   # the callback, any worker
    conn.return_to              # the path the person started from ("" when none)
    await disconnect(user=u, tenant=t, server=s)   # RFC 7009 revocation where supported, then delete
    auth = await auth_for(server=s, user=u, tenant=t)      # httpx2.Auth | None, per the server's mode
    ident = await identity_for(server=s, user=u, tenant=t) # AuthIdentity for the MRTR binding and audit
    await note_challenge(server=s, user=u, tenant=t, scope="mcp:write")  # after insufficient_scope
    issuer = await discover_issuer(s)   # the issuer the server's metadata names, for an admin to confirm

A client secret or private key an admin entered is only ever sent to the authorization server
whose issuer the admin configured (``McpServer.oauth_issuer``): client credentials without one send
nothing (``auth_for`` raises ``authorization_failed``), a pre-registered secret for OAuth per user
without one is refused at :func:`start_connect`, and with one the flow, the refresh and the
revocation go to that issuer's authorization server only.

Errors: :class:`ConnectRefused` with a stable ``code`` (``authorization_failed``,
``outbound_refused``, ``state_invalid`` -- unknown, used, expired, or another person's / session's
state --, ``not_oauth`` -- the server's mode is not OAuth per user --, ``not_required`` -- the
server did not ask for authorization) and a ``message`` safe to show.
Nothing is stored on a refused callback; a state is spent by its first callback, whoever sends it.

``state`` is 32 random bytes (the SDK's ``secrets.token_urlsafe(32)``); only its HMAC-SHA256 under
``SECRET_KEY`` is stored (``PendingAuthorization.state_digest``), and the browser session key likewise
(``session_digest``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hmac
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop
from mcp.client.auth.utils import issuers_match
from mcp.client.auth.utils import union_scopes as union_scope

from .. import conf
from ..mcp.auth import AuthorizationFailed, MemoryStorage, PendingFlow, begin_authorization, complete_authorization
from ..mcp.auth.errors import clean_text
from ..mcp.auth.revoke import revoke_tokens
from .calltime import NO_ISSUER, CredentialsNotConfigured, auth_for, auth_key, discover_issuer
from .config import client_identity, keyed_digest, outbound_policy
from .identity import AuthIdentity, identity_for  # noqa: F401 -- re-exported (the identity lives there)
from .config import storage_for as _storage
from .crypto import SecretUnreadable, seal, unseal
from .models import OAuthConnection, PendingAuthorization
from .storage import token_fields

__all__ = ["NO_ISSUER", "NO_ISSUER_PREREGISTERED", "AuthIdentity", "ConnectRefused", "ConnectStart",
           "CredentialsNotConfigured", "auth_for", "auth_key", "client_identity", "disconnect", "discover_issuer",
           "finish_connect", "identity_for", "keyed_digest", "note_challenge", "outbound_policy", "start_connect"]

logger = logging.getLogger(__name__)


class ConnectRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class ConnectStart:
    """``issuer``: the authorization server's issuer identifier (its origin may differ from
    ``authorization_origin``: the interstitial then shows both)."""

    pending_id: int
    authorization_url: str
    authorization_origin: str
    issuer: str = ""


#: why a pre-registered client secret without a configured issuer is not used (shown to the person)
NO_ISSUER_PREREGISTERED = (gettext_noop("This server's pre-registered client secret is only sent to the authorization server "
                           "that issued it, and none is configured: a tenant admin must set the server's "
                           "“Authorization server (issuer)” in its settings."))


def _safe_return(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("//") or "\\" in path \
            or any(ord(c) < 0x21 for c in path) or len(path) > 1000:
        return ""
    return path


async def start_connect(*, user: Any, tenant: Any, server: Any, session_key: str, return_to: str,
                        redirect_uri: str, scope: str | None = None) -> ConnectStart:
    """Begin OAuth per user for ``user`` on ``server`` (MCP authorization, "Authorization Flow").

    ``scope`` (a step-up) defaults to the scope the server last challenged this person with
    (:func:`note_challenge`), unioned with what was granted. ``return_to``: a path of this site
    (anything else is dropped). The flow is sealed in a ``PendingAuthorization`` that expires after
    ``OAUTH_PENDING_TTL_S``.

    Raises:
        ConnectRefused: ``not_oauth``, ``not_required``, ``authorization_failed``, ``outbound_refused``.
    """
    if server.auth_mode != "oauth_user":
        raise ConnectRefused("not_oauth", gettext_noop("This server does not use OAuth per person."))
    if server.tenant_id != getattr(tenant, "pk", tenant):
        raise ConnectRefused("not_oauth", gettext_noop("This server belongs to another tenant."))
    if not session_key:
        raise ConnectRefused("state_invalid", gettext_noop("A browser session is needed to connect."))
    identity = client_identity(server, redirect_uri)
    if identity.client_secret and not identity.issuer:
        raise ConnectRefused("authorization_failed", NO_ISSUER_PREREGISTERED)
    storage = _storage(tenant=tenant, user=user, server=server)
    if scope is None:
        noted = (await storage.get_server_metadata() or {}).get("challenged_scope")
        scope = noted if isinstance(noted, str) and noted else None
    try:
        flow = await begin_authorization(server.url, identity=identity, storage=storage,
                                         policy=outbound_policy(server), scope=scope)
    except AuthorizationFailed as exc:
        raise ConnectRefused(exc.code, exc.message) from None
    if flow is None:
        raise ConnectRefused("not_required", gettext_noop("The server did not ask for authorization."))
    ttl = float(conf.get("OAUTH_PENDING_TTL_S"))
    pending = await PendingAuthorization.objects.acreate(
        state_digest=keyed_digest("state", flow.state), tenant_id=getattr(tenant, "pk", tenant), user_id=user.pk,
        server_id=server.pk, session_digest=keyed_digest("session", session_key),
        authorization_origin=flow.authorization_origin[:300], flow_sealed=seal(flow.to_json()),
        return_to=_safe_return(return_to), expires_at=timezone.now() + dt.timedelta(seconds=ttl))
    return ConnectStart(pending.pk, flow.authorization_url, flow.authorization_origin, flow.issuer or "")


def _query_value(query: Any, name: str) -> str | None:
    value = query.get(name) if isinstance(query, Mapping) or hasattr(query, "get") else None
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return value if isinstance(value, str) else None


def _claim(state: str, user_id: Any, session_key: str) -> PendingAuthorization:
    """Spend the pending flow of ``state`` (whoever presents it) and return it if it is this person's."""
    with transaction.atomic():
        pending = PendingAuthorization.objects.select_for_update().filter(state_digest=keyed_digest("state", state)).first()
        if pending is None or pending.used_at is not None:
            raise ConnectRefused("state_invalid", gettext_noop("This authorization is unknown or was already used."))
        pending.used_at = timezone.now()
        pending.save(update_fields=["used_at"])
    if pending.expires_at <= timezone.now():
        raise ConnectRefused("state_invalid", gettext_noop("This authorization expired; connect again."))
    if pending.user_id != user_id or not hmac.compare_digest(pending.session_digest, keyed_digest("session", session_key)):
        logger.warning("authorization callback for pending %s refused: another person or browser session", pending.pk)
        raise ConnectRefused("state_invalid", gettext_noop("This authorization was started by another person or browser session."))
    return pending


async def _check_still_connectable(pending: PendingAuthorization, flow: PendingFlow) -> None:
    """Refuse (``state_invalid``, before any code exchange) when, since the flow started, the
    server was re-pointed (another URL: the tokens would be for another resource), left OAuth per
    user, was disabled, its pre-registered secret was pinned to another issuer (or to none), or the
    person may no longer act on it (removed from the tenant...)."""
    from ..tenancy import access
    from ..models import McpServer

    server = await McpServer.objects.filter(pk=pending.server_id).only("url", "auth_mode", "enabled",
                                                                       "oauth_issuer").afirst()
    # a pre-registered secret: the code exchange presents it, so only to the issuer configured now
    secret = flow.how == "preregistered" and bool((flow.client_info or {}).get("client_secret"))
    repinned = server is not None and secret and not (
        server.oauth_issuer and flow.issuer and issuers_match(server.oauth_issuer, flow.issuer))
    if server is None or server.auth_mode != "oauth_user" or not server.enabled or server.url != flow.server_url \
            or repinned or await access.adenial(pending.user_id, pending.tenant_id, pending.server_id):
        logger.warning("authorization callback for pending %s refused: the server changed or access ended", pending.pk)
        raise ConnectRefused("state_invalid", gettext_noop("This server's settings or your access changed since you started "
                                              "connecting; connect again."))


async def finish_connect(*, user: Any, session_key: str, query: Any) -> OAuthConnection:
    """Complete the flow of the callback ``query`` (a ``QueryDict`` or any mapping of ``str``).

    The state is spent first (single use), then checked to be this person's and this browser
    session's, unexpired, its server still at the URL the flow started for, still OAuth per user,
    enabled, and the person still allowed to act on it; then :func:`mrtrweb.mcp.auth.complete_authorization` (error, ``iss``,
    code exchange with the PKCE verifier). Only then is the ``OAuthConnection`` written (a new
    ``family``: a new Connect is a new token family). Returns it, with ``return_to`` set on it.

    Raises:
        ConnectRefused: ``state_invalid``, ``authorization_failed``, ``outbound_refused``.
    """
    state = _query_value(query, "state")
    if not state or len(state) > 512:
        raise ConnectRefused("state_invalid", gettext_noop("The callback carries no usable state."))
    pending = await sync_to_async(_claim)(state, getattr(user, "pk", None), session_key or "")
    try:
        flow = PendingFlow.from_json(unseal(pending.flow_sealed))
    except (SecretUnreadable, TypeError):
        raise ConnectRefused("state_invalid", gettext_noop("This authorization can no longer be read; connect again.")) from None
    await _check_still_connectable(pending, flow)
    scratch = MemoryStorage()
    try:
        tokens = await complete_authorization(
            flow, code=_query_value(query, "code"), state=state, iss=_query_value(query, "iss"),
            error=_query_value(query, "error"), error_description=_query_value(query, "error_description"),
            storage=scratch, policy=outbound_policy())
    except AuthorizationFailed as exc:
        raise ConnectRefused(exc.code, exc.message) from None
    client_id = str(flow.client_info.get("client_id") or "")
    fields = {**token_fields(tokens), "issuer": flow.issuer[:500], "client_id": client_id[:500],
              "family": secrets.token_hex(16), "subject_digest": "", "oauth_metadata": flow.server_metadata(),
              "created_at": timezone.now(), "refreshed_at": None}
    conn, _ = await OAuthConnection.objects.aupdate_or_create(
        tenant_id=pending.tenant_id, user_id=pending.user_id, server_id=pending.server_id, defaults=fields)
    conn.return_to = pending.return_to
    return conn


async def disconnect(*, user: Any, tenant: Any, server: Any) -> str | None:
    """Revoke (RFC 7009, when the metadata has a ``revocation_endpoint``; failures only logged) and
    delete the person's connection. Takes effect on the next request of any pooled connection (the
    bearer auth reads storage per request).

    Returns:
        ``None``: there was no connection; ``"revoked"``: the authorization server accepted the
        revocation of every token (HTTP 200, RFC 7009 section 2.2); ``"deleted"``: deleted here only
        (no revocation endpoint, or the authorization server refused or could not be reached).
    """
    storage = _storage(tenant=tenant, user=user, server=server)
    row = await storage._rows().afirst()  # noqa: SLF001
    if row is None:
        return None
    tokens = await storage.get_tokens()
    meta = (row.oauth_metadata or {}).get("metadata") or {}
    info = await storage.get_client_info()
    outcome = DELETED
    if tokens is not None and meta.get("revocation_endpoint") and info is not None:
        try:
            statuses = await revoke_tokens(meta, info, tokens, policy=outbound_policy(server), mcp_origin=server.origin)
        except Exception as exc:  # noqa: BLE001 - revocation is best effort; deleting is not
            logger.info("revocation at %s failed: %s", clean_text(meta.get("issuer", ""), 100), type(exc).__name__)
        else:
            if statuses and all(status == 200 for status in statuses):
                outcome = REVOKED
            else:
                logger.info("revocation at %s answered HTTP %s", clean_text(meta.get("issuer", ""), 100),
                            ",".join(str(s) for s in statuses))
    await storage._rows().adelete()  # noqa: SLF001
    return outcome


#: the most characters of remembered step-up scope (:func:`note_challenge`)
MAX_CHALLENGED_SCOPE = 2000

#: :func:`disconnect` outcomes
REVOKED = "revoked"
DELETED = "deleted"


async def note_challenge(*, server: Any, user: Any, tenant: Any, scope: str | None) -> None:
    """Remember the scope of an ``insufficient_scope`` challenge (SEP-2350): the next
    :func:`start_connect` without ``scope`` asks for it, unioned with what was granted."""
    if not scope:
        return
    storage = _storage(tenant=tenant, user=user, server=server)
    meta = await storage.get_server_metadata()
    if meta is None:
        return
    challenged = clean_text(scope, MAX_CHALLENGED_SCOPE // 2)
    merged = union_scope(meta.get("challenged_scope"), challenged) or ""
    # bounded: a server answering each call with new scopes would grow it (and the next
    # authorization URL) for ever; past the bound only the newest challenge is kept
    meta["challenged_scope"] = merged if len(merged) <= MAX_CHALLENGED_SCOPE else challenged
    await storage.set_server_metadata(meta)


