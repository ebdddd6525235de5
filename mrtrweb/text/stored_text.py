"""The product's messages that are stored in English and translated when a page shows them.

An operation's outcome text (``Operation.error_message``) is written once, by a worker that serves
no particular person, and read later by pages, the headless client and the admin: it is stored in
English, the product's stable wording (the headless client and logs read it as is). A page shows it
in the person's language with :func:`translated` (the ``|translated`` template filter): the whole
text when it is one of the marked messages (``gettext_noop`` where it is defined, so
``makemessages`` finds it), else one of the :data:`COMPOSITES` below, filled in English where the
message is made and matched back here, its parts translated (server text inside stays as the
server wrote it). Text that matches nothing (server text, an unknown message) is shown unchanged.

Error codes, audit values and anything sent to an MCP server are never translated.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Final

from django.utils.translation import get_language, gettext, gettext_noop

from ..mcp.protocol import PINNED_VERSION

#: a failure message followed by what the server said (:func:`mrtrweb.operations.failure_message`)
JSONRPC_SAID: Final = gettext_noop("%(message)s It said (JSON-RPC error %(code)s): %(said)s")
JSONRPC_SAID_NO_CODE: Final = gettext_noop("%(message)s It said (JSON-RPC error): %(said)s")
CHALLENGE_SAID: Final = gettext_noop("%(message)s It said: %(said)s")
#: a refusal of the gate followed by its reason (the gate's own English reason, a diagnostic)
WITH_REASON: Final = gettext_noop("%(message)s Reason: %(reason)s.")
#: a refusal of the gate with no message of its own (:func:`mrtrweb.operations.message_for`)
GATE_REFUSED: Final = gettext_noop("The server's request was refused by the gate (%(code)s).")
#: a legacy (2025-11-25) round held open until its deadline passed
LEGACY_TIMEOUT: Final = gettext_noop(
    "The server held its call open for your answer until %(clock)s; no answer came in time, so the server "
    "was told cancel. Nothing else was sent.")
#: a server pinned to a protocol version it does not speak (:class:`mrtrweb.mcp.protocol.ProtocolMismatch`)
# (:data:`mrtrweb.mcp.protocol.PINNED_VERSION`, defined there: that package stays free of Django)
#: a task the server ended as failed (:mod:`mrtrweb.operations.tasks`)
TASK_FAILED_RPC: Final = gettext_noop("The server's task failed (JSON-RPC %(code)s).")

#: the filled-in forms matched back by :func:`translated`, the ones wrapping another message first
COMPOSITES: Final = (JSONRPC_SAID, JSONRPC_SAID_NO_CODE, CHALLENGE_SAID, WITH_REASON, GATE_REFUSED,
                     LEGACY_TIMEOUT, PINNED_VERSION, TASK_FAILED_RPC)

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@lru_cache(maxsize=None)
def _pattern(template: str) -> re.Pattern[str]:
    """The regular expression that matches ``template`` filled in: each ``%(name)s`` a group."""
    parts, last = [], 0
    for m in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[last:m.start()]))
        parts.append(f"(?P<{m.group(1)}>.+?)")
        last = m.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts), re.DOTALL)


def _whole(text: str) -> str | None:
    """``text`` translated when it is one marked message, else None."""
    shown = gettext(text)
    return shown if shown != text else None


def translated(text: Any) -> Any:
    """A stored English message in the active language (see the module docstring); a non-string,
    an English page, or text that is none of the product's messages is returned as it is."""
    if not isinstance(text, str) or not text or (get_language() or "en").split("-")[0] == "en":
        return text
    whole = _whole(text)
    if whole is not None:
        return whole
    for template in COMPOSITES:
        m = _pattern(template).fullmatch(text)
        if m is None:
            continue
        parts = m.groupdict()
        if "message" in parts:
            inner = _whole(parts["message"])
            if inner is None:  # not our message: perhaps the server's text holds the same words
                continue
            parts["message"] = inner
        return gettext(template) % parts
    return text
