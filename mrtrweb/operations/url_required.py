"""URL-required errors (MCP 2025-11-25, ``client/elicitation``, "URL Elicitation Required
Error"): a server answers a request with the JSON-RPC error ``-32042``
(``URLElicitationRequiredError``) whose ``error.data.elicitations`` lists URL-mode elicitation
requests the person must complete before the request can succeed.

Such an error becomes a URL-mode round of the operation, judged by the gate like any other: the
elicitations are turned into the equivalent ``input_required`` result (one input request
``url-1``, ``url-2``, ... per elicitation, ``method`` ``elicitation/create``, ``params`` the
elicitation as sent) and passed to ``Gate.receive`` against the request that got the error, so the
gate's URL checks apply (``https`` only, no user info, IDN warnings: :mod:`mrtrweb.gate.urls`).
The round is audited ``received`` with code :data:`URL_REQUIRED`, shown on the same card (the URL
is opened on the person's click only), answered with the same consent receipt, review and
``submitted`` event. Then, instead of an MRTR retry carrying ``inputResponses``:

- every elicitation answered ``accept`` (the person says they are done): the original request is
  sent again, once, under the new JSON-RPC id the gate gave the retry, with the operation's params
  (:func:`resend_params`: the request's params as first sent; an earlier MRTR round's answers and
  ``requestState`` are never sent a second time);
- any ``decline`` or ``cancel``: the operation ends ``denied`` (reason ``url_declined`` or
  ``url_cancelled``) and nothing is sent (the server awaits no answer to a ``-32042``).

A malformed ``error.data`` fails the operation with :data:`INVALID_URL_REQUIRED` (its reason, which
check failed and never a value, is logged and written on the ``failed`` audit row).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from ..text import stored_text
from ..gate import Retry
from ..mcp import McpCallError
from ..models import Operation
from .messages import DENY_MESSAGES, INVALID_URL_REQUIRED, message_for, URL_CANCELLED, URL_DECLINED, URL_REQUIRED
from .rounds import _handle_result
from .runtime import finish_operation

logger = logging.getLogger("mrtrweb.operations")

#: the JSON-RPC error code of ``URLElicitationRequiredError`` (2025-11-25; reserved, never reused, at 2026-07-28)
URL_ELICITATION_REQUIRED: Final = -32042
#: at most this many elicitations in one error (the gate's cap of input requests per round, 64, applies too)
MAX_URL_ELICITATIONS: Final = 16


class MalformedUrlRequired(ValueError):
    """``error.data`` of a ``-32042`` is not ``{"elicitations": [URL-mode elicitation, ...]}``;
    ``reason`` names the failed check (no value from the server)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_url_required(exc: McpCallError) -> bool:
    """Whether a failed call is a URL-required error (a JSON-RPC error ``-32042`` the server sent)."""
    return exc.code == "jsonrpc_error" and exc.rpc_code == URL_ELICITATION_REQUIRED


def as_input_required(data: Any) -> dict[str, Any]:
    """The ``input_required`` result equivalent to a ``-32042`` error's ``data``.

    Args:
        data: ``error.data`` as received: ``{"elicitations": [{"mode": "url", "elicitationId": str,
            "url": str, "message": str, ...}, ...]}`` (2025-11-25 ``URLElicitationRequiredError``).

    Returns:
        ``{"resultType": "input_required", "inputRequests": {"url-1": {"method": "elicitation/create",
        "params": <the elicitation as sent>}, ...}}``, keys in the order of the list. The URL itself
        and every other check are the gate's (``Gate.receive``).

    Raises:
        MalformedUrlRequired: ``data`` is not an object, ``elicitations`` is not a non-empty list of
            at most :data:`MAX_URL_ELICITATIONS` objects, or one is not URL mode (``mode`` exactly
            ``"url"``) with a non-empty string ``elicitationId``, a string ``url`` and a string
            ``message``.
    """
    if not isinstance(data, dict):
        raise MalformedUrlRequired("error.data is not an object")
    elicitations = data.get("elicitations")
    if not isinstance(elicitations, list) or not elicitations:
        raise MalformedUrlRequired("error.data.elicitations is not a non-empty list")
    if len(elicitations) > MAX_URL_ELICITATIONS:
        raise MalformedUrlRequired(f"{len(elicitations)} elicitations, over the cap of {MAX_URL_ELICITATIONS}")
    requests: dict[str, Any] = {}
    for n, item in enumerate(elicitations, start=1):
        if not isinstance(item, dict):
            raise MalformedUrlRequired(f"elicitation {n} is not an object")
        if item.get("mode") != "url":
            raise MalformedUrlRequired(f"elicitation {n} is not URL mode (mode must be \"url\")")
        if not isinstance(item.get("elicitationId"), str) or not item["elicitationId"]:
            raise MalformedUrlRequired(f"elicitation {n} has no elicitationId string")
        for key in ("url", "message"):
            if not isinstance(item.get(key), str):
                raise MalformedUrlRequired(f"elicitation {n} has no {key} string")
        requests[f"url-{n}"] = {"method": "elicitation/create", "params": item}
    return {"resultType": "input_required", "inputRequests": requests}


