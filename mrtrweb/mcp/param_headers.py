"""``Mcp-Param-*`` request headers mirrored from ``tools/call`` arguments (MCP 2026-07-28, SEP-2243,
"Custom Headers from Tool Parameters" in basic/transports, ``x-mcp-header`` in server/tools).

A tool's ``inputSchema`` may designate properties with ``"x-mcp-header": "<token>"``; a client then
sends each such argument as the HTTP header ``Mcp-Param-<token>`` on that tool's ``tools/call``
(bool as ``true``/``false``, integers and strings as text, values that are not plain printable
ASCII, or that have edge whitespace, as ``=?base64?...?=``, a null or absent argument omitted). A
tool whose annotations are invalid (empty or non-token name, on a non-primitive or ``number``
property, off a pure ``properties`` chain, duplicated case-insensitively) MUST be excluded by the
client. The codec is the SDK's (:mod:`mcp.shared.inbound`: ``find_invalid_x_mcp_header``,
``x_mcp_header_map``, ``mcp_param_headers``); this module only keeps, per connection, what the
connection's latest ``tools/list`` said.

Where the header map of a call comes from (never guessed from the arguments): **the latest
listing done by the connection that sends the call**. Every ``list_tools`` of the connection
(the server page, the tool page, ``mrtr_client --list/--each``) replaces the map; before the first
``tools/call`` of a tool name the connection has not seen listed, the connection lists once
(:meth:`ToolHeaders.needs_listing`). So a retry of an MRTR round sent by another worker, on its
own connection, gets its map from that connection's listing of the same server: the same tool
and arguments give the same headers as long as the server lists the same schema. Headers are
sent only on connections that negotiated a modern protocol (2026-07-28); at 2025-11-25 the
annotation means nothing and no tool is excluded for it.

Nothing here logs a header value or an argument: only a tool's name, its control and bidi
characters made visible, bounded.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

from mcp.shared.inbound import find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .errors import McpCallError
from .texts import gettext_noop

__all__ = ["INVALID_X_MCP_HEADER", "InvalidToolHeaders", "ToolHeaders", "is_modern"]

logger = logging.getLogger("mrtrweb.mcp")

#: the :class:`McpCallError` code of a ``tools/call`` refused because the tool's listed
#: ``inputSchema`` has an invalid ``x-mcp-header`` annotation (nothing is sent)
INVALID_X_MCP_HEADER: Final = "invalid_x_mcp_header"



#: what the person reads for :data:`INVALID_X_MCP_HEADER` (``McpCallError.shown_message``)
REFUSED_TEXT: Final = (gettext_noop("This tool was not called: its input schema declares an invalid x-mcp-header "
                       "(MCP 2026-07-28, SEP-2243), and clients must not use such a tool."))
_NAME_CHARS: Final = 100  # how much of a tool's name a log line carries
#: a listing names at most this many newly excluded tools in the log, one line each; one more line
#: says how many others were excluded (a server may list thousands)
LOGGED_EXCLUSIONS: Final = 20


def is_modern(protocol_version: str | None) -> bool:
    """Whether ``protocol_version`` is one where ``x-mcp-header`` applies (2026-07-28)."""
    return protocol_version in MODERN_PROTOCOL_VERSIONS


def _logged_name(name: Any) -> str:
    """A server's tool name fit for a log line: control, format (bidi, zero-width) and line
    separator characters as ``⟨U+XXXX⟩`` (as :func:`mrtrweb.text.display.shown`, without Django), cut
    to :data:`_NAME_CHARS` characters."""
    text = "".join(f"⟨U+{ord(ch):04X}⟩" if unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in
                   ("Zl", "Zp") else ch for ch in str(name)[:_NAME_CHARS])
    return text if len(str(name)) <= _NAME_CHARS else text + "…"


class InvalidToolHeaders(McpCallError):
    """:data:`INVALID_X_MCP_HEADER`: a ``tools/call`` of a tool the connection's listing excluded;
    raised before anything is sent. ``shown_message`` is the product's own text (what the
    operation page and ``mrtr_client`` show)."""

    def __init__(self) -> None:
        super().__init__(INVALID_X_MCP_HEADER, "the tool's inputSchema has an invalid x-mcp-header annotation")
        self.shown_message = REFUSED_TEXT


class ToolHeaders:
    """What one connection's latest ``tools/list`` said about ``x-mcp-header``: per tool name, the
    map ``{property path (tuple of str): header token}``, and the names excluded as invalid."""

    def __init__(self) -> None:
        self._maps: dict[str, dict[tuple[str, ...], str]] = {}
        self._invalid: set[str] = set()
        self._listed_for: set[str] = set()  # names this connection listed for before calling them

    def absorb(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A complete (all pages) modern listing: the tools kept, in order; the invalid ones are
        dropped, remembered (a call by name is refused) and logged by name the first time (at most
        :data:`LOGGED_EXCLUSIONS` names per listing, then one line with how many more).
        Replaces everything an earlier listing said."""
        maps: dict[str, dict[tuple[str, ...], str]] = {}
        invalid: set[str] = set()
        kept: list[dict[str, Any]] = []
        newly, unlogged = 0, 0
        for tool in tools:
            name = tool.get("name")
            if find_invalid_x_mcp_header(tool.get("inputSchema")) is not None:
                if isinstance(name, str) and name not in invalid:
                    invalid.add(name)
                    newly += name not in self._invalid
                    if name in self._invalid:
                        pass
                    elif newly <= LOGGED_EXCLUSIONS:
                        # the SDK's reason quotes the server's property and header names: the name only
                        logger.warning("tool '%s' excluded: its inputSchema has an invalid x-mcp-header "
                                       "annotation (SEP-2243)", _logged_name(name))
                    else:
                        unlogged += 1
                continue
            if isinstance(name, str):
                maps[name] = x_mcp_header_map(tool.get("inputSchema"))
            kept.append(tool)
        if unlogged:
            logger.warning("%d more tools excluded: their inputSchema has an invalid x-mcp-header annotation "
                           "(SEP-2243)", unlogged)
        self._maps, self._invalid = maps, invalid
        return kept

    def needs_listing(self, name: str) -> bool:
        """Whether the connection should list before calling ``name``: it has not seen it listed
        (valid or not) and has not already listed for it. Marks it as listed for."""
        if name in self._maps or name in self._invalid or name in self._listed_for:
            return False
        self._listed_for.add(name)
        return True

    def headers_for(self, name: str, arguments: Any) -> dict[str, str]:
        """``{"Mcp-Param-<token>": value}`` for a call of ``name`` with ``arguments`` (``{}`` for a
        tool the listing did not name, or arguments that are not an object).

        Raises:
            InvalidToolHeaders: the listing excluded ``name`` (code :data:`INVALID_X_MCP_HEADER`).
        """
        if name in self._invalid:
            logger.warning("tools/call '%s' refused: the tool's x-mcp-header annotation is invalid (SEP-2243)",
                           _logged_name(name))
            raise InvalidToolHeaders()
        header_map = self._maps.get(name)
        if not header_map or not isinstance(arguments, Mapping):
            return {}
        return mcp_param_headers(header_map, arguments)
