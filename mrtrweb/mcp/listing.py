"""Listing pages (``tools/list``, ``prompts/list``, ...) checked item by item, off the event loop;
the tools listing filtered and remembered for ``Mcp-Param-*`` headers (:mod:`.param_headers`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any, Final

import anyio
import mcp_types as types
from pydantic import ValidationError

from .errors import INVALID_RESULT, SESSION_LOST, TIMEOUT, TRANSPORT_ERROR, McpCallError
from .param_headers import ToolHeaders, _logged_name, is_modern

logger = logging.getLogger("mrtrweb.mcp")

LIST_PAGE_CAP: Final = 100  # a paginator that never ends cannot hang a listing
#: a listing (all its pages) of more items than this is refused as ``invalid_result``
MAX_LISTED_ITEMS: Final = 50_000


class ListingRefused(Exception):
    """A listing page that is not a listing (or holds too many items); the message names why."""


def check_page(raw: Any, field: str, model: Any, room: int) -> tuple[list[dict[str, Any]], str | None]:
    """One raw listing page: its items (each validated by ``model``, as JSON dicts) and its next cursor.

    Runs in a worker thread: item by item, so the event loop gets its turn between items.
    ``room``: how many more items the listing may hold."""
    listed = raw.get(field) if isinstance(raw, dict) else None
    if not isinstance(listed, list):
        raise ListingRefused(f"malformed result (no {field} list)")
    if len(listed) > room:
        raise ListingRefused(f"the server lists more than {MAX_LISTED_ITEMS} items")
    cursor = raw.get("nextCursor")
    if cursor is not None and not isinstance(cursor, str):
        raise ListingRefused("malformed result (nextCursor is not a string)")
    items: list[dict[str, Any]] = []
    errors = 0
    for item in listed:
        try:
            items.append(model.model_validate(item).model_dump(by_alias=True, mode="json", exclude_none=True))
        except ValidationError as exc:
            errors += exc.error_count()
    if errors:
        raise ListingRefused(f"malformed result ({errors} errors)")
    return items, cursor or None


class Listings:
    """The listing half of :class:`~mrtrweb.mcp.connection.McpConnection` (a mixin: it uses the
    connection's ``send``, ``_live_client``, ``timeout_s`` and ``protocol_version``, and sets
    ``_tool_headers`` / ``_prelisting`` in its ``__init__``)."""

    timeout_s: float
    protocol_version: str | None
    _tool_headers: ToolHeaders
    _prelisting: asyncio.Lock
    _session_is_lost: bool

    async def _listing(self, method: str, field: str, model: Any) -> list[dict[str, Any]]:
        """Walk a paginated listing; return its items as JSON dicts, each checked against ``model``.

        Each page comes back raw (:meth:`send`: no validation on the event loop) and is checked
        item by item in a worker thread (:func:`check_page`): a listing of many thousands of
        items never holds the event loop for the whole check. At most :data:`MAX_LISTED_ITEMS`
        items in all are accepted; a longer listing is ``invalid_result``.

        A 2025-11-25 server that no longer knows the session (``session_lost``: restarted), or
        whose session's connection broke without any HTTP response, is listed once more, from the
        first page, on a new session (:mod:`.session_renewal`); a second failure is raised."""
        try:
            return await self._walk(method, field, model)
        except McpCallError as exc:
            if exc.code != SESSION_LOST and not (exc.code == TRANSPORT_ERROR and self._session_is_lost):
                raise
            logger.info("%s: %s; listed again on a new session", method,
                        "the server no longer knows the session" if exc.code == SESSION_LOST else
                        "the session's connection broke without a response")
        return await self._walk(method, field, model)

    async def _walk(self, method: str, field: str, model: Any) -> list[dict[str, Any]]:
        """One walk of a listing's pages (see :meth:`_listing`)."""
        await self._renew_if_lost()  # type: ignore[attr-defined]  # (waits for one in progress)
        self._live_client()
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(self.timeout_s):
                for _ in range(LIST_PAGE_CAP):
                    raw = await self.send(method, {"cursor": cursor} if cursor else {},
                                          f"mrtrweb-list-{uuid.uuid4()}", timeout_s=self.timeout_s)
                    page, cursor = await asyncio.to_thread(check_page, raw, field, model,
                                                           MAX_LISTED_ITEMS - len(items))
                    items.extend(page)
                    if not cursor:
                        break
        except TimeoutError:
            raise McpCallError(TIMEOUT, f"{method}: no response within {self.timeout_s:g}s") from None
        except ListingRefused as exc:
            raise McpCallError(INVALID_RESULT, f"{method}: {exc}") from None
        return items

    async def list_tools(self) -> list[dict[str, Any]]:
        """All tools as raw dicts (``name``, ``description``, ``inputSchema``, ...), all pages.

        On a 2026-07-28 connection, tools whose ``inputSchema`` has an invalid ``x-mcp-header``
        annotation are left out (SEP-2243: clients MUST exclude them; logged by name), and the
        listing becomes the connection's ``Mcp-Param-*`` header map (:mod:`.param_headers`).

        Raises:
            McpCallError: ``transport_error``, ``jsonrpc_error``, ``timeout`` or ``invalid_result``.
        """
        generation, hearing = getattr(self, "session_generation", 0), self._hears_tool_changes()
        tools = await self._listing("tools/list", "tools", types.Tool)
        tools = self._tool_headers.absorb(tools) if is_modern(self.protocol_version) else tools
        # kept for tools_known() only when a change was heard from before the listing on (see there)
        self._tools_kept = (generation, tools) if hearing is not None and hearing is self._hears_tool_changes() \
            else None
        return tools

    async def tools_known(self, *, listen: bool = False) -> list[dict[str, Any]]:
        """The tools listing this connection last made (:meth:`list_tools`), else a new one.

        A listing is kept only when a change of the tools would have been heard from before it
        was asked for until now: the server declares ``tools.listChanged``, and on a 2026-07-28
        connection its ``subscriptions/listen`` stream was acknowledged before the listing and is
        still open (:meth:`~mrtrweb.mcp.list_changed.ListingWatch.watch_listings`; ``listen``:
        open it here -- a long-lived request on the connection, so a pool never releases it as
        idle while a round waits: for callers that answer at once, the headless client; a
        2025-11-25 session's notifications come on the session). A
        ``notifications/tools/list_changed`` drops it at once
        (:meth:`~mrtrweb.mcp.list_changed.ListingWatch._changed`), so do the listen stream's end
        and a new session (a kept listing belongs to the session it was made on). The caller gets
        the connection's own list: it must not change it.

        Raises:
            McpCallError: as :meth:`list_tools`.
        """
        watch = getattr(self, "watch_listings", None)
        if listen and watch is not None:
            watch()  # opened once; acknowledged later
        kept = self.tools_kept()
        return kept if kept is not None else await self.list_tools()

    def tools_kept(self) -> list[dict[str, Any]] | None:
        """The tools listing :meth:`tools_known` would return now without a request (sync: no
        wait, nothing sent), or None when it would list again. The caller must not change it."""
        kept = getattr(self, "_tools_kept", None)
        if kept is not None and kept[0] == getattr(self, "session_generation", 0) and \
                self._hears_tool_changes() is not None:
            return kept[1]
        return None

    def forget_tools(self) -> None:
        """Drop the kept tools listing (the server said it changed, or it could no longer say so)."""
        self._tools_kept = None

    def _hears_tool_changes(self) -> object | None:
        """A token of the way a change of the server's tools reaches this connection now (the same
        token while it is the same way), or None when it would not (see :meth:`tools_known`)."""
        caps = getattr(self, "server_capabilities", None) or {}
        if not (isinstance(caps.get("tools"), dict) and caps["tools"].get("listChanged") is True):
            return None
        if not is_modern(self.protocol_version):
            return self if self.protocol_version is not None else None  # the session's own stream
        return getattr(self, "_listening", None)  # a listen stream someone opened, acknowledged

    async def _param_headers(self, method: str, params: Mapping[str, Any]) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers of one request: for a ``tools/call`` on a 2026-07-28
        connection, mirrored from its ``arguments`` by the connection's latest tools listing;
        before the first call of a tool name this connection has not seen listed, it lists once
        (a failed listing is logged, and the call goes without them). ``{}`` otherwise.

        Raises:
            InvalidToolHeaders: the listing excluded the tool (nothing is sent).
        """
        name = params.get("name")
        if method != "tools/call" or not isinstance(name, str) or not is_modern(self.protocol_version):
            return {}
        async with self._prelisting:  # concurrent first calls of one tool list once
            if self._tool_headers.needs_listing(name):
                try:
                    await self.list_tools()
                except McpCallError as exc:
                    logger.info("tools/list before the first call of %s failed (%s): no Mcp-Param headers",
                                _logged_name(name), exc.code)
        return self._tool_headers.headers_for(name, params.get("arguments"))

    async def list_prompts(self) -> list[dict[str, Any]]:
        """All prompts as raw dicts (``name``, ``description``, ``arguments``, ...), all pages.

        Raises:
            McpCallError: as :meth:`list_tools`.
        """
        return await self._listing("prompts/list", "prompts", types.Prompt)

    async def list_resources(self) -> list[dict[str, Any]]:
        """All resources as raw dicts (``uri``, ``name``, ...), all pages.

        Raises:
            McpCallError: as :meth:`list_tools`.
        """
        return await self._listing("resources/list", "resources", types.Resource)

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        """All resource templates as raw dicts (``uriTemplate``, ``name``, ...), all pages.

        Raises:
            McpCallError: as :meth:`list_tools`.
        """
        return await self._listing("resources/templates/list", "resourceTemplates", types.ResourceTemplate)

