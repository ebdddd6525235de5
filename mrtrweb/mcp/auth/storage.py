"""What the auth code reads and writes: the SDK's ``TokenStorage`` plus two extensions.

:class:`AuthStorage` (a ``Protocol``) is ``mcp.client.auth.TokenStorage`` (``get_tokens``,
``set_tokens``, ``get_client_info``, ``set_client_info``) plus

``get_server_metadata()`` / ``set_server_metadata(data)``
    what a flow discovered and refresh and revocation need later, as JSON::

        {"metadata": {...RFC 8414 authorization server metadata...},
         "prm": {...RFC 9728 protected resource metadata...} | None,
         "protocol_version": "2025-11-25" | None,
         "server_url": "https://mcp.example/mcp"}   # the MCP server URL the tokens were issued for

``refresh_locked(margin_s, refresh)``
    re-read the tokens **under a lock** shared by every worker (the Django storage: the row under
    ``select_for_update``); when fewer than ``margin_s`` seconds remain, await
    ``refresh(tokens) -> OAuthToken | None`` and keep what it returns; return the tokens now
    valid (``None``: none stored). Two workers refreshing one connection therefore spend a
    rotating refresh token once.

``get_tokens`` returns the ``OAuthToken`` with ``expires_in`` **recomputed** as the seconds left
(``0`` once expired; ``None``: no expiry said): the storage keeps the absolute expiry.

:class:`MemoryStorage` implements it in memory (tests, ``begin``/``complete`` of one process).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

__all__ = ["AuthStorage", "MemoryStorage", "RefreshFn", "remaining"]

RefreshFn = Callable[[OAuthToken], Awaitable["OAuthToken | None"]]


class AuthStorage(Protocol):
    async def get_tokens(self) -> OAuthToken | None: ...
    async def set_tokens(self, tokens: OAuthToken) -> None: ...
    async def get_client_info(self) -> OAuthClientInformationFull | None: ...
    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None: ...
    async def get_server_metadata(self) -> dict[str, Any] | None: ...
    async def set_server_metadata(self, data: dict[str, Any]) -> None: ...
    async def refresh_locked(self, margin_s: float, refresh: RefreshFn) -> OAuthToken | None: ...


def remaining(tokens: OAuthToken | None) -> float | None:
    """Seconds the access token has left by its (recomputed) ``expires_in``; ``None``: unknown."""
    if tokens is None or tokens.expires_in is None:
        return None
    return float(tokens.expires_in)


class MemoryStorage:
    """:class:`AuthStorage` in memory (one process; an ``asyncio.Lock`` is the refresh lock)."""

    def __init__(self, *, tokens: OAuthToken | None = None, client_info: OAuthClientInformationFull | None = None,
                 server_metadata: dict[str, Any] | None = None) -> None:
        self._tokens: OAuthToken | None = None
        self._expires_at: float | None = None
        self.client_info = client_info
        self.server_metadata = server_metadata
        self._lock = asyncio.Lock()
        self.refreshes = 0
        if tokens is not None:
            self._put(tokens)

    def _put(self, tokens: OAuthToken) -> None:
        self._tokens = tokens.model_copy()
        self._expires_at = None if tokens.expires_in is None else time.time() + int(tokens.expires_in)

    def clear(self) -> None:
        self._tokens = None
        self._expires_at = None

    def _get(self) -> OAuthToken | None:
        if self._tokens is None:
            return None
        left = None if self._expires_at is None else max(0, int(self._expires_at - time.time()))
        return self._tokens.model_copy(update={"expires_in": left})

    async def get_tokens(self) -> OAuthToken | None:
        return self._get()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._put(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info

    async def get_server_metadata(self) -> dict[str, Any] | None:
        return self.server_metadata

    async def set_server_metadata(self, data: dict[str, Any]) -> None:
        self.server_metadata = data

    async def refresh_locked(self, margin_s: float, refresh: RefreshFn) -> OAuthToken | None:
        async with self._lock:
            tokens = self._get()
            left = remaining(tokens)
            if tokens is None or left is None or left > margin_s or not tokens.refresh_token:
                return tokens
            fresh = await refresh(tokens)
            if fresh is not None:
                self.refreshes += 1
                self._put(fresh)
            return self._get()
