"""The protocol version spoken to a server (``McpServer.protocol``, issue 15): automatic or one
version pinned, and the check that a server answering another version is refused.

Spec: 2025-11-25 "Lifecycle" (version negotiation in ``initialize``) and 2026-07-28
``server/discover`` (``supportedVersions``). Used by :class:`~mrtrweb.mcp.connection.McpConnection`.
"""

from __future__ import annotations

from typing import Any, Final

import mcp_types as types
from mcp.shared.exceptions import MCPError

from .errors import TRANSPORT_ERROR, McpCallError
from .texts import gettext_noop

__all__ = ["PINNED_VERSION", "PROTOCOLS", "SDK_MODE", "ProtocolMismatch", "ProtocolRefused", "settle_protocol"]

#: what the person reads when the server does not speak the version it is pinned to (stored in
#: English; a page translates it, mrtrweb.text.stored_text)
PINNED_VERSION: Final = gettext_noop(
    "This server does not speak protocol version %(pinned)s, the version it is set to. A tenant admin can "
    "change that in the server's settings.")

#: what ``McpConnection(protocol=...)`` takes (``McpServer.protocol``): "auto" (``server/discover``
#: at 2026-07-28, else the ``initialize`` handshake), "2026-07-28" only (``server/discover`` at that
#: version; a server that does not answer it is refused), "2025-11-25" only (the ``initialize``
#: handshake offering exactly that version; a server answering another version is refused)
PROTOCOLS: Final = ("auto", "2026-07-28", "2025-11-25")
#: the SDK's ``Client(mode=...)`` per protocol (a pinned 2026-07-28 is probed by :func:`settle_protocol`)
SDK_MODE: Final = {"auto": "auto", "2026-07-28": "2026-07-28", "2025-11-25": "legacy"}


class ProtocolRefused(Exception):
    """The server does not speak the pinned protocol version (the message says what it answered)."""


class ProtocolMismatch(McpCallError):
    """``transport_error`` from :meth:`McpConnection.open`: the server does not speak the protocol
    version it is set to. ``message`` says what it answered (bounded; may hold server text: escape
    it); ``shown_message`` is the product's own text for the page, without server text."""

    def __init__(self, message: str, pinned: str) -> None:
        super().__init__(TRANSPORT_ERROR, message)
        self.shown_message = PINNED_VERSION % {"pinned": pinned}


def _version_text(value: Any, limit: int = 40) -> str:
    """A server's version string (or error text) for a message: its ``repr``, at most ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def settle_protocol(session: Any, protocol: str, origin: str) -> None:
    """Hold a pinned ``protocol`` to what the server at ``origin`` answered, on the SDK's entered
    ``ClientSession``; nothing for ``"auto"``.

    * ``"2025-11-25"``: the SDK's ``mode="legacy"`` offered that version in ``initialize``
      (``LATEST_HANDSHAKE_VERSION``, pinned by a test); the server's answer must be it too.
    * ``"2026-07-28"``: the SDK's version pin only assumes it (no wire traffic), so one
      ``server/discover`` at that version is sent here; the server must list it, and its
      capabilities are adopted from the answer.

    Raises:
        ProtocolRefused: the server answered another version, or refused the probe.
    """
    if protocol == "2025-11-25":
        answered = session.protocol_version
        if answered != "2025-11-25":
            raise ProtocolRefused(f"{origin} answered protocol version {_version_text(answered)} to an "
                                  "initialize offering 2025-11-25, the version this server is set to")
    elif protocol == "2026-07-28":
        try:
            raw = await session.send_discover("2026-07-28")
            result = types.DiscoverResult.model_validate(raw)
        except MCPError as exc:
            raise ProtocolRefused(f"{origin} does not speak 2026-07-28, the version this server is set "
                                  f"to (server/discover: {_version_text(exc.error.message, 200)})") from None
        except ValueError:  # pydantic's ValidationError is a ValueError
            raise ProtocolRefused(f"{origin} answered server/discover with a malformed result") from None
        if "2026-07-28" not in result.supported_versions:
            versions = ", ".join(_version_text(v) for v in result.supported_versions[:5])
            raise ProtocolRefused(f"{origin} supports {versions or 'no version'}, not 2026-07-28, the "
                                  "version this server is set to")
        session.adopt(result)
