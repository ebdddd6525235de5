"""A ``server.json`` of the official MCP registry's schema filling in the Add form (issue 29, item 5).

The registry's format (``https://static.modelcontextprotocol.io/schemas/<date>/server.schema.json``):
an object with ``name`` (reverse-DNS, e.g. ``io.github.user/weather``), ``title``?,
``description``, ``version``, ``packages``? (each ``{"registryType": "npm" | "pypi" | "oci" |
"nuget" | "mcpb", "identifier", "version", "transport": {"type": "stdio" | ...}, ...}``: meant to
be run locally) and ``remotes``? (each ``{"type": "streamable-http" | "sse", "url", "headers"?:
[{"name", "description"?, "isRequired"?, "isSecret"?, ...}], "variables"?: {name: {"default"?,
"description"?, ...}}}``).

:func:`parse` reads the text (at most :data:`MAX_BYTES` UTF-8 bytes) and returns an
:class:`Imported`: the first ``streamable-http`` remote's URL (its ``{variable}`` placeholders
filled with their defaults; one without a default is left unfilled and explained), a display name
(``title``, else ``name``), and notes: the headers that remote asks for (to be entered in the
server's authorization settings: their values are never taken from the file), the other
Streamable HTTP remotes, ``sse`` remotes (a transport this product does not speak), and packages
(meant to run locally: a deployer may run one behind a Streamable HTTP bridge; never run here).
Nothing is fetched, not even the ``$schema``.

Errors: :class:`RegistryError` with a stable ``code`` (``too_large``, ``not_utf8``, ``bad_json``,
``not_object``, ``no_remote``) and a message a person reads.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Final

from django.utils.translation import gettext as _

#: the largest server.json read, UTF-8 bytes (the registry's own files are a few KiB)
MAX_BYTES: Final = 65536
_VARIABLE = re.compile(r"\{([A-Za-z0-9_.-]{1,64})\}")
_MAX_NOTES: Final = 20


class RegistryError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclasses.dataclass
class Imported:
    """What a server.json fills in: ``name`` and ``url`` for the form (``url`` empty when no
    Streamable HTTP remote could be used), ``notes``: sentences to show beside the form."""

    name: str
    url: str
    notes: list[str]


def _text(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _fill(url: str, variables: Any) -> tuple[str, list[str]]:
    """``url`` with ``{name}`` replaced by the variable's default; the names without one."""
    variables = variables if isinstance(variables, dict) else {}
    missing: list[str] = []

    def one(match: re.Match[str]) -> str:
        spec = variables.get(match.group(1))
        default = spec.get("default") if isinstance(spec, dict) else None
        if isinstance(default, str) and default and not re.search(r"[\s/?#@{}]", default):
            return default
        missing.append(match.group(1))
        return match.group(0)

    return _VARIABLE.sub(one, url), missing


def parse(data: str | bytes) -> Imported:
    """See the module doc.

    Raises:
        RegistryError: the text is too large, not UTF-8, not JSON, not an object, or names no
            remote or package at all.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_BYTES:
        raise RegistryError("too_large", _("A server.json may be at most %(max)s bytes; this one has %(n)s.")
                            % {"max": MAX_BYTES, "n": len(raw)})
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RegistryError("not_utf8", _("This server.json is not UTF-8 text.")) from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise RegistryError("bad_json", _("This is not valid JSON (line %(line)s, column %(column)s).")
                                % {"line": exc.lineno, "column": exc.colno}) from None
        raise RegistryError("bad_json", _("This is not valid JSON.")) from None
    if not isinstance(doc, dict):
        raise RegistryError("not_object", _("A server.json is a JSON object (with name, version, remotes or "
                                            "packages)."))
    name = (_text(doc.get("title"), 120) or _text(doc.get("name"), 120)).strip()
    remotes = [r for r in doc.get("remotes") or [] if isinstance(r, dict)] if isinstance(doc.get("remotes"), list) else []
    packages = [p for p in doc.get("packages") or [] if isinstance(p, dict)] if isinstance(doc.get("packages"), list) else []
    notes: list[str] = []
    url = ""
    streamable = [r for r in remotes if r.get("type") == "streamable-http" and isinstance(r.get("url"), str)]
    for index, remote in enumerate(streamable):
        filled, missing = _fill(remote["url"][:500], remote.get("variables"))
        if index == 0 and not missing:
            url = filled
            headers = [h for h in remote.get("headers") or [] if isinstance(h, dict)] \
                if isinstance(remote.get("headers"), list) else []
            for header in headers[:_MAX_NOTES]:
                hname = _text(header.get("name"), 64) or "?"
                kind = _("a secret") if header.get("isSecret") else _("a value")
                need = _("required") if header.get("isRequired") else _("optional")
                notes.append(_("The server asks for the header %(name)s (%(kind)s, %(need)s): after saving, enter it "
                               "in the server's authorization settings (a bearer token for Authorization, else as "
                               "a header); its value is never taken from the file.")
                             % {"name": hname, "kind": kind, "need": need})
        elif missing:
            notes.append(_("The Streamable HTTP remote %(url)s has placeholders without a default (%(names)s): enter "
                           "the URL by hand.") % {"url": remote["url"][:200], "names": ", ".join(missing[:5])})
        else:
            notes.append(_("Another Streamable HTTP remote: %(url)s.") % {"url": filled[:200]})
    for remote in remotes:
        if remote.get("type") == "sse":
            notes.append(_("The remote %(url)s uses SSE (the older HTTP+SSE transport), which this product does not "
                           "speak; it was not used.") % {"url": _text(remote.get("url"))})
        elif remote.get("type") != "streamable-http":
            notes.append(_("A remote of type %(type)s was not used (only Streamable HTTP is).")
                         % {"type": _text(remote.get("type"), 40) or "?"})
    for package in packages[:_MAX_NOTES]:
        transport = package.get("transport")
        ttype = _text(transport.get("type"), 40) if isinstance(transport, dict) else ""
        notes.append(_("The package %(id)s (%(registry)s, %(transport)s) is meant to be run locally; this product "
                       "never starts processes. A deployer may run it behind a Streamable HTTP bridge and add that "
                       "URL.") % {"id": _text(package.get("identifier")) or "?",
                                  "registry": _text(package.get("registryType"), 40) or "?", "transport": ttype or "?"})
    if not remotes and not packages:
        raise RegistryError("no_remote", _("This server.json names no remote and no package."))
    if not url:
        notes.insert(0, _("This server.json has no Streamable HTTP remote this product can use: nothing was filled "
                          "in but what is noted below."))
    return Imported(name=name, url=url, notes=notes[: _MAX_NOTES * 2])