async def url_required_round(op: Operation, request_id: str, exc: McpCallError) -> None:
    """Turn a ``-32042`` answer to ``request_id`` into a URL-mode round of ``op`` (see the module
    docstring): judged by the gate, audited ``received`` (:data:`URL_REQUIRED`), the card pushed;
    or the operation fails (:data:`INVALID_URL_REQUIRED`, or the gate's refusal code)."""
    try:
        result = as_input_required(exc.rpc_data)
    except MalformedUrlRequired as bad:
        logger.info("operation %s: URL-required error refused: %s", op.id, bad.reason)
        await finish_operation(op, Operation.Status.FAILED, code=INVALID_URL_REQUIRED, reason=bad.reason[:200],
                      message=stored_text.WITH_REASON % {"message": message_for(INVALID_URL_REQUIRED),
                                                          "reason": bad.reason})
        return
    logger.info("operation %s: the server requires %s URL elicitation(s) first (-32042)", op.id,
                len(result["inputRequests"]))
    await _handle_result(op, request_id, result, received_code=URL_REQUIRED)


def is_url_required_round(op_id: Any, round_number: int, rnd: Any = None) -> bool:
    """Whether the operation's round ``round_number`` was made from a ``-32042`` error (sync; one
    query). With ``rnd`` (that round, :class:`mrtrweb.gate.Round`): False without a query when it
    holds a request that is not URL mode, or a ``requestState`` -- a round made from a ``-32042``
    error has neither (:func:`as_input_required`); the round's ``received`` event says the rest."""
    from ..models import AuditEvent

    if rnd is not None and (rnd.has_state or not rnd.requests
                            or any(view.kind != "url" for view in rnd.requests.values())):
        return False
    return AuditEvent.objects.filter(operation_id=op_id, round_number=round_number, event="received",
                                     code=URL_REQUIRED).exists()


def resend_params(retry: Retry) -> dict[str, Any]:
    """The params the original request is sent again with: the retry's params (the operation's
    params as the gate bound them) without this round's ``inputResponses`` (and any
    ``requestState``): the server asked for no answer, only that the request come again."""
    return {k: v for k, v in retry.params.items() if k not in ("inputResponses", "requestState")}


def all_accepted(retry: Retry) -> bool:
    """Whether the person said "done" (``accept``) to every elicitation of the round."""
    return bool(retry.actions) and all(action == "accept" for action in retry.actions.values())


async def end_unaccepted(op: Operation, retry: Retry) -> None:
    """A URL-required round answered ``decline`` or ``cancel`` (any one of its elicitations): the
    operation ends ``denied`` (reason ``url_declined``, or ``url_cancelled`` when one was
    cancelled); nothing is sent to the server."""
    cancelled = any(action == "cancel" for action in retry.actions.values())
    reason = URL_CANCELLED if cancelled else URL_DECLINED
    logger.info("operation %s: URL-required round %s answered %s; the request is not sent again", op.id,
                retry.round_number, "cancel" if cancelled else "decline")
    await finish_operation(op, Operation.Status.DENIED, code="denied", reason=reason, event="denied",
                  message=DENY_MESSAGES[URL_CANCELLED if cancelled else URL_DECLINED])
