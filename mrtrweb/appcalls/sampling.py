"""An app's ``sampling/createMessage`` (issue 31 item 4, issue 32 item 5; ext-apps: the host may
offer the view sampling, ``hostCapabilities.sampling``): decided by the person on a host-rendered
card outside the frame **before** anything reaches the tenant's model, drafted by the model only if
the person asks for it, and answered only on the person's Send.

Offered (:func:`offered`) where a server's own ``sampling/createMessage`` may be drafted by the
model: the tenant has a model now (:func:`mrtrweb.chat.choice.current`) **and** a tenant admin
allowed sampling for the app's server (``McpServer.allow_sampling``, the same switch as the
server's own requests: its app is the server's code, and may not use the tenant's model where the
server may not). On any page that hosts the app (a person's call or one the model proposed): the
reply goes back to the app, not into a conversation. Elsewhere: ``not_offered`` (JSON-RPC
``-32601``), nothing asked.

* :func:`request` -- the app asked: the rate (``APPS_CALLS_PER_SECOND``, shared with its calls),
  one sampling of the app waiting at a time (``busy``), the request's bounds (at most
  :data:`MAX_MESSAGES` messages, :data:`MAX_REQUEST_BYTES` of JSON); the request is held for the
  person under a random token for ``APPS_CALL_TIMEOUT_S`` (:class:`Asked`). **No model is asked.**
* :func:`decide` -- the person's decision on the request (stage ``asked``): **Draft with the model**
  (:func:`draft`), **Write the reply myself** (``write``: the person's text, ``model`` ``"human"``,
  as :class:`mrtrweb.consent.sampling.PersonWritesReply` answers a server; no model is asked) or
  **Refuse** (the app gets a JSON-RPC error, ``declined``); on a draft (stage ``drafted``): **Send**
  (the draft as it is, or as the person edited it: then sent as the person's, ``model`` ``"human"``,
  the model not asked again) or **Refuse**. Each token is taken once.
* :func:`draft` -- only now the request goes to the model, through the **server's drafting path**:
  :class:`mrtrweb.chat.sampling.ModelDraftsReply` through :func:`mrtrweb.consent.sampling.provide`
  (the request's system prompt and messages' text only, bounded by ``MODEL_CONTEXT_CHARS``, no
  tools), the draft checked as the gate checks a server's (``valid_create_message_result``), held
  under a new token for another ``APPS_CALL_TIMEOUT_S``. While the model drafts, the app's ``busy``
  slot lives ``APPS_CALL_TIMEOUT_S + MODEL_REPLY_TIMEOUT_S + 1`` seconds (then ``APPS_CALL_TIMEOUT_S
  + 1`` again). A model that fails drafts nothing: the request still waits (``model_failed``), for
  the person to write the reply or refuse.

The app receives the ``CreateMessageResult`` only: never the conversation, a ``requestState``, a
token or an answer. Audit (:func:`_audit`): ``proposed`` (code ``drafted``: the person asked the
model, which drafted), then ``approved`` (sent unchanged), ``edited`` (code ``edited``, ``before``:
the draft's digest; or code ``written``: the person's own reply, no draft) or ``proposal_denied``
(code ``refused``, before or after a draft), with ``method`` ``sampling/createMessage``,
``initiator`` ``app`` and the host's ``initiator_detail`` (plus the provider and model), ``operation_id``
the sampling's own id, ``actions`` digests only (``request``, ``reply``): no text of the request or
the reply.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.utils.translation import gettext_noop

from .. import conf
from ..audit.events import append_config, keyed_digest
from ..chat import choice
from ..chat.sampling import ModelDraftsReply
from ..consent import sampling as consent_sampling
from ..consent.forms import has_lone_surrogate
from ..gate.shapes import valid_create_message_result
from ..models import AuditEvent
from . import rights
from .calls import BAD_REQUEST
from .errors import AppCallRefused
from .host import AppHost, cache

logger = logging.getLogger("mrtrweb.appcalls")

METHOD = "sampling/createMessage"
#: the most messages an app's request may hold (the model is given the last 100 of a server's)
MAX_MESSAGES = 100
#: the largest request an app may send (compact JSON, bytes; as an app call's arguments)
MAX_REQUEST_BYTES = 256 * 1024
#: the longest reply the person may send (characters; as the server's sampling card)
MAX_REPLY_CHARS = 20000

NOT_OFFERED = gettext_noop("not offered: this site has no model to pass it to.")
BUSY = gettext_noop("The app already waits for your decision on a sampling request.")
BAD_SAMPLING = gettext_noop("The app's sampling request is not one this site takes; nothing was drafted.")
MODEL_FAILED = gettext_noop("The organisation's model could not draft a reply; nothing was sent to the app.")
DECLINED = gettext_noop("You refused the app's sampling request; the app was told.")
EXPIRED = gettext_noop("The app's sampling request waited too long for a decision; nothing was sent.")
BAD_REPLY = gettext_noop("The reply must be text of at most 20000 characters.")
#: a decision that does not fit the card (a Send without a draft): the card still waits
BAD_DECISION = BAD_REQUEST
_PENDING = "mrtrweb-app-sampling:"
_BUSY = "mrtrweb-app-sampling-busy:"


@dataclass(frozen=True)
class Asked:
    """An app's request waiting for the person: ``token`` (the cache key's tail), ``view`` (what the
    card shows of the request: :func:`mrtrweb.consent.sampling.sampling_view`)."""

    token: str
    view: dict[str, Any]


@dataclass(frozen=True)
class Draft:
    """A drafted reply waiting for the person: ``token`` (a new one), ``view`` (as :class:`Asked`),
    ``text`` (the draft, model text: escape it), ``model`` (its name)."""

    token: str
    view: dict[str, Any]
    text: str
    model: str


def offered(server: Any, tenant_id: Any) -> bool:
    """Sync: whether an app of ``server`` (in tenant ``tenant_id``) is offered sampling (see the module doc)."""
    return bool(getattr(server, "allow_sampling", False)) and choice.current(tenant_id) is not None


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False,
                                                 default=str).encode("utf-8", "surrogatepass")).hexdigest()


def _checked(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict) or not isinstance(params.get("messages"), list) \
            or not 1 <= len(params["messages"]) <= MAX_MESSAGES:
        raise AppCallRefused("bad_request", BAD_SAMPLING)
    try:
        size = len(json.dumps(params, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):
        raise AppCallRefused("bad_request", BAD_SAMPLING) from None
    if size > MAX_REQUEST_BYTES or has_lone_surrogate(params):
        logger.info("app sampling refused: %d bytes (at most %d), or not UTF-8", size, MAX_REQUEST_BYTES)
        raise AppCallRefused("bad_request", BAD_SAMPLING, 413 if size > MAX_REQUEST_BYTES else 400)
    return params


def _audit(event: str, host: AppHost, user_id: Any, sampling_id: str, *, code: str, actions: dict[str, str],
           model: str) -> None:
    """Sync: one event of the app's sampling in the tenant's chain (see the module doc)."""
    row = choice.current(host.op.tenant_id)
    append_config({
        "tenant_id": host.op.tenant_id, "operation_id": sampling_id, "event": event, "method": METHOD,
        "server_id": str(host.server.pk), "server_origin": host.server.origin, "name": host.tool[:500],
        "user_digest": keyed_digest(f"user:{user_id}"), "code": code[:64], "actions": actions,
        "initiator": "app", "initiator_detail": {**host.detail(), "sampling": sampling_id,
                                                 "provider": (row.provider if row else "")[:200], "model": model[:200]}})


async def _audited(*args: Any, **kwargs: Any) -> None:
    try:
        await sync_to_async(_audit)(*args, **kwargs)
    except Exception:  # noqa: BLE001 -- AuditUnavailable or the database: nothing goes to the app
        logger.warning("app of operation %s: its sampling could not be audited", args[1].op.pk)
        raise AppCallRefused("audit_unavailable", MODEL_FAILED, 503) from None


def _timeout() -> float:
    return float(conf.get("APPS_CALL_TIMEOUT_S"))


def _busy_for(host: AppHost, sampling_id: str, ttl: int) -> None:
    """The app's slot, still this sampling's, lives ``ttl`` seconds from now."""
    store = cache()
    if store.get(_BUSY + str(host.op.pk)) == sampling_id:
        store.touch(_BUSY + str(host.op.pk), ttl)


def _release(host: AppHost, sampling_id: str) -> None:
    store = cache()
    if store.get(_BUSY + str(host.op.pk)) == sampling_id:
        store.delete(_BUSY + str(host.op.pk))


def _hold(held: dict[str, Any], token: str) -> None:
    cache().set(_PENDING + token, held, int(_timeout()) + 1)


async def request(user: Any, host: AppHost, params: Any) -> Asked:
    """The app's ``sampling/createMessage`` with ``params``: held for the person, nothing asked of the model.

    Raises:
        AppCallRefused: ``not_offered`` (JSON-RPC -32601), ``bad_request``, ``rate_limited``, ``busy``
            (409: one waits already).
    """
    if not await sync_to_async(offered)(host.server, host.op.tenant_id):
        raise AppCallRefused("not_offered", NOT_OFFERED, 404)
    params = _checked(params)
    await sync_to_async(rights.take_slot)(host.op.pk)
    sampling_id = str(uuid.uuid4())
    if not await sync_to_async(cache().add)(_BUSY + str(host.op.pk), sampling_id, int(_timeout()) + 1):
        raise AppCallRefused("busy", BUSY, 409)
    token = secrets.token_urlsafe(24)
    held = {"stage": "asked", "user": user.pk, "host": str(host.op.pk), "id": sampling_id, "params": params,
            "asked_at": time.time()}
    await sync_to_async(_hold)(held, token)
    logger.info("app of operation %s: a sampling request waits for the person", host.op.pk)
    return Asked(token=token, view=consent_sampling.sampling_view(params))


def _peek(token: str) -> dict[str, Any] | None:
    held = cache().get(_PENDING + token)
    return held if isinstance(held, dict) else None


def _take(token: str) -> bool:
    """Whether this call took the token's entry (False: unknown, expired, or a concurrent decision took it)."""
    return bool(cache().delete(_PENDING + token))


