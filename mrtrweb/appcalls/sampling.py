"""An app's ``sampling/createMessage`` (issue 31 item 4, issue 32 item 5; ext-apps: the host may
offer the view sampling, ``hostCapabilities.sampling``): drafted by the tenant's model, decided by
the person on a host-rendered card outside the frame, and only then answered.

Offered (:func:`offered`) where a server's own ``sampling/createMessage`` may be drafted by the
model: the tenant has a model now (:func:`mrtrweb.chat.choice.current`) **and** a tenant admin
allowed sampling for the app's server (``McpServer.allow_sampling``, the same switch as the
server's own requests: its app is the server's code, and may not use the tenant's model where the
server may not). On any page that hosts the app (a person's call or one the model proposed): the
reply goes back to the app, not into a conversation. Elsewhere: ``not_offered`` (JSON-RPC
``-32601``), nothing drafted.

* :func:`request` -- the app asked: the rate (``APPS_CALLS_PER_SECOND``, shared with its calls),
  one sampling of the app waiting at a time (``busy``), the request's bounds (at most
  :data:`MAX_MESSAGES` messages, :data:`MAX_REQUEST_BYTES` of JSON); then the **server's drafting
  path**: :class:`mrtrweb.chat.sampling.ModelDraftsReply` through :func:`mrtrweb.consent.sampling.provide`
  (the request's system prompt and messages' text only, bounded by ``MODEL_CONTEXT_CHARS``, no
  tools), the draft checked as the gate checks a server's (``valid_create_message_result``), held
  under a random token for ``APPS_CALL_TIMEOUT_S``;
* :func:`decide` -- the person's Send (the draft as it is, or as they edited it: then sent as the
  person's, ``model`` ``"human"``, exactly as the server's card does with a reply the person
  writes) or Refuse (the app gets a JSON-RPC error, ``declined``). Taken once.

The app receives the ``CreateMessageResult`` only: never the conversation, a ``requestState``, a
token or an answer. Audit (:func:`_audit`): ``proposed`` (the model's draft), then ``approved``,
``edited`` (``before``: the draft's digest) or ``proposal_denied``, with ``method``
``sampling/createMessage``, ``initiator`` ``app`` and the host's ``initiator_detail`` (plus the
provider and model), ``operation_id`` the sampling's own id, ``actions`` digests only
(``request``, ``reply``): no text of the request or the reply.
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
_PENDING = "mrtrweb-app-sampling:"
_BUSY = "mrtrweb-app-sampling-busy:"


@dataclass(frozen=True)
class Draft:
    """A drafted reply waiting for the person: ``token`` (the cache key's tail), ``view`` (what the
    card shows of the request: :func:`mrtrweb.consent.sampling.sampling_view`), ``text`` (the
    draft, model text: escape it), ``model`` (its name)."""

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


def _release(host: AppHost, token: str) -> None:
    store = cache()
    if store.get(_BUSY + str(host.op.pk)) == token:
        store.delete(_BUSY + str(host.op.pk))


async def request(user: Any, host: AppHost, params: Any) -> Draft:
    """The app's ``sampling/createMessage`` with ``params``: the model's draft, held for the person.

    Raises:
        AppCallRefused: ``not_offered`` (JSON-RPC -32601), ``bad_request``, ``rate_limited``, ``busy``
            (409: one waits already), ``model_failed`` (502: the provider failed, nothing held), or
            an audit outage (``audit_unavailable``, 503).
    """
    if not await sync_to_async(offered)(host.server, host.op.tenant_id):
        raise AppCallRefused("not_offered", NOT_OFFERED, 404)
    params = _checked(params)
    await sync_to_async(rights.take_slot)(host.op.pk)
    token = secrets.token_urlsafe(24)
    ttl = int(float(conf.get("APPS_CALL_TIMEOUT_S"))) + 1
    if not await sync_to_async(cache().add)(_BUSY + str(host.op.pk), token, ttl):
        raise AppCallRefused("busy", BUSY, 409)
    sampling_id = str(uuid.uuid4())
    try:
        try:
            draft = await consent_sampling.provide(ModelDraftsReply(), params, user=user, operation=host.op,
                                                   form_data={})
        except Exception as exc:  # noqa: BLE001 -- a provider failure drafts nothing, the app is told
            logger.warning("app of operation %s: the model could not draft its sampling (%s)", host.op.pk,
                           getattr(exc, "code", exc.__class__.__name__))
            raise AppCallRefused("model_failed", MODEL_FAILED, 502) from None
        if not valid_create_message_result(draft):
            logger.warning("app of operation %s: the model's draft is not a CreateMessageResult", host.op.pk)
            raise AppCallRefused("model_failed", MODEL_FAILED, 502)
        text = draft["content"]["text"]
        await _audited(AuditEvent.Event.PROPOSED, host, user.pk, sampling_id, code="drafted",
                       actions={"request": _digest(params), "reply": _digest(text)}, model=draft["model"])
    except AppCallRefused:
        await sync_to_async(_release)(host, token)
        raise
    held = {"user": user.pk, "host": str(host.op.pk), "id": sampling_id, "params": params, "draft": draft,
            "asked_at": time.time()}
    await sync_to_async(cache().set)(_PENDING + token, held, ttl)
    logger.info("app of operation %s: a sampling draft waits for the person (%d characters)", host.op.pk, len(text))
    return Draft(token=token, view=consent_sampling.sampling_view(params), text=text, model=draft["model"])


def _take(token: str) -> dict[str, Any] | None:
    store = cache()
    held = store.get(_PENDING + token)
    if not isinstance(held, dict) or not store.delete(_PENDING + token):
        return None  # unknown, expired, or taken by a concurrent decision
    return held


async def decide(user: Any, host: AppHost, token: str, *, send: bool, reply: Any) -> dict[str, Any]:
    """The person's decision on a draft: the ``CreateMessageResult`` the app receives (``reply``
    equal to the draft: the model's; otherwise the person's edit, ``model`` ``"human"``).

    Raises:
        AppCallRefused: ``bad_reply`` (400, the draft still waits), ``expired`` (410: unknown, used,
            past ``APPS_CALL_TIMEOUT_S``, another person's or app's), ``not_offered`` (the model or the
            allowance is gone since the draft: nothing sent), ``declined`` (409),
            ``audit_unavailable`` (503: nothing goes to the app).
    """
    token = str(token)[:100]
    if send and (not isinstance(reply, str) or not reply.strip() or len(reply) > MAX_REPLY_CHARS
                 or has_lone_surrogate(reply)):
        raise AppCallRefused("bad_reply", BAD_REPLY, 400)
    held = await sync_to_async(_take)(token)
    if held is None or held.get("user") != user.pk or held.get("host") != str(host.op.pk) \
            or time.time() > held["asked_at"] + float(conf.get("APPS_CALL_TIMEOUT_S")):
        raise AppCallRefused("expired", EXPIRED, 410)
    await sync_to_async(_release)(host, token)
    if not await sync_to_async(offered)(host.server, host.op.tenant_id):  # withdrawn since the draft
        logger.info("app of operation %s: sampling no longer offered, its draft dropped", host.op.pk)
        raise AppCallRefused("not_offered", NOT_OFFERED, 404)
    draft = held["draft"]
    drafted = _digest(draft["content"]["text"])
    if not send:
        await _audited(AuditEvent.Event.PROPOSAL_DENIED, host, user.pk, held["id"], code="refused",
                       actions={"reply": drafted}, model=draft["model"])
        logger.info("app of operation %s: the person refused its sampling", host.op.pk)
        raise AppCallRefused("declined", DECLINED, 409)
    reply = reply.replace("\r\n", "\n")  # a form's textarea sends CR LF line breaks
    if reply == draft["content"]["text"].replace("\r\n", "\n"):
        result, event, actions = draft, AuditEvent.Event.APPROVED, {"reply": drafted}
    else:  # the person's own reply, as the server's card sends one (the model is not asked again)
        result = await consent_sampling.provide(ModelDraftsReply(), held["params"], user=user, operation=host.op,
                                                form_data={"reply": reply})
        event, actions = AuditEvent.Event.EDITED, {"reply": _digest(reply), "before": drafted}
    await _audited(event, host, user.pk, held["id"], code=str(event), actions=actions, model=draft["model"])
    logger.info("app of operation %s: the person sent its sampling reply (%s)", host.op.pk, event)
    return result
