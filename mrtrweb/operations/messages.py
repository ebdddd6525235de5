"""What an operation's person reads, and the product's own codes (besides the gate's,
:mod:`mrtrweb.gate.codes`): the failure and deny messages, :class:`OperationRefused` (an operation
or answer refused before anything was sent; its HTTP status), and the server's own error text as a
page or the headless client shows it (:func:`failure_message`, bounded and made visible).
"""

from __future__ import annotations

import unicodedata
from typing import Any, Final

from django.utils.translation import gettext_noop

from ..text import stored_text
from ..mcp import McpCallError

#: product error codes (besides the gate's): shown to the person and recorded
STORE_UNAVAILABLE = "binding_store_unavailable"
AUDIT_UNAVAILABLE = "audit_unavailable"
INVALID_RESULT = "invalid_result"
LIMIT_REACHED = "limit_reached"
#: an answer consumed and audited while the database went away: this worker sends it once it is back
ANSWER_PENDING = "answer_pending"
#: a new operation refused because this worker is draining (mrtrweb.runtime.drain): HTTP 503, nothing sent
WORKER_DRAINING = "worker_draining"
#: deny reason: the authorization identity differs from the one the original request went out with
AUTHORIZATION_CHANGED = "authorization_changed"
#: a call that stopped on authorization (issue 13): 401, 403 insufficient_scope, credentials refused
AUTHORIZATION_CODES = frozenset({"authorization_required", "insufficient_scope", "authorization_failed"})

#: a URL-required error (-32042, :mod:`.url_required`): ``code`` of its round's ``received`` /
#: ``submitted`` rows; the failure code of a malformed one; the deny reasons of its decline / cancel
URL_REQUIRED = "url_elicitation_required"
INVALID_URL_REQUIRED = "invalid_url_required_error"
URL_DECLINED = "url_declined"
URL_CANCELLED = "url_cancelled"
#: a round's retry (``inputResponses`` / ``requestState``, 2026-07-28 only) not sent: the server now
#: negotiates an older version, where such a retry means nothing (:mod:`.calls`)
PROTOCOL_CHANGED = "protocol_changed"
#: a call's outcome not kept through a database outage (this worker already held
#: ``MAX_HELD_OUTCOMES``, or the database failed again as it was written)
OUTCOME_NOT_KEPT = "outcome_not_kept"
#: the server answered during a database outage and the worker holding that answer died before
#: the database was back (ended by the reaper, :mod:`.reaping`)
HELD_OUTCOME_LOST = "held_outcome_lost"
#: an operation that named a live worker with nothing there following it (:mod:`.untracked`)
UNTRACKED = "untracked"

#: a ``transport_error`` after the server had accepted the request (its response broke off, e.g.
#: the server stopped or restarted during the call): it may have run, and it is not sent again
TRANSPORT_ERROR_REACHED: Final = gettext_noop(
    "The connection to the MCP server broke while this request was running there (the server may have "
    "stopped or restarted). The request may or may not have run on the server; it was not sent again. "
    "Check on the server before you run it again.")

