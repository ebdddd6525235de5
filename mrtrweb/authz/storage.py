"""The Django storage of :mod:`mrtrweb.mcp.auth`: :class:`DjangoTokenStorage` over
:class:`~mrtrweb.authz.models.OAuthConnection` and :class:`~mrtrweb.authz.models.OAuthClientRegistration`.

It implements :class:`mrtrweb.mcp.auth.AuthStorage` for one ``(tenant, user, server)``:

* tokens: ``OAuthConnection.tokens_sealed`` (the SDK ``OAuthToken`` as sealed JSON), the absolute
  expiry in ``expires_at``; ``get_tokens`` recomputes ``expires_in`` as the seconds left. A token no
  configured key opens counts as absent (the person connects again).
* client info: the server's ``OAuthClientRegistration`` (sealed ``OAuthClientInformationFull``) of
  the person's connection's issuer (the newest one before a connection exists);
  ``set_client_info`` keeps one per ``(server, issuer)`` (SEP-2352: another authorization server means
  another registration). An admin's pre-registered client comes first; its secret only for a
  connection of the issuer the admin configured.
* server metadata: ``OAuthConnection.oauth_metadata`` (``{"metadata", "prm", "protocol_version"}``,
  plus ``challenged_scope`` noted by :func:`mrtrweb.authz.service.note_challenge`).
* ``refresh_locked``: in a transaction, the connection row ``select_for_update`` (PostgreSQL: a row
  lock every worker honours), the tokens re-read **after** the lock; the refresh runs only if they
  still need it, so two workers refreshing one connection spend a rotating refresh token once. The
  transaction runs in its own thread (and, within one process, under an ``asyncio.Lock`` per
  connection as well: SQLite has no row locks) (``thread_sensitive=False``: the refresh's HTTP request must not
  hold the process's shared sync thread), the refresh itself back on the event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import close_old_connections, connections, transaction
from django.utils import timezone
from mcp.client.auth.utils import issuers_match
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

from ..mcp.auth.flow import preregistered_auth_method
from ..mcp.auth.storage import RefreshFn
from .crypto import SecretUnreadable, seal, unseal
from .models import OAuthClientRegistration, OAuthConnection

__all__ = ["DjangoTokenStorage", "token_fields"]

#: the longest access-token lifetime kept (seconds; ten years): an authorization server's larger
#: ``expires_in`` (10**30...) would overflow the datetime of ``expires_at``
MAX_LIFETIME_S = 10 * 366 * 24 * 3600

#: one refresh at a time per connection within a process too (SQLite has no row locks)
_process_locks: dict[tuple[Any, ...], asyncio.Lock] = {}


def _token_of(row: OAuthConnection, server_url: str | None = None) -> OAuthToken | None:
    """The row's tokens (``expires_in`` recomputed), or None: none, unreadable, or issued for
    another MCP server URL than ``server_url`` (the server was re-pointed since the person
    connected: the tokens must not follow it; rows from before ``server_url`` was recorded pass)."""
    bound = row.oauth_metadata.get("server_url") if isinstance(row.oauth_metadata, dict) else None
    if server_url is not None and isinstance(bound, str) and bound != server_url:
        return None
    try:
        data = unseal(row.tokens_sealed)
        tokens = OAuthToken.model_validate(data) if data else None
    except (SecretUnreadable, ValidationError):
        return None
    if tokens is None:
        return None
    left = None
    if row.expires_at is not None:
        left = max(0, int((row.expires_at - timezone.now()).total_seconds()))
    return tokens.model_copy(update={"expires_in": left})


def token_fields(tokens: OAuthToken) -> dict[str, Any]:
    """The ``OAuthConnection`` fields that hold ``tokens``: sealed JSON, ``expires_at`` (the
    lifetime capped at :data:`MAX_LIFETIME_S`), ``scope``."""
    expires_at = None
    if tokens.expires_in is not None:
        expires_at = timezone.now() + dt.timedelta(seconds=max(0, min(int(tokens.expires_in), MAX_LIFETIME_S)))
    return {"tokens_sealed": seal(tokens.model_dump(mode="json", exclude_none=True)), "expires_at": expires_at,
            "scope": (tokens.scope or "")[:2000]}


class DjangoTokenStorage:
    """:class:`mrtrweb.mcp.auth.AuthStorage` for one person, tenant and server (see module doc).

    ``cimd_url``: this deployment's CIMD URL (a client id equal to it is recorded as ``cimd``).
    ``preregistered``: the client an admin entered on the server (returned by ``get_client_info``
    before any stored registration; never stored)."""

    def __init__(self, *, tenant: Any, user: Any, server: Any, cimd_url: str | None = None,
                 preregistered: OAuthClientInformationFull | None = None) -> None:
        self.preregistered = preregistered
        self.tenant_id = tenant.pk if hasattr(tenant, "pk") else tenant
        self.user_id = user.pk if hasattr(user, "pk") else user
        self.server_id = server.pk if hasattr(server, "pk") else server
        #: the server's URL now: tokens issued for another one are treated as absent
        self.server_url: str | None = getattr(server, "url", None)
        self.cimd_url = cimd_url

    def _rows(self):
        return OAuthConnection.objects.filter(tenant_id=self.tenant_id, user_id=self.user_id, server_id=self.server_id)

    # -- tokens ---------------------------------------------------------------------------

    def _get_tokens(self) -> OAuthToken | None:
        row = self._rows().first()
        return _token_of(row, self.server_url) if row is not None else None

    async def get_tokens(self) -> OAuthToken | None:
        return await sync_to_async(self._get_tokens)()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        fields = token_fields(tokens)
        await sync_to_async(self._rows().update)(**fields, refreshed_at=timezone.now())

    # -- client registration --------------------------------------------------------------------

    def _registration(self) -> OAuthClientRegistration | None:
        """The registration to present: with a connection, the one of **its** issuer (SEP-2352: a
        refresh or revocation at the connection's authorization server must never present another
        authorization server's client id and secret), else one bound to no issuer or the portable
        CIMD one, else none; without a connection, the newest (the SDK's flow re-registers when it
        belongs to another issuer)."""
        rows = list(OAuthClientRegistration.objects.filter(server_id=self.server_id).order_by("-created_at", "-pk")
                    .only("issuer", "client_id", "client_info_sealed"))
        conn = self._rows().only("issuer").first()
        if conn is None or not conn.issuer:
            return rows[0] if rows else None
        for row in rows:
            if row.issuer and issuers_match(row.issuer, conn.issuer):
                return row
        for row in rows:
            if not row.issuer or (self.cimd_url and row.client_id == self.cimd_url):
                return row
        return None

    def _get_client_info(self) -> OAuthClientInformationFull | None:
        row = self._registration()
        if row is None:
            return None
        try:
            data = unseal(row.client_info_sealed)
            return OAuthClientInformationFull.model_validate(data) if data else None
        except (SecretUnreadable, ValidationError):
            return None

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The client to present for this person's connection (refresh, revocation): the
        pre-registered one, with the authentication the stored metadata supports, else the stored
        registration of the connection's issuer. A pre-registered client **secret** is presented
        only when the connection's issuer is the one the admin configured for it
        (``preregistered.issuer``; RFC 8414 section 3.3 comparison): none configured, or another
        authorization server, gives ``None`` (no refresh, no revocation: the secret stays home)."""
        if self.preregistered is not None:
            pre = self.preregistered
            if pre.client_secret:
                row = await self._rows().only("issuer").afirst()
                if not (pre.issuer and row is not None and row.issuer and issuers_match(row.issuer, pre.issuer)):
                    return None
            stored = await self.get_server_metadata() or {}
            return preregistered_auth_method(pre, stored.get("metadata"))
        return await sync_to_async(self._get_client_info)()

    def _set_client_info(self, info: OAuthClientInformationFull) -> None:
        how = OAuthClientRegistration.How.CIMD if self.cimd_url and info.client_id == self.cimd_url \
            else OAuthClientRegistration.How.DCR
        OAuthClientRegistration.objects.update_or_create(
            server_id=self.server_id, issuer=(info.issuer or "")[:500],
            defaults={"how": how, "client_id": (info.client_id or "")[:500], "created_at": timezone.now(),
                      "client_info_sealed": seal(info.model_dump(mode="json", exclude_none=True))})

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await sync_to_async(self._set_client_info)(client_info)

    # -- server metadata ------------------------------------------------------------------------

    async def get_server_metadata(self) -> dict[str, Any] | None:
        row = await self._rows().only("oauth_metadata").afirst()
        return dict(row.oauth_metadata) if row is not None and isinstance(row.oauth_metadata, dict) else None

    async def set_server_metadata(self, data: dict[str, Any]) -> None:
        await self._rows().aupdate(oauth_metadata=data)

    # -- locked refresh -------------------------------------------------------------------------

    def _refresh_locked(self, margin_s: float, refresh: RefreshFn) -> OAuthToken | None:
        close_old_connections()
        try:
            with transaction.atomic():
                row = self._rows().select_for_update().first()
                if row is None:
                    return None
                tokens = _token_of(row, self.server_url)
                if tokens is None or tokens.expires_in is None or tokens.expires_in > margin_s \
                        or not tokens.refresh_token:
                    return tokens
                fresh = async_to_sync(refresh)(tokens)
                if fresh is None:
                    return tokens
                for name, value in token_fields(fresh).items():
                    setattr(row, name, value)
                row.refreshed_at = timezone.now()
                row.save(update_fields=["tokens_sealed", "expires_at", "scope", "refreshed_at"])
                return _token_of(row, self.server_url)
        finally:
            connections.close_all()  # this pool thread's own connections only (they are per thread)

    async def refresh_locked(self, margin_s: float, refresh: RefreshFn) -> OAuthToken | None:
        """See module doc; ``None`` when the person has no connection."""
        row = await self._rows().only("expires_at", "tokens_sealed", "oauth_metadata").afirst()
        if row is None:
            return None
        if row.expires_at is None or (row.expires_at - timezone.now()).total_seconds() > margin_s:
            return _token_of(row, self.server_url)  # no lock needed: nothing to refresh
        key = (id(asyncio.get_running_loop()), self.tenant_id, self.user_id, self.server_id)
        lock = _process_locks.setdefault(key, asyncio.Lock())
        async with lock:
            return await sync_to_async(self._refresh_locked, thread_sensitive=False)(margin_s, refresh)
