"""A person's answers kept from the model (issue 32, item 4): "the model never sees ... an answer's
values". The retry carries the person's answers to the server; a server may echo them in the final
result (a booking confirming the dates and seat typed on the card), and that result is what the
model is given. So the values the person answered in a model-initiated operation's rounds are
remembered -- as keyed digests, never the values -- on its :class:`~mrtrweb.models.Proposal`
(``withheld``), and every exact occurrence of one in the result's text is replaced by
:data:`MARK` before the model reads it (:func:`redact`, called by :mod:`.context`).

* :func:`remember` -- called by the answer view right before the answer goes through
  :func:`mrtrweb.operations.answer_round` (before: the retry's result may come back at once); an
  answer that is then refused leaves digests that only ever hide text, never show it;
* :func:`redact` -- the text with every span whose digest is remembered replaced.

Shape of ``Proposal.withheld``: a list of at most :data:`MAX_VALUES` pairs ``[length, digest]``:
``length`` the value's length in characters, ``digest`` the hex BLAKE2b-128 of it under a key
derived from the audit key (``MRTRWEB["AUDIT_SECRET"]``). A value is each string or number in an
answer's ``content`` (nested objects and arrays walked; booleans and ``null`` are not values a server
could tell apart from its own text), stripped, of at least :data:`MIN_CHARS` characters; a string
also in its JSON-escaped form, as it appears in ``structuredContent`` shown as JSON.

Limits (said in docs/chat.md): only exact echoes are found -- a value the server reformats (case,
spacing, a date written otherwise) is not recognised; a value shorter than :data:`SHORT_CHARS` is
found only standing apart (:func:`_apart`), and may hide the same characters standing apart elsewhere
(safe: it only hides), the model's own arguments' values included; answers of more than
:data:`MAX_LENGTHS` distinct lengths withhold the whole result.

May import: the models, :mod:`mrtrweb.conf`. Never the views.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from django.conf import settings
from django.db import transaction

from .. import conf
from ..models import Operation, Proposal

#: what the model reads instead of an answered value
MARK = "[withheld: the person's answer]"
#: values shorter than this (characters) are not remembered
MIN_CHARS = 1
#: values shorter than this (characters) are found only where they stand apart: a digit not inside a
#: longer number, a letter not inside a longer word (an answer "2" hides "2 h", not "2026")
SHORT_CHARS = 4
#: values longer than this (characters) are remembered by their first MAX_CHARS characters' span only
MAX_CHARS = 2000
#: at most this many values per operation (the first ones answered)
MAX_VALUES = 200
#: at most this many distinct value lengths are looked for in one text; past it the whole text is
#: withheld (:data:`TOO_MANY`): the cost stays bounded (one digest per character and length)
MAX_LENGTHS = 16
#: what the model reads instead of a text that would take too long to check
TOO_MANY = "[withheld: this result may repeat many of the person's answers]"


def _key() -> bytes:
    secret = conf.get("AUDIT_SECRET") or ("mrtrweb.audit/" + settings.SECRET_KEY)
    return hmac.new(str(secret).encode(), b"mrtrweb.chat.withheld", hashlib.sha256).digest()


def _digest(key: bytes, text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), key=key, digest_size=16).hexdigest()


def _values(node: Any, out: list[str], depth: int = 0) -> None:
    if depth > 32 or len(out) >= MAX_VALUES:
        return
    if isinstance(node, dict):
        for value in node.values():
            _values(value, out, depth + 1)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _values(value, out, depth + 1)
    elif isinstance(node, bool) or node is None:
        return
    elif isinstance(node, (str, int, float)):
        text = str(node).strip()[:MAX_CHARS]
        if len(text) >= MIN_CHARS:
            out.append(text)
            if isinstance(node, str):
                escaped = json.dumps(text, ensure_ascii=False)[1:-1]
                if escaped != text:
                    out.append(escaped)


def values_of(responses: Any) -> list[str]:
    """The answered values of a round's ``responses`` (key -> ``{"action", "content"?}`` for an
    elicitation, or another request's answer): every string and number under each ``content``."""
    out: list[str] = []
    for answer in (responses.values() if isinstance(responses, dict) else ()):
        if isinstance(answer, dict) and answer.get("action", "accept") == "accept":
            _values(answer.get("content"), out)
    return out[:MAX_VALUES]


def marks(values: list[str]) -> list[list[Any]]:
    """``[[length, digest], ...]`` of ``values`` (the shape kept in ``Proposal.withheld``)."""
    key = _key()
    return [[len(v), _digest(key, v)] for v in values]


def remember(op: Operation, responses: Any) -> None:
    """Sync: add the digests of ``responses``' values to the proposal of ``op`` (a model-initiated
    operation; nothing for another initiator or when no proposal names it). Every value, also one
    the model gave in its own arguments: which of its values the person chose is the person's."""
    if op.initiator != Operation.Initiator.MODEL:
        return
    values = values_of(responses)
    if not values:
        return
    pairs = marks(values)
    with transaction.atomic():
        for proposal in Proposal.objects.select_for_update().filter(operation_id=op.pk):
            known = [list(p) for p in proposal.withheld or []]
            added = [p for p in pairs if p not in known]
            if added:
                proposal.withheld = (known + added)[:MAX_VALUES]
                proposal.save(update_fields=["withheld"])


def _apart(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` does not continue a number or word it touches: the character
    before (after) it is not of the same kind (digit / letter) as its first (last) character."""
    def same(a: str, b: str) -> bool:
        return (a.isdigit() and b.isdigit()) or (a.isalpha() and b.isalpha())
    return not (start > 0 and same(text[start - 1], text[start])) and \
        not (end < len(text) and same(text[end - 1], text[end]))


def redact(text: str, withheld: Any) -> str:
    """``text`` with every span whose digest is in ``withheld`` (``[[length, digest], ...]``)
    replaced by :data:`MARK`; the longest values first, spans never overlapping. Cost: one BLAKE2b
    per character of ``text`` and distinct length (the text is at most ``MODEL_RESULT_CHARS`` + 2,000
    characters, the lengths at most :data:`MAX_LENGTHS`: else the whole text is :data:`TOO_MANY`)."""
    if not text or not withheld:
        return text
    by_length: dict[int, set[str]] = {}
    for pair in withheld:
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], int) and pair[0] > 0:
            by_length.setdefault(pair[0], set()).add(str(pair[1]))
    if len([n for n in by_length if n <= len(text)]) > MAX_LENGTHS:
        return TOO_MANY
    key = _key()
    hidden = [False] * len(text)
    spans: list[tuple[int, int]] = []
    for length in sorted(by_length, reverse=True):
        wanted = by_length[length]
        i = 0
        while i + length <= len(text):
            if (length >= SHORT_CHARS or _apart(text, i, i + length)) \
                    and _digest(key, text[i:i + length]) in wanted and not any(hidden[i:i + length]):
                spans.append((i, i + length))
                for j in range(i, i + length):
                    hidden[j] = True
                i += length
            else:
                i += 1
    if not spans:
        return text
    out, at = [], 0
    for start, end in sorted(spans):
        out.append(text[at:start])
        out.append(MARK)
        at = end
    out.append(text[at:])
    return "".join(out)
