"""The settings reference, generated at build time from the one settings table in code.

``mrtrweb/conf/__init__.py`` holds it: :data:`mrtrweb.conf.DEFAULTS` (every key and its default) and the
module's docstring (each key's meaning, one entry per key). The directive::

    ```{mrtrweb-settings}
    ```

renders every key as a table row: the key with its default and how ``MRTRWEB_<KEY>`` is parsed
(both from the code), and its meaning (from the docstring). With arguments (``SECRET_KEYS OAUTH_*``:
names or ``fnmatch`` patterns) it renders only those keys. A key of ``DEFAULTS`` without a meaning,
or a meaning naming no key, is a warning: ``sphinx-build -W`` (tests/docs/test_docs_site.py) fails, so
the page cannot drift from the code.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

_ENTRY = re.compile(r"^``([A-Z][A-Z0-9_]*)``$")
_LITERAL = re.compile(r"``(.+?)``")


def meanings(doc: str) -> dict[str, str]:
    """``{key: meaning}`` from the docstring's entries, in their order: a line ````KEY```` alone,
    then its indented lines (joined with spaces)."""
    out: dict[str, str] = {}
    key = None
    for line in doc.splitlines():
        m = _ENTRY.match(line)
        if m:
            key = m.group(1)
            out[key] = ""
        elif key and line.startswith("    ") and line.strip():
            out[key] = (out[key] + " " + line.strip()).strip()
        else:
            key = None
    return out


def default_text(value: Any) -> str:
    """A default as a reader writes it in ``settings.py``."""
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def environ_text(conf: Any, key: str) -> str:
    """How the standalone site parses ``MRTRWEB_<KEY>`` (``mrtrweb.conf.from_environ``)."""
    if key in conf.NUMERIC_KEYS:
        return "a number"
    if key in conf.LIST_KEYS:
        return "a JSON list, or words separated by spaces"
    if key in conf.BOOL_KEYS:
        return "1 or 0"
    if key in conf.INT_TUPLE_KEYS:
        return "numbers separated by spaces"
    if key in conf.DICT_KEYS:
        return "a JSON object"
    return "text"


def rows(conf: Any) -> tuple[list[tuple[str, str, str, str]], list[str], list[str]]:
    """Every key, in the docstring's order (keys it lacks last): ``(key, default, environ,
    meaning)``; then the keys without a meaning and the meanings naming no key."""
    meaning = meanings(conf.__doc__ or "")
    undocumented = [k for k in conf.DEFAULTS if k not in meaning]
    unknown = [k for k in meaning if k not in conf.DEFAULTS]
    order = [k for k in meaning if k in conf.DEFAULTS] + undocumented
    return ([(k, default_text(conf.DEFAULTS[k]), environ_text(conf, k), meaning.get(k, "")) for k in order],
            undocumented, unknown)


def _inline(text: str) -> list[nodes.Node]:
    parts: list[nodes.Node] = []
    pos = 0
    for m in _LITERAL.finditer(text):
        if m.start() > pos:
            parts.append(nodes.Text(text[pos:m.start()]))
        parts.append(nodes.literal(m.group(1), m.group(1)))
        pos = m.end()
    if pos < len(text):
        parts.append(nodes.Text(text[pos:]))
    return parts


def _cell(*content: nodes.Node) -> nodes.entry:
    return nodes.entry("", nodes.paragraph("", "", *content))


def _key_cell(key: str, default: str, environ: str) -> nodes.entry:
    """The key, then its default and its environment variable, one per line (a narrow column)."""
    return nodes.entry("", nodes.paragraph("", "", nodes.strong("", "", nodes.literal(key, key))),
                       nodes.paragraph("", "", nodes.Text("default "), nodes.literal(default, default)),
                       nodes.paragraph("", "", nodes.literal(f"MRTRWEB_{key}", f"MRTRWEB_{key}"),
                                       nodes.Text(f": {environ}")))


class SettingsDirective(SphinxDirective):
    """``{mrtrweb-settings} [KEY or pattern ...]``: the settings table (see the module docstring)."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = False

    def run(self) -> list[nodes.Node]:
        from mrtrweb import conf

        self.env.note_dependency(conf.__file__)
        table_rows, undocumented, unknown = rows(conf)
        if self.arguments:
            patterns = self.arguments[0].split()
            for pattern in patterns:
                if not any(fnmatch.fnmatchcase(r[0], pattern) for r in table_rows):
                    logger.warning("mrtrweb-settings: %r names no MRTRWEB setting", pattern,
                                   location=self.get_location())
            table_rows = [r for r in table_rows if any(fnmatch.fnmatchcase(r[0], p) for p in patterns)]
        else:
            for key in undocumented:
                logger.warning("MRTRWEB[%r] (mrtrweb.conf.DEFAULTS) has no meaning in mrtrweb/conf/__init__.py's "
                               "docstring: add an entry there", key, location=self.get_location())
            for key in unknown:
                logger.warning("mrtrweb/conf/__init__.py's docstring describes %r, which is not in mrtrweb.conf.DEFAULTS",
                               key, location=self.get_location())

        table = nodes.table(classes=["mrtrweb-settings", "colwidths-auto"])  # widths by content
        group = nodes.tgroup(cols=2)
        table += group
        for _ in range(2):
            group += nodes.colspec(colwidth=1)
        head = nodes.thead()
        head += nodes.row("", _cell(nodes.Text("key, default, environment variable")), _cell(nodes.Text("meaning")))
        group += head
        body = nodes.tbody()
        for key, default, environ, meaning in table_rows:
            row = nodes.row(ids=[f"setting-{key.lower().replace('_', '-')}"])
            row += _key_cell(key, default, environ)
            row += _cell(*_inline(meaning))
            body += row
        group += body
        return [table]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("mrtrweb-settings", SettingsDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
