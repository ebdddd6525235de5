"""Shape checks of values a server or a person sends, beside the contract's rows: how deep a value
nests, whether two origins are the same, whether a sampling or roots answer is well formed (also
used by the Django edge before it passes such an answer to the gate).
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from . import formats


#: nesting an input request or an answer may have: far beyond any legal one, and well within the
#: interpreter's recursion limit (copying, digesting and storing them recurse)
_MAX_DEPTH = 200


def within_depth(value: Any, limit: int = _MAX_DEPTH) -> bool:
    """Whether ``value`` nests objects/arrays at most ``limit`` deep (checked without recursion)."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:  # breadth first, one nesting level at a time; only objects and arrays nest
        depth += 1
        if depth > limit:
            return False
        below: list[Any] = []
        for node in level:
            below.extend([c for c in (node.values() if isinstance(node, dict) else node)
                          if isinstance(c, _CONTAINERS)])
        level = below
    return True


_CONTAINERS = (dict, list)


_DEFAULT_PORTS = {"https": 443, "wss": 443, "http": 80, "ws": 80}


def _origin_triple(origin: Any) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin ``scheme://host[:port]`` (RFC 6454: scheme and host
    compared case-insensitively, the default port made explicit); ``None`` if it is not one."""
    if not isinstance(origin, str) or any(c <= " " or c in "?#@\\" for c in origin):
        return None
    try:
        parts = urllib.parse.urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not parts.hostname or parts.path or not origin[len(parts.scheme):].startswith("://"):
        return None
    port = _DEFAULT_PORTS.get(scheme) if port is None else port
    host = parts.hostname.lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")  # an IDN and its punycode are one origin
        except UnicodeError:
            return None
    return None if port is None else (scheme, host, port)


def _same_origin(received: Any, bound: str) -> bool:
    """Whether a result came from the bound origin: the same string, or the same origin triple."""
    if isinstance(received, str) and received == bound:
        return True
    triple = _origin_triple(received)
    return triple is not None and triple == _origin_triple(bound)


def valid_create_message_result(value: Any) -> bool:
    """``CreateMessageResult``: ``role``, ``content`` (text/image/audio/tool_use/tool_result block, or a list),
    ``model`` string, optional ``stopReason`` string."""
    if not isinstance(value, dict):
        return False
    if value.get("role") not in ("assistant", "user") or not isinstance(value.get("model"), str):
        return False
    if "stopReason" in value and not isinstance(value["stopReason"], str):
        return False
    content = value.get("content")
    blocks = content if isinstance(content, list) else [content]
    if not blocks:
        return False
    for block in blocks:
        if not isinstance(block, dict):
            return False
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                return False
        elif kind in ("image", "audio"):
            if not isinstance(block.get("data"), str) or not isinstance(block.get("mimeType"), str):
                return False
        elif kind == "tool_use":  # SamplingMessageContentBlock of 2026-07-28 (sampling with tools)
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) or \
                    not isinstance(block.get("input"), dict):
                return False
        elif kind == "tool_result":
            inner = block.get("content")
            if not isinstance(block.get("toolUseId"), str) or not isinstance(inner, list) or \
                    not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in inner) or \
                    ("isError" in block and not isinstance(block["isError"], bool)):
                return False
        else:
            return False
    return True


def _is_file_uri(uri: Any) -> bool:
    """A valid RFC 3986 ``file:`` URI (scheme case-insensitive) that names a path."""
    if not isinstance(uri, str) or not uri[:7].lower() == "file://" or not formats.is_uri(uri):
        return False
    return urllib.parse.urlsplit(uri).path not in ("", "/") or uri[7:].startswith("/")


def valid_list_roots_result(value: Any) -> bool:
    """``ListRootsResult``: ``roots`` a list of ``{uri: "file://...", name?: str}``."""
    if not isinstance(value, dict) or not isinstance(value.get("roots"), list):
        return False
    for root in value["roots"]:
        if not isinstance(root, dict) or not _is_file_uri(root.get("uri")):
            return False
        if "name" in root and not isinstance(root["name"], str):
            return False
    return True
