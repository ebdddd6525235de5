"""A server's identity as the server page shows it: ``serverInfo`` (``name``, ``title``,
``version``, ``websiteUrl`` -- shown as text, never a link --, ``icons``), its ``instructions``
and the capabilities it declared (``initialize`` / ``server/discover``)."""

from __future__ import annotations

from typing import Any

from .icons import icon_src

#: the most characters of the server's instructions shown
INSTRUCTIONS_CHARS = 4000
#: the most characters of a name, title, version or website shown
FIELD_CHARS = 200
#: the most capabilities listed
MAX_CAPABILITIES = 40


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value.strip() else None


def capability_names(capabilities: Any) -> list[str]:
    """``{"tools": {"listChanged": true}, "resources": {"subscribe": true}, ...}`` ->
    ``["resources (subscribe)", "tools (listChanged)", ...]``: sorted, each with its true flags."""
    if not isinstance(capabilities, dict):
        return []
    out = []
    for key in sorted(k for k in capabilities if isinstance(k, str))[:MAX_CAPABILITIES]:
        value = capabilities[key]
        flags = sorted(k for k, v in value.items() if v is True and isinstance(k, str))[:8] \
            if isinstance(value, dict) else []
        out.append(f"{key[:60]} ({', '.join(f[:40] for f in flags)})" if flags else key[:60])
    return out


def server_identity(server_info: Any, instructions: Any, capabilities: Any) -> dict[str, Any]:
    """``{"name", "title", "version", "website", "icon", "instructions", "capabilities"}`` (each
    ``None`` or empty when the server gave nothing usable), bounded."""
    info = server_info if isinstance(server_info, dict) else {}
    return {"name": _text(info.get("name"), FIELD_CHARS), "title": _text(info.get("title"), FIELD_CHARS),
            "version": _text(info.get("version"), FIELD_CHARS), "website": _text(info.get("websiteUrl"), FIELD_CHARS),
            "icon": icon_src(info.get("icons")),
            "instructions": _text(instructions, INSTRUCTIONS_CHARS),
            "capabilities": capability_names(capabilities)}
