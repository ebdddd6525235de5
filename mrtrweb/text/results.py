"""Bounded results: what is stored per operation, what a page shows, what a download serves.

A server's final result can be any size. Two settings bound what the product does with it:

* ``MRTRWEB["MAX_STORED_RESULT_BYTES"]`` (default 1 MiB): the most an operation keeps of its result
  (compact JSON, UTF-8). A larger result is kept as an explicitly marked, truncated copy
  (:func:`for_storage`): ``{"mrtrweb_truncated": {"original_bytes": N, "stored_bytes": M},
  "text": "<the first characters of the result's JSON>", "isError": bool}``, the whole object
  within the cap. A server result that itself holds the key ``mrtrweb_truncated`` has it renamed
  ``server:mrtrweb_truncated`` on storage, so no server can fake the mark. A NUL character in a
  result's strings is stored as U+FFFD (PostgreSQL keeps none).
* ``MRTRWEB["MAX_SHOWN_CHARS"]`` (default 20,000): the most characters of server text one page or
  push shows of a result (all its blocks together, at most :data:`MAX_SHOWN_BLOCKS` blocks), of one
  elicitation message, and of one sampling message or system prompt (:func:`shown_text`), and
  of all the titles, labels and descriptions of one call page or card (:class:`ShownBudget`). The
  page says what was left out; the whole stored result is behind a download
  (:func:`download`), served as an attachment, never rendered.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import regex
from django.utils.translation import gettext as _

from .. import conf

logger = logging.getLogger("mrtrweb.results")

#: the key marking a stored result as a truncated copy
TRUNCATED_KEY = "mrtrweb_truncated"
#: at most this many blocks (content items, structured content) of a result are shown
MAX_SHOWN_BLOCKS = 100


def _json(value: Any, indent: int | None = None) -> str | None:
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent)
    except (RecursionError, ValueError, TypeError):
        return None


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def for_storage(result: Any, *, op_id: Any = "") -> Any:
    """``result`` as an operation keeps it: itself when its compact JSON fits
    ``MAX_STORED_RESULT_BYTES``, else the marked truncated copy described in the module docstring
    (within the cap too). The cut is logged with sizes only."""
    cap = int(conf.get("MAX_STORED_RESULT_BYTES"))
    if isinstance(result, dict) and TRUNCATED_KEY in result:
        result = {(f"server:{k}" if k == TRUNCATED_KEY else k): v for k, v in result.items()}
    text = _json(result)
    if text is not None:
        result, text = _without_nul(result, text)
    if text is not None and _utf8_len(text) <= cap:
        return result
    original = _utf8_len(text) if text is not None else 0
    is_error = isinstance(result, dict) and result.get("isError") is True
    kept = (text or "")[: max(cap - 200, 0)]
    while True:
        marked = {TRUNCATED_KEY: {"original_bytes": original, "stored_bytes": _utf8_len(kept)},
                  "text": kept, "isError": is_error}
        size = _utf8_len(_json(marked) or "")
        if size <= cap or not kept:
            break
        kept = kept[: max(len(kept) * (cap - 200) // size - 1, 0)]  # escapes made it longer: shrink
    logger.info("operation %s: result of %d bytes stored truncated to %d bytes (MAX_STORED_RESULT_BYTES %d)",
                op_id, original, _utf8_len(kept), cap)
    return marked


#: a JSON ``\u0000`` escape (not an escaped backslash followed by ``u0000``)
_NUL_ESCAPE = regex.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
#: the key of an operation's params kept as JSON text (they hold a NUL character)
PARAMS_TEXT_KEY = "mrtrweb_params_json"


def _without_nul(value: Any, text: str) -> tuple[Any, str]:
    """``value`` and its JSON ``text`` with every NUL character of its strings made U+FFFD
    (PostgreSQL stores no NUL in text or ``jsonb``)."""
    if "\\u0000" not in text:
        return value, text
    text = _NUL_ESCAPE.sub(lambda m: m.group(1) + "\\ufffd", text)
    return json.loads(text), text


def params_for_storage(params: dict[str, Any]) -> dict[str, Any]:
    """An operation's params as its ``params`` column keeps them, exactly: as they are, or, when a
    string in them holds a NUL character (a tool name, a typed argument), as their JSON text under
    :data:`PARAMS_TEXT_KEY` with ASCII escapes (``\\u0000`` stays a backslash sequence: PostgreSQL's
    ``jsonb`` refuses the character). :func:`stored_params` gives them back unchanged."""
    text = json.dumps(params, ensure_ascii=False)
    if "\\u0000" not in text:
        return params
    return {PARAMS_TEXT_KEY: json.dumps(params, ensure_ascii=True)}


def stored_params(value: Any) -> Any:
    """The params an operation was started with, from its ``params`` column (see :func:`params_for_storage`)."""
    if isinstance(value, dict) and set(value) == {PARAMS_TEXT_KEY} and isinstance(value[PARAMS_TEXT_KEY], str):
        return json.loads(value[PARAMS_TEXT_KEY])
    return value


def truncation(result: Any) -> dict[str, int] | None:
    """The mark of a stored truncated copy (``original_bytes``, ``stored_bytes``), or None."""
    if isinstance(result, dict) and isinstance(result.get(TRUNCATED_KEY), dict) and isinstance(result.get("text"), str):
        mark = result[TRUNCATED_KEY]
        return {"original_bytes": int(mark.get("original_bytes") or 0), "stored_bytes": int(mark.get("stored_bytes") or 0)}
    return None


def _blocks(method: str, result: Any) -> list[dict[str, str]]:
    """The displayable blocks of a stored result, uncut: text items as text, anything else as JSON."""
    if truncation(result) is not None:
        return [{"kind": "json", "text": result["text"]}]
    result = result if isinstance(result, dict) else {}
    items: Any = result.get("content") if method == "tools/call" else None
    if method == "prompts/get":
        messages = result.get("messages")
        items = [m.get("content") for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    if method == "resources/read":
        items = result.get("contents")
    blocks = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            blocks.append({"kind": "text", "text": item["text"]})
        else:
            blocks.append({"kind": "json", "text": _json(item, indent=2) or _("[content that cannot be shown]")})
    if "structuredContent" in result:
        blocks.append({"kind": "json", "text": _json(result["structuredContent"], indent=2)
                       or _("[content that cannot be shown]")})
    return blocks


def shown(method: str, result: Any) -> dict[str, Any]:
    """What a page shows of a stored result: ``blocks`` (``kind``, ``text``; at most
    ``MAX_SHOWN_CHARS`` characters and :data:`MAX_SHOWN_BLOCKS` blocks in all), ``shown_chars``,
    ``total_chars``, ``result_cut`` (whether anything was left out) and ``stored_truncated`` (the
    :func:`truncation` mark, or None)."""
    budget = cap = int(conf.get("MAX_SHOWN_CHARS"))
    blocks = _blocks(method, result)
    out: list[dict[str, str]] = []
    total = 0
    for block in blocks:
        total += len(block["text"])
        if budget <= 0 or len(out) >= MAX_SHOWN_BLOCKS:
            continue
        text = block["text"][:budget]
        out.append({"kind": block["kind"], "text": text})
        budget -= len(text)
    shown_chars = cap - budget
    return {"blocks": out, "shown_chars": shown_chars, "total_chars": total,
            "result_cut": shown_chars < total or len(out) < len(blocks), "stored_truncated": truncation(result)}


#: the most characters of one description a server page shows per listed tool, prompt or template
LISTED_DESCRIPTION_CHARS = 2000


def shown_text(text: Any, limit: int | None = None) -> Any:
    """One piece of server text as a page shows it: at most ``limit`` (default ``MAX_SHOWN_CHARS``)
    characters, a cut one ending with a note of how many characters were left out. Non-strings
    are returned as is."""
    cap = int(conf.get("MAX_SHOWN_CHARS")) if limit is None else limit
    if not isinstance(text, str) or len(text) <= cap:
        return text
    return text[:cap] + " … " + _("(%(n)d more characters not shown)") % {"n": len(text) - cap}


#: the most characters of one title, label, option label or name in a heading a page shows
MAX_LABEL_CHARS = 500
#: a label shows at least this many characters, however much of the page's budget is spent, so
#: every field and option stays told apart (the number of fields and options is bounded elsewhere)
MIN_LABEL_CHARS = 40


class ShownBudget:
    """One page's (or card's) budget of server text for everything besides messages and results:
    the titles, labels, option labels, descriptions and names of a schema or an argument list,
    ``total`` characters in all (default ``MAX_SHOWN_CHARS``). Each string is cut by
    :func:`shown_text` to its own cap and to what is left of the budget (a label keeps at least
    :data:`MIN_LABEL_CHARS`); a cut one says how many characters were left out."""

    def __init__(self, total: int | None = None) -> None:
        self.left = int(conf.get("MAX_SHOWN_CHARS")) if total is None else max(int(total), 0)

    def text(self, value: Any, cap: int, floor: int = 0) -> Any:
        """``value`` cut to ``min(cap, max(left, floor))`` characters (non-strings as they are)."""
        if not isinstance(value, str):
            return value
        limit = min(cap, max(self.left, floor))
        self.left = max(self.left - min(len(value), limit), 0)
        return shown_text(value, limit)

    def label(self, value: Any) -> Any:
        """A title, label, option label or name: at most :data:`MAX_LABEL_CHARS`."""
        return self.text(value, MAX_LABEL_CHARS, MIN_LABEL_CHARS)

    def description(self, value: Any) -> Any:
        """A description or help text: at most :data:`LISTED_DESCRIPTION_CHARS`."""
        return self.text(value, LISTED_DESCRIPTION_CHARS)


def card_budget(messages: dict[str, Any]) -> ShownBudget:
    """The budget of a card's fields: what ``MAX_SHOWN_CHARS`` leaves after its shown
    ``messages`` (:func:`shown_messages`), so a card shows at most that much server text in all."""
    used = sum(len(m) for m in messages.values() if isinstance(m, str))
    return ShownBudget(int(conf.get("MAX_SHOWN_CHARS")) - used)


#: each message of a card shows at least this many characters, however many the card holds
MIN_MESSAGE_CHARS = 200


def shown_messages(requests: Any) -> dict[str, Any]:
    """The messages of a round's input requests (``{key: view}``, in order) as its card shows them:
    :func:`shown_text` with one budget of ``MAX_SHOWN_CHARS`` characters for the whole card (each
    message at least :data:`MIN_MESSAGE_CHARS`). The consent receipt digests exactly these."""
    budget = int(conf.get("MAX_SHOWN_CHARS"))
    out: dict[str, Any] = {}
    for key, view in requests.items():
        message = getattr(view, "message", None)
        out[key] = shown_text(message, max(budget, MIN_MESSAGE_CHARS))
        if isinstance(message, str):
            budget -= min(len(message), max(budget, MIN_MESSAGE_CHARS))
    return out


def cap_descriptions(items: list[dict[str, Any]], limit: int | None = None) -> list[dict[str, Any]]:
    """``items`` (listed tools, prompts, templates: copies) with each string ``description`` cut by
    :func:`shown_text` (``limit``, default ``MAX_SHOWN_CHARS``); changed in place, returned."""
    for item in items:
        if isinstance(item.get("description"), str):
            item["description"] = shown_text(item["description"], limit)
    return items


def download(op: Any) -> tuple[bytes, str, str]:
    """The stored result of ``op`` as a download: ``(body, content type, file name)``. JSON
    (``application/json``) when complete; a truncated copy is served as the text it kept
    (``text/plain``), its file name saying so."""
    if truncation(op.result) is not None:
        return (op.result["text"].encode("utf-8", "replace"), "text/plain; charset=utf-8",
                f"result-{op.pk}-truncated.txt")
    body = _json(op.result, indent=2) or "null"
    return body.encode("utf-8", "replace"), "application/json; charset=utf-8", f"result-{op.pk}.json"