MESSAGES = {
    STORE_UNAVAILABLE: gettext_noop("The round store is unavailable right now; nothing was sent. Try again shortly."),
    AUDIT_UNAVAILABLE: gettext_noop("The audit trail could not be written; your answer was not sent."),
    INVALID_RESULT: gettext_noop("The server's result is malformed and was refused."),
    "transport_error": gettext_noop("The MCP server could not be reached."),
    "jsonrpc_error": gettext_noop("The MCP server answered with an error."),
    "timeout": gettext_noop("The MCP server did not answer in time."),
    # issue 26: a 2025-11-25 server answered 404 for the session (restarted); the request is not sent again
    "session_lost": gettext_noop("The MCP server no longer knew its session with mrtrweb (it was probably restarted) "
                    "when this request was out. The request may or may not have run on the server; it was "
                    "not sent again. Check on the server before you run it again; a new session is used "
                    "from now on."),
    # issue 13: 401 / 403 insufficient_scope / the authorization server refused (never transport_error)
    "authorization_required": gettext_noop("The MCP server asks for authorization (HTTP 401): connect your account to it, "
                              "or ask a tenant admin to check its credentials. Nothing more was sent."),
    "insufficient_scope": gettext_noop("The MCP server needs permissions your connection does not grant (HTTP 403, "
                          "insufficient_scope): connect again to grant them. Nothing more was sent."),
    "authorization_failed": gettext_noop("The credentials were refused (by the MCP server, HTTP 403, or by its authorization "
                            "server). Nothing more was sent."),
    "inactive_mrtr_round": gettext_noop("This round is no longer open: it was already answered, expired or ended."),
    "mrtr_round_limit_exceeded": gettext_noop("The server asked for more rounds than allowed; the operation was stopped."),
    ANSWER_PENDING: gettext_noop("Your answer was recorded, but the database became unreachable before it could go out. "
                    "It goes out by itself as soon as the database is back; do not answer again."),
    "worker_lost": gettext_noop("The worker handling this call stopped before the server answered. Nothing more will be "
                   "sent for it; you may run it again."),
    # mrtrweb.runtime.drain: a graceful stop (a deploy, a restart) that could not wait for the call
    "worker_stopped": gettext_noop("The worker handling this call was restarted (a deploy or a restart) before the server "
                      "answered. Nothing more will be sent for it; you may run it again."),
    WORKER_DRAINING: gettext_noop("This worker is restarting; nothing was sent; try again."),
    PROTOCOL_CHANGED: gettext_noop("The server no longer speaks protocol version 2026-07-28, the version it asked this round "
                      "in: it now answers only an older version, where a round cannot be answered. Your "
                      "answers were not sent; you may run it again."),
    OUTCOME_NOT_KEPT: gettext_noop("The database became unreachable while this call was handled, and its outcome could "
                      "not be kept. Nothing more will be sent for it; you may run it again."),
    HELD_OUTCOME_LOST: gettext_noop("The server answered while the database was unreachable, and the worker holding its "
                       "answer stopped before the database was back. Nothing more will be sent for it; you may "
                       "run it again."),
    UNTRACKED: gettext_noop("Nothing was following this call any more (found by a consistency check). Nothing more "
               "will be sent for it; you may run it again."),
    INVALID_URL_REQUIRED: gettext_noop("The server said a page must be opened first (JSON-RPC error -32042), but its list of "
                          "pages is malformed; nothing was opened and nothing more was sent."),
}


#: at most this many characters of a server's own error message are shown to the person
SERVER_ERROR_SHOWN_CHARS: Final = 300


def server_error_text(text: Any) -> str:
    """A server's JSON-RPC error message made fit to show: control and format characters (bidi
    overrides, zero-width, newlines) become spaces, whitespace is collapsed, and it is cut to
    :data:`SERVER_ERROR_SHOWN_CHARS` characters (with "…"). Not HTML-escaped (templates do that).
    Returns ``""`` for a non-string or blank message."""
    if not isinstance(text, str):
        return ""
    cleaned = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    cleaned = " ".join(cleaned.split())
    if len(cleaned) > SERVER_ERROR_SHOWN_CHARS:
        cleaned = cleaned[: SERVER_ERROR_SHOWN_CHARS - 1].rstrip() + "…"
    return cleaned


def failure_message(exc: McpCallError) -> str:
    """What the person reads when a call failed: the stable message of ``exc.code`` and, for a
    JSON-RPC error, the server's own code and message (:func:`server_error_text`), for the
    :data:`AUTHORIZATION_CODES` the ``error`` and ``error_description`` of its ``WWW-Authenticate``
    challenge (cleaned the same way; never a token); for a ``transport_error`` the server had
    accepted (``reached``: its answer broke off) :data:`TRANSPORT_ERROR_REACHED`; an error's own ``shown_message`` (the
    product's text, e.g. client credentials without a configured issuer) as it is. Stored on the
    operation and shown escaped; never logged or written to the audit trail (it is server text
    and may echo what was sent)."""
    own = getattr(exc, "shown_message", None)  # the product's own words (no request was sent)
    if isinstance(own, str) and own:
        return own
    message = TRANSPORT_ERROR_REACHED if exc.code == "transport_error" and getattr(exc, "reached", False) \
        else message_for(exc.code)
    said = server_error_text(exc.rpc_message) if exc.code == "jsonrpc_error" else ""
    if said:
        if isinstance(exc.rpc_code, int):
            message = stored_text.JSONRPC_SAID % {"message": message, "code": exc.rpc_code, "said": said}
        else:
            message = stored_text.JSONRPC_SAID_NO_CODE % {"message": message, "said": said}
    elif exc.code in AUTHORIZATION_CODES:
        # the server's WWW-Authenticate error / error_description (or the authorization server's), cleaned
        challenge = getattr(exc, "challenge", None) or {}
        said = server_error_text(": ".join(str(challenge[k]) for k in ("error", "error_description")
                                           if isinstance(challenge.get(k), str) and challenge[k]))
        if said:
            message = stored_text.CHALLENGE_SAID % {"message": message, "said": said}
    return message


def message_for(code: str) -> str:
    """The stored English message of ``code`` (a page shows it translated: :mod:`mrtrweb.text.stored_text`)."""
    return MESSAGES.get(code) or stored_text.GATE_REFUSED % {"code": code}


