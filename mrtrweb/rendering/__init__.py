"""Results as people read them (issue 28, item 3): a stored ``tools/call``, ``prompts/get`` or
``resources/read`` result laid out as blocks -- text (Markdown rendered safely), images and audio
that are what they claim to be, resource links a person can read with one click, embedded
resources, and ``structuredContent`` checked against the tool's ``outputSchema`` and shown once.

:func:`render` is what the operation page uses::

    render(method, result, output_schema=None) -> {
        "blocks": [block, ...],          # blocks.py's kinds; text cut to the page's budget, markdown
                                         # blocks with "html" (clean, markdown.py)
        "structured": structured.view() | None,
        "duplicate_dropped": bool,       # a text block that repeated the structured content as JSON
        "shown_chars": int, "total_chars": int, "result_cut": bool,
        "stored_truncated": {...} | None, # text.results.truncation()
        "is_error": bool,                # the tool said isError: true ("Tool error")
        "foldable": bool}                # more than a screenful: folded, with "Show all"

Bounds: ``MAX_SHOWN_CHARS`` characters of server text in all (as :func:`mrtrweb.text.results.shown`),
:data:`mrtrweb.text.results.MAX_SHOWN_BLOCKS` blocks, :data:`.blocks.MAX_MEDIA_BYTES` per image or
audio item. Nothing is fetched: a resource link's URI is read only by ``resources/read`` when the
person clicks **Read**; a Markdown link or image is text.

May import: :mod:`mrtrweb.text`, :mod:`mrtrweb.conf`, :mod:`mrtrweb.consent.argschema` (the
bounded schema check). Imported by :mod:`mrtrweb.consent` (the panel) and :mod:`mrtrweb.views`.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.safestring import mark_safe

from .. import conf
from ..text import results
from . import markdown, structured
from .blocks import content_items, item_block, item_bytes, same_json

__all__ = ["FOLD_CHARS", "content_items", "item_bytes", "render"]

#: a result shown with more characters than this (or more than FOLD_BLOCKS blocks) is folded
FOLD_CHARS = 3000
FOLD_BLOCKS = 6
#: a base64 payload (an image's "data", a resource's "blob") in a truncated copy's JSON text: not shown
_ENCODED_RUN = re.compile(r'("(?:data|blob)"\s*:\s*")([A-Za-z0-9+/=]{200,})')

_TEXT_KINDS = ("text", "resource_text", "json")


def _elide_encoded(text: str) -> str:
    return _ENCODED_RUN.sub(lambda m: f"{m.group(1)}[… {len(m.group(2))} characters of encoded data not shown]", text)


def render(method: str, result: Any, output_schema: Any = None) -> dict[str, Any]:
    """A stored result as its page shows it (the module docstring)."""
    cap = budget = int(conf.get("MAX_SHOWN_CHARS"))
    stored_truncated = results.truncation(result)
    is_error = isinstance(result, dict) and result.get("isError") is True
    view = None
    dropped = False
    if stored_truncated is not None:  # the marked copy: its text, never a base64 dump
        blocks = [{"kind": "json", "text": result["text"], "role": None, "folded": False, "elide": True}]
    else:
        blocks = [item_block(item, n, role) for n, (item, role) in enumerate(content_items(method, result))]
        if method == "tools/call" and isinstance(result, dict) and "structuredContent" in result:
            view = structured.view(result["structuredContent"], output_schema)
            kept = [b for b in blocks if not (b["kind"] == "text" and same_json(b["text"], result["structuredContent"]))]
            dropped, blocks = len(kept) < len(blocks), kept
    total = sum(len(b["text"]) for b in blocks if b["kind"] in _TEXT_KINDS) + (len(view["json"]) if view else 0)
    shown: list[dict[str, Any]] = []
    for block in blocks:
        if len(shown) >= results.MAX_SHOWN_BLOCKS:
            break
        if block["kind"] in _TEXT_KINDS:
            if budget <= 0:
                continue
            block = {**block, "text": block["text"][:budget]}
            budget -= len(block["text"])
            if block.get("elide"):  # counted as kept, shown without its encoded payloads
                block["text"] = _elide_encoded(block["text"])
            if block.get("markdown") is None:  # judged on what is shown, never on the whole item
                block["markdown"] = markdown.looks_like_markdown(block["text"])
            if block.get("markdown"):
                block["html"] = mark_safe(markdown.render(block["text"]))  # noqa: S308 -- nh3-cleaned, no a/img
        shown.append(block)
    if view is not None:
        if budget < len(view["json"]):
            view = {**view, "json": view["json"][:max(budget, 0)], "table": None, "tree": None}
        budget -= len(view["json"])
    shown_chars = cap - max(budget, 0)
    return {"blocks": shown, "structured": view, "duplicate_dropped": dropped, "shown_chars": shown_chars,
            "total_chars": total, "result_cut": shown_chars < total or len(shown) < len(blocks),
            "stored_truncated": stored_truncated, "is_error": is_error,
            "foldable": shown_chars > FOLD_CHARS or len(shown) > FOLD_BLOCKS}
