"""A tool's annotations read by the MCP rules (``ToolAnnotations``, spec 2025-06-18 onwards):

* ``readOnlyHint`` (default ``false``): the tool does not change its environment;
* ``destructiveHint`` (default ``true``, meaningful only when not read-only): it may destroy or
  overwrite; so a tool is **destructive** unless it says ``readOnlyHint: true`` or
  ``destructiveHint: false`` -- a tool that says nothing counts as one;
* ``idempotentHint`` (default ``false``): calling it again with the same arguments changes nothing more;
* ``openWorldHint`` (default ``true``): it reaches entities outside the server (the web, ...).

They are the server's claims, never trusted for access or consent: they only decide the badges a
person reads and the warning on a destructive tool's call page and cards. A value that is not a
JSON boolean counts as absent (its default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _flag(annotations: dict[str, Any], key: str, default: bool) -> tuple[bool, bool]:
    """``(value, stated)``: the boolean the server gave for ``key`` or its default, and whether it gave one."""
    value = annotations.get(key)
    return (value, True) if isinstance(value, bool) else (default, False)


@dataclass(frozen=True)
class ToolHints:
    """What a tool's annotations say, defaults applied (see the module docstring)."""

    read_only: bool = False
    destructive: bool = True
    destructive_stated: bool = False  #: the server said ``destructiveHint: true`` itself
    idempotent: bool = False
    open_world: bool = True
    open_world_stated: bool = False

    def badges(self) -> list[str]:
        """The badges' keys, in a fixed order: ``read_only``, ``destructive`` (stated) or
        ``maybe_destructive`` (by default), ``idempotent``, ``open_world`` (only when stated)."""
        out = []
        if self.read_only:
            out.append("read_only")
        elif self.destructive:
            out.append("destructive" if self.destructive_stated else "maybe_destructive")
        if self.idempotent and not self.read_only:
            out.append("idempotent")
        if self.open_world and self.open_world_stated:
            out.append("open_world")
        return out


def tool_hints(tool: Any) -> ToolHints:
    """The :class:`ToolHints` of a listed tool (``tool["annotations"]``; anything else: defaults)."""
    annotations = tool.get("annotations") if isinstance(tool, dict) else None
    if not isinstance(annotations, dict):
        annotations = {}
    read_only, _ = _flag(annotations, "readOnlyHint", False)
    destructive, destructive_stated = _flag(annotations, "destructiveHint", True)
    idempotent, _ = _flag(annotations, "idempotentHint", False)
    open_world, open_world_stated = _flag(annotations, "openWorldHint", True)
    return ToolHints(read_only=read_only, destructive=destructive and not read_only,
                     destructive_stated=destructive_stated and destructive and not read_only,
                     idempotent=idempotent, open_world=open_world, open_world_stated=open_world_stated)


def is_destructive(tool: Any) -> bool:
    """Whether a listed tool is destructive by the rule above (``destructiveHint`` not ``false``
    and ``readOnlyHint`` not ``true``)."""
    return tool_hints(tool).destructive
