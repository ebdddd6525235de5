"""The review of an answer before it is sent: what the person is about to send, shown back to
them, and a signed review token (``django.core.signing``, ``REVIEW_SALT``, at most
``REVIEW_MAX_AGE_S`` old) binding Send to exactly the answers reviewed.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.utils.formats import date_format
from django.utils.translation import gettext, gettext_noop

from ..consent import fieldhints, sampling
from ..text import results
from ..consent.forms import option_key
from ..gate import digest
from ..models import Operation
from .common import _panel_response

logger = logging.getLogger("mrtrweb.views")


REVIEW_SALT = "mrtrweb.views.review"
#: seconds a review stays valid for Send (the round's own lifetime still applies)
REVIEW_MAX_AGE_S = 600
REVIEW_CHANGED_MESSAGE = (gettext_noop("These answers are not the ones you reviewed, so nothing was sent. "
                          "Check them and review them again."))
REVIEW_INVALID_MESSAGE = (gettext_noop("Your review is no longer valid (it expired or was damaged), so nothing was sent. "
                          "Review your answers again."))


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def _answers_digest(op: Operation, rnd: Any, responses: dict[str, Any], forms: dict[str, Any]) -> str:
    """The digest of exactly what Send would send (and of the sampling card's own fields)."""
    provider_data = {key: f.provider_data() for key, f in forms.items() if hasattr(f, "provider_data")}
    return digest({"op": str(op.id), "round": rnd.number, "responses": _jsonable(responses),
                   "provider_data": _jsonable(provider_data)})


def _review_token(op: Operation, rnd: Any, responses: dict[str, Any], forms: dict[str, Any],
                  provided: dict[str, Any]) -> str:
    return signing.dumps({"op": str(op.id), "round": rnd.number, "digest": _answers_digest(op, rnd, responses, forms),
                          "provided": _jsonable(provided)}, salt=REVIEW_SALT, compress=True)


def _review_payload(request: HttpRequest, op: Operation, rnd: Any) -> tuple[dict[str, Any] | None, str]:
    """The posted review token's payload, or ``(None, reason)`` (the reason is for the log only)."""
    token = request.POST.get("review_token", "")
    if not token:
        return None, "no review token"
    try:
        payload = signing.loads(token, salt=REVIEW_SALT, max_age=REVIEW_MAX_AGE_S)
    except signing.SignatureExpired:
        return None, "review token expired"
    except signing.BadSignature:
        return None, "review token bad signature"
    if not isinstance(payload, dict) or payload.get("op") != str(op.id) or payload.get("round") != rnd.number:
        return None, "review token for another operation or round"
    if not isinstance(payload.get("provided"), dict) or not isinstance(payload.get("digest"), str):
        return None, "review token malformed"
    return payload, ""


def _check_review(request: HttpRequest, op: Operation, rnd: Any, responses: dict[str, Any],
                  forms: dict[str, Any]) -> str | None:
    """``None`` when the posted answers are the reviewed ones, else the message shown (reason logged)."""
    payload, reason = _review_payload(request, op, rnd)
    if payload is not None and payload["digest"] != _answers_digest(op, rnd, responses, forms):
        reason = "answers differ from the reviewed ones"
    if not reason:
        return None
    logger.warning("operation %s round %s: Send refused, nothing sent (%s)", op.id, rnd.number, reason)
    return REVIEW_CHANGED_MESSAGE if reason == "answers differ from the reviewed ones" else REVIEW_INVALID_MESSAGE


def _shown_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _readable(spec: Any, value: Any, labels: dict[str, Any]) -> dict[str, Any]:
    """How one sent value reads on the review: ``{"text": ...}`` (yes/no, a number as typed -- an
    integral float without ``.0`` --, a chosen option's label, a date in the viewer's language, the
    text itself; ``""`` is said as empty by the template) or ``{"items": [...]}`` (a multi-select's
    chosen options' labels). Never raw JSON nor a Python repr, except for a value of a type its
    field does not have (only a server's default can be one: the gate checks the answer), shown as
    JSON."""
    if spec.kind in ("choice", "multi"):
        if spec.kind == "multi" and isinstance(value, list):
            return {"items": [labels.get(json.dumps(v), _shown_value(v)) for v in value]}
        if spec.kind == "choice" and json.dumps(value) in labels:
            return {"text": labels[json.dumps(value)]}
    if isinstance(value, bool):
        return {"text": gettext("Yes") if value else gettext("No")}
    if isinstance(value, int | float) and spec.kind in ("integer", "number"):
        return {"text": fieldhints.number_text(value)}
    if isinstance(value, str):
        if spec.constraints.get("format") == "date":
            try:
                day = datetime.date.fromisoformat(value)
            except ValueError:
                return {"text": value}
            return {"text": date_format(day, "DATE_FORMAT"), "iso": value}
        return {"text": value}
    return {"text": _shown_value(value)}


def _form_rows(form: Any, content: dict[str, Any]) -> list[dict[str, Any]]:
    """Field label -> the value as it will be sent, read as a person reads it (:func:`_readable`;
    server defaults filled as the gate fills them). Labels and option labels as the card showed
    them (bounded, :class:`~mrtrweb.text.results.ShownBudget`); a value longer than ``MAX_SHOWN_CHARS``
    is shown cut, saying so (it is sent whole)."""
    rows = []
    defaults = getattr(form.checked, "defaults", {}) or {}
    shown_labels = getattr(form, "shown_labels", {})
    shown_options = getattr(form, "shown_options", {})
    for spec in form.checked.fields:
        row: dict[str, Any] = {"name": results.shown_text(spec.name, results.MAX_LABEL_CHARS),
                               "label": shown_labels.get(spec.name, spec.title), "kind": spec.kind,
                               "default": False, "omitted": False, "text": None, "items": None}
        if spec.name in content:
            value = content[spec.name]
        elif spec.name in defaults:
            value, row["default"] = defaults[spec.name], True
        else:
            row["omitted"] = True
            rows.append(row)
            continue
        cut = shown_options.get(spec.name, {})
        labels = {json.dumps(o.value): cut.get(option_key(o.value), o.label) for o in spec.options}
        readable = _readable(spec, value, labels)
        if "items" in readable:
            row["items"] = [results.shown_text(item) for item in readable["items"]]
        else:
            row["text"] = results.shown_text(readable["text"])
            row["iso"] = readable.get("iso", "")
        rows.append(row)
    return rows


def _sent_json(form: Any, content: dict[str, Any]) -> str:
    """The answer's ``content`` exactly as the retry carries it (the gate fills absent defaults
    after the given fields), as indented JSON; cut at ``MAX_SHOWN_CHARS``, saying so."""
    filled = dict(content)
    for name, default in (getattr(form.checked, "defaults", {}) or {}).items():
        filled.setdefault(name, default)
    return results.shown_text(json.dumps(filled, ensure_ascii=False, indent=2))


def _review_context(op: Operation, rnd: Any, request: HttpRequest, forms: dict[str, Any],
                    responses: dict[str, Any], token: str) -> dict[str, Any]:
    items = []
    messages = results.shown_messages(rnd.requests)  # as the card showed them
    for key, view in rnd.requests.items():
        item: dict[str, Any] = {"key": key, "kind": view.kind, "message": messages[key]}
        response = responses.get(key) or {}
        if view.kind == "form":
            item["rows"] = _form_rows(forms[key], response.get("content") or {})
            item["json"] = _sent_json(forms[key], response.get("content") or {})
        elif view.kind == "url":
            item["url"] = view.url
        elif view.kind == "roots":
            item["roots"] = response.get("roots") or []
        elif view.kind == "sampling":
            content = response.get("content")
            blocks = content if isinstance(content, list) else [content]
            item["reply"] = {"model": str(response.get("model", "")), "role": str(response.get("role", "")),
                             "blocks": [sampling._block_text(b) for b in blocks]}
        items.append(item)
    hidden = [(name, value) for name, values in request.POST.lists() if name.startswith("in-") for value in values]
    return {"token": token, "items": items, "hidden": hidden}


async def _review_response(request: HttpRequest, op: Operation, rnd: Any, forms: dict[str, Any],
                           responses: dict[str, Any], provided: dict[str, Any]) -> HttpResponse:
    """The review of valid answers: nothing is sent; Send or Change follow."""
    token = _review_token(op, rnd, responses, forms, provided)
    review = _review_context(op, rnd, request, forms, responses, token)
    logger.info("operation %s round %s: answers reviewed", op.id, rnd.number)
    return await _panel_response(request, op, review=review, status=200)
