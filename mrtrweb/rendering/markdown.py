"""Markdown in a result's text, rendered for reading and nothing more (issue 28, item 3).

* Rendered by ``markdown-it-py`` (CommonMark, tables; raw HTML **off**: ``<b>`` stays text), then
  cleaned by ``nh3`` (ammonia) to an allow-list of tags with no attributes but ``class``;
* a link is never live: ``[text](url)`` and ``<url>`` become the text followed by the full URL
  as code (its ASCII form, :func:`mrtrweb.text.display.ascii_url`); an image is never loaded:
  ``![alt](url)`` becomes "image not loaded: alt" and the URL as code;
* control, bidi and invisible characters are made visible (:func:`mrtrweb.text.display.shown_text`),
  before the rendering and again after it (a character entity becomes one in the rendering).

:func:`looks_like_markdown` decides whether a text block is rendered at all: plain text (logs,
"Worked for 8 s.") is shown as it is, line breaks kept.
"""

from __future__ import annotations

import html
import re
from typing import Any

import nh3
from django.utils.translation import gettext as _
from markdown_it import MarkdownIt

from ..text import display

#: tags the rendered HTML may keep (no ``a``, no ``img``: see the module docstring)
ALLOWED_TAGS = {"p", "br", "em", "strong", "code", "pre", "blockquote", "ul", "ol", "li", "h1", "h2", "h3", "h4",
                "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td", "span", "del", "s"}
#: a text longer than this is shown as plain text (rendering is linear, but a page stays quick)
MAX_MARKDOWN_CHARS = 100_000

#: Markdown syntax, every quantifier bounded (no backtracking blow-up on "[[[[..." or "<a:<a:...")
_MARKS = re.compile(r"(?:^|\n)[ ]{0,3}(?:#{1,6}[ \t]|[-*+][ \t]|\d{1,9}[.)][ \t]|>|```|~~~|\|[^\n]{0,500}\|)"
                    r"|(?<!\w)\*\*(?=\S)[^*\n]{1,500}(?<=\S)\*\*(?!\w)|(?<!\w)__(?=\S)[^_\n]{1,500}(?<=\S)__(?!\w)"
                    r"|`[^`\n]{1,500}`"
                    r"|\[[^\]\n]{0,500}\]\([^)\n]{0,2000}\)|<[a-z][a-z0-9+.-]{0,32}:[^>\s]{0,2000}>", re.IGNORECASE)


def looks_like_markdown(text: Any) -> bool:
    """Whether ``text`` holds Markdown syntax (a heading, a list, a quote, a fence, a table row,
    emphasis, code, a link or an autolink) and is not too long to render."""
    return isinstance(text, str) and len(text) <= MAX_MARKDOWN_CHARS and _MARKS.search(text) is not None


def _url_code(url: str) -> str:
    return f'<code class="md-url">{html.escape(str(display.ascii_url(url)))}</code>'


def _link_open(self: Any, tokens: list[Any], idx: int, options: Any, env: dict[str, Any]) -> str:
    env.setdefault("links", []).append(tokens[idx].attrGet("href") or "")
    return '<span class="md-link">'


def _link_close(self: Any, tokens: list[Any], idx: int, options: Any, env: dict[str, Any]) -> str:
    href = env.get("links", [""]).pop() if env.get("links") else ""
    return "</span> " + _url_code(href)


def _image(self: Any, tokens: list[Any], idx: int, options: Any, env: dict[str, Any]) -> str:
    token = tokens[idx]
    alt = "".join(child.content for child in (token.children or []))
    label = html.escape(_("image not loaded"))
    return (f'<span class="md-image">[{label}: {html.escape(alt)}]</span> '
            + _url_code(token.attrGet("src") or ""))





def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True, "typographer": False})
    md.enable("table").enable("strikethrough")
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("link_close", _link_close)
    md.add_render_rule("image", _image)
    return md


_MD = _parser()


def render(text: str) -> str:
    """``text`` (Markdown) as clean HTML (see the module docstring): safe to mark safe."""
    source = display.shown_text(text)
    rendered = _MD.render(source, {"links": []})
    clean = nh3.clean(rendered, tags=ALLOWED_TAGS, attributes={"span": {"class"}, "code": {"class"}},
                      url_schemes=set(), link_rel=None, strip_comments=True)
    # entities (&#x202E;, &rlm;...) became characters in the rendering: made visible again (the
    # markers hold no character HTML treats specially); quotes in text escaped as everywhere else
    return "".join(part if part.startswith("<") else display.shown_text(part).replace('"', "&quot;").replace("'", "&#x27;")
                   for part in _TAGS.split(clean))


#: the tags of nh3's output (well-formed: no ">" inside an attribute value, nh3 escapes it)
_TAGS = re.compile(r"(<[^>]*>)")