async def _taken(user: Any, host: AppHost, token: Any, stages: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """The held entry of ``token`` (in one of ``stages``), taken: ``expired`` (410) otherwise."""
    token = str(token)[:100]
    held = await sync_to_async(_peek)(token)
    if held is None or held.get("user") != user.pk or held.get("host") != str(host.op.pk) \
            or time.time() > held["asked_at"] + _timeout():
        raise AppCallRefused("expired", EXPIRED, 410)
    if held.get("stage") not in stages:
        raise AppCallRefused("bad_request", BAD_DECISION, 400)  # nothing taken: the card still waits
    if not await sync_to_async(_take)(token):
        raise AppCallRefused("expired", EXPIRED, 410)
    return token, held


async def _still_offered(host: AppHost, held: dict[str, Any]) -> None:
    if not await sync_to_async(offered)(host.server, host.op.tenant_id):  # withdrawn since the app asked
        await sync_to_async(_release)(host, held["id"])
        logger.info("app of operation %s: sampling no longer offered, its request dropped", host.op.pk)
        raise AppCallRefused("not_offered", NOT_OFFERED, 404)


async def draft(user: Any, host: AppHost, token: Any) -> Draft:
    """The person's **Draft with the model** on a waiting request: only now the model is asked.

    Raises:
        AppCallRefused: ``expired`` (410), ``bad_request`` (400: a draft already), ``not_offered``
            (the model or the allowance is gone: the request dropped), ``model_failed`` (502: the
            request still waits, under the same token), ``audit_unavailable`` (503: the draft dropped,
            the request still waits).
    """
    token, held = await _taken(user, host, token, ("asked",))
    await _still_offered(host, held)
    drafting = int(_timeout() + float(conf.get("MODEL_REPLY_TIMEOUT_S"))) + 1
    await sync_to_async(_busy_for)(host, held["id"], drafting)
    try:
        try:
            result = await consent_sampling.provide(ModelDraftsReply(), held["params"], user=user,
                                                    operation=host.op, form_data={})
        except Exception as exc:  # noqa: BLE001 -- a provider failure drafts nothing; the request waits
            logger.warning("app of operation %s: the model could not draft its sampling (%s)", host.op.pk,
                           getattr(exc, "code", exc.__class__.__name__))
            raise AppCallRefused("model_failed", MODEL_FAILED, 502) from None
        if not valid_create_message_result(result):
            logger.warning("app of operation %s: the model's draft is not a CreateMessageResult", host.op.pk)
            raise AppCallRefused("model_failed", MODEL_FAILED, 502)
        text = result["content"]["text"]
        await _audited(AuditEvent.Event.PROPOSED, host, user.pk, held["id"], code="drafted",
                       actions={"request": _digest(held["params"]), "reply": _digest(text)}, model=result["model"])
    except AppCallRefused:
        if time.time() <= held["asked_at"] + _timeout():  # the request still waits, as it was
            await sync_to_async(cache().set)(_PENDING + token, held,
                                             max(1, int(held["asked_at"] + _timeout() - time.time()) + 1))
        await sync_to_async(_busy_for)(host, held["id"], int(_timeout()) + 1)
        raise
    fresh = secrets.token_urlsafe(24)
    await sync_to_async(_hold)({**held, "stage": "drafted", "draft": result, "asked_at": time.time()}, fresh)
    await sync_to_async(_busy_for)(host, held["id"], int(_timeout()) + 1)
    logger.info("app of operation %s: a sampling draft waits for the person (%d characters)", host.op.pk, len(text))
    return Draft(token=fresh, view=consent_sampling.sampling_view(held["params"]), text=text, model=result["model"])


def _bad_reply(reply: Any) -> bool:
    return not isinstance(reply, str) or not reply.strip() or len(reply) > MAX_REPLY_CHARS \
        or has_lone_surrogate(reply)


async def decide(user: Any, host: AppHost, token: Any, *, decision: str, reply: Any) -> dict[str, Any]:
    """The person's ``decision`` on a waiting request or draft: the ``CreateMessageResult`` the app
    receives. ``write`` (a request): ``reply``, the person's, ``model`` ``"human"``, no model asked;
    ``send`` (a draft): ``reply`` equal to the draft, the model's, otherwise the person's edit
    (``model`` ``"human"``); ``refuse`` (either).

    Raises:
        AppCallRefused: ``bad_reply`` (400, the card still waits), ``bad_request`` (400: the decision
            does not fit the stage; the card still waits), ``expired`` (410: unknown, used, past
            ``APPS_CALL_TIMEOUT_S``, another person's or app's), ``not_offered`` (the model or the
            allowance is gone: nothing sent), ``declined`` (409), ``audit_unavailable`` (503: nothing
            goes to the app).
    """
    if decision in ("send", "write") and _bad_reply(reply):
        raise AppCallRefused("bad_reply", BAD_REPLY, 400)
    stages = {"write": ("asked",), "send": ("drafted",), "refuse": ("asked", "drafted")}.get(decision)
    if stages is None:
        raise AppCallRefused("bad_request", BAD_DECISION, 400)
    token, held = await _taken(user, host, token, stages)
    await sync_to_async(_release)(host, held["id"])
    await _still_offered(host, held)
    drafted = held.get("draft")
    model = drafted["model"] if drafted else ""
    if decision == "refuse":
        actions = {"reply": _digest(drafted["content"]["text"])} if drafted else {"request": _digest(held["params"])}
        await _audited(AuditEvent.Event.PROPOSAL_DENIED, host, user.pk, held["id"], code="refused",
                       actions=actions, model=model)
        logger.info("app of operation %s: the person refused its sampling", host.op.pk)
        raise AppCallRefused("declined", DECLINED, 409)
    reply = reply.replace("\r\n", "\n")  # a form's textarea sends CR LF line breaks
    if drafted and reply == drafted["content"]["text"].replace("\r\n", "\n"):
        result, event, code = drafted, AuditEvent.Event.APPROVED, "approved"
        actions = {"reply": _digest(drafted["content"]["text"])}
    else:  # the person's own reply, as the server's card sends one: no model is asked
        result = consent_sampling.PersonWritesReply().provide(held["params"], user=user, operation=host.op,
                                                              form_data={"reply": reply})
        event, code = AuditEvent.Event.EDITED, "edited" if drafted else "written"
        actions = {"reply": _digest(reply), **({"before": _digest(drafted["content"]["text"])} if drafted else {})}
    await _audited(event, host, user.pk, held["id"], code=code, actions=actions, model=model or "human")
    logger.info("app of operation %s: the person sent its sampling reply (%s)", host.op.pk, code)
    return result