#: refusals that a service of ours being down caused (the binding store, the audit trail): the
#: only ones answered "503 Service Unavailable"; every other refusal of an answer means this
#: round can no longer be answered (denied, ended, its worker gone): 409 Conflict
UNAVAILABLE_CODES = frozenset({STORE_UNAVAILABLE, AUDIT_UNAVAILABLE, WORKER_DRAINING, ANSWER_PENDING})


class OperationRefused(Exception):
    """An operation or an answer was refused before anything was sent; ``status`` is the HTTP
    status of an answer refused so (503 for :data:`UNAVAILABLE_CODES`, else 409)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = 503 if code in UNAVAILABLE_CODES else 409


#: reasons of a ``denied`` outcome (issue "audit trail", deny conditions)
DENY_MESSAGES = {
    "missing_consent_receipt": gettext_noop("No record shows that this round was displayed to you, so no answer is sent for it."),
    "request_state_replayed": gettext_noop("The server sent again a requestState this operation had already sent back in an "
                              "earlier round; the operation was stopped and nothing was sent."),
    "server_config_changed": gettext_noop("The server's configuration changed after it asked (its name, address, or what it "
                             "may ask for, such as roots or sampling): this round can no longer be answered, and "
                             "your answer was not sent."),
    "timeout": gettext_noop("This round expired before the answer arrived; nothing was sent."),
    "cancelled": gettext_noop("You stopped this operation; nothing was sent for its open round."),
    AUDIT_UNAVAILABLE: gettext_noop("The audit trail could not be written or read back; your answer was not sent."),
    "deprecated_request_refused": gettext_noop("You refused the server's sampling or roots request; the operation ended and "
                                  "nothing was sent to the server."),
    "legacy_handover_failed": gettext_noop("Your answer was accepted but could not be handed to the worker holding the "
                              "server's call; the server was told cancel."),
    "access_revoked": gettext_noop("Your access to this server or organisation ended; nothing more was sent for this "
                      "operation."),
    URL_DECLINED: gettext_noop("You declined to open the page the server asked for; the request was not sent again."),
    URL_CANCELLED: gettext_noop("You cancelled at the page the server asked you to open; the request was not sent again."),
    AUTHORIZATION_CHANGED: gettext_noop("The authorization this operation started with changed before its answer could go "
                           "out (you disconnected from the server or connected another account, or its "
                           "credentials were replaced): nothing was sent. You may run it again."),
}


#: who stops an operation (:func:`stop_operation`), and what the operation's page then says
STOPPED_BY: Final = {
    "person": gettext_noop("You stopped this operation; the call was cancelled at the server."),
    "headless_timeout": gettext_noop("The headless client's time limit passed; the call was cancelled at the server."),
    "app_timeout": gettext_noop("The time limit of an app's call passed; the call was cancelled at the server."),
}
#: the same, when the operation was stopped while a round waited for its answer
STOPPED_BY_AT_ROUND: Final = {
    "person": DENY_MESSAGES["cancelled"],
    "headless_timeout": gettext_noop("The headless client's time limit passed; nothing was sent for its open round."),
    "app_timeout": gettext_noop("The time limit of an app's call passed; nothing was sent for its open round."),
}


#: the 503 page of a Stop the worker driving the call cannot be told about (the cache is down)
STOP_UNDELIVERED: Final = (gettext_noop("The stop could not be passed on to the worker running this call: a service it needs is "
                           "unreachable right now. The call goes on; please try Stop again in a moment."))


#: the code of a ``received`` row whose ``requestState`` another operation of the tenant also
#: received: legal (the state is opaque, a server may mint it deterministically), so it is recorded
#: for the tenant's admins (history, ``mrtr_reconcile``) and never denied
STATE_REUSED: Final = "request_state_reused"
STATE_REUSED_REASON: Final = "the same requestState was received by another operation of this tenant (not a replay)"


#: ``code`` of the ``received``/``submitted`` events of a legacy round
LEGACY = "legacy_server_request"
#: the input request key of a legacy round, per method
LEGACY_KEYS = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}


class AnswerPending(OperationRefused):
    """An answer consumed and audited while the database went away (:data:`ANSWER_PENDING`): the
    retry was built and is kept by this worker, to be sent once the database is back
    (:func:`mrtrweb.operations.calls._send_when_back`). ``retry`` is the :class:`~mrtrweb.gate.Retry`,
    ``fields`` the row's move to make before it goes out."""

    def __init__(self, retry: Any, fields: dict[str, Any]) -> None:
        super().__init__(ANSWER_PENDING, message_for(ANSWER_PENDING))
        self.retry = retry
        self.fields = fields
