"""Rejection codes of the client-side MRTR gate (contract: shared/docs/mrtr-gate.md).

Every refusal of the gate is a :class:`GateRejection` carrying exactly one of the
codes below. The codes are stable identifiers: they appear in audit rows, in the
browser, in ``mrtr_verify`` output, and in the verification cases.
"""

from __future__ import annotations

# Section 1 -- accepting an ``input_required`` result, in check order.
NO_LIVE_REQUEST = "no_live_request"
SERVER_ORIGIN_MISMATCH = "server_origin_mismatch"
INPUT_REQUIRED_NOT_ALLOWED_FOR_METHOD = "input_required_not_allowed_for_method"
INVALID_RESULT_TYPE = "invalid_result_type"
INPUT_REQUIRED_PAYLOAD_EMPTY = "input_required_payload_empty"
INVALID_REQUEST_STATE = "invalid_requestState"
INVALID_NAMED_INPUT_REQUEST = "invalid_named_input_request"
INVALID_FORM_REQUESTED_SCHEMA = "invalid_form_requestedSchema"
UNSAFE_URL_ELICITATION = "unsafe_url_elicitation"
UNKNOWN_ELICITATION_MODE = "unknown_elicitation_mode"
UNAPPROVED_DEPRECATED_CLIENT_REQUEST = "unapproved_deprecated_client_request"
MRTR_ROUND_LIMIT_EXCEEDED = "mrtr_round_limit_exceeded"

ACCEPT_CODES = (
    NO_LIVE_REQUEST,
    SERVER_ORIGIN_MISMATCH,
    INPUT_REQUIRED_NOT_ALLOWED_FOR_METHOD,
    INVALID_RESULT_TYPE,
    INPUT_REQUIRED_PAYLOAD_EMPTY,
    INVALID_REQUEST_STATE,
    INVALID_NAMED_INPUT_REQUEST,
    INVALID_FORM_REQUESTED_SCHEMA,
    UNSAFE_URL_ELICITATION,
    UNKNOWN_ELICITATION_MODE,
    UNAPPROVED_DEPRECATED_CLIENT_REQUEST,
    MRTR_ROUND_LIMIT_EXCEEDED,
)

# Section 2 -- building the retry, in check order.
INACTIVE_MRTR_ROUND = "inactive_mrtr_round"
RETRY_REQUIRES_NEW_JSONRPC_ID = "retry_requires_new_jsonrpc_id"
MRTR_IDENTITY_OR_ARGUMENT_MISMATCH = "mrtr_identity_or_argument_mismatch"
INPUT_RESPONSE_POPULATION_MISMATCH = "input_response_population_mismatch"
INVALID_INPUT_RESPONSE = "invalid_input_response"
NON_ACCEPT_RESPONSE_MUST_NOT_HAVE_CONTENT = "non_accept_response_must_not_have_content"
INPUT_RESPONSE_SCHEMA_MISMATCH = "input_response_schema_mismatch"
URL_ELICITATION_RESPONSE_MUST_NOT_HAVE_CONTENT = "url_elicitation_response_must_not_have_content"
INVALID_DEPRECATED_RESPONSE = "invalid_deprecated_response"

RETRY_CODES = (
    INACTIVE_MRTR_ROUND,
    RETRY_REQUIRES_NEW_JSONRPC_ID,
    MRTR_IDENTITY_OR_ARGUMENT_MISMATCH,
    INPUT_RESPONSE_POPULATION_MISMATCH,
    INVALID_INPUT_RESPONSE,
    NON_ACCEPT_RESPONSE_MUST_NOT_HAVE_CONTENT,
    INPUT_RESPONSE_SCHEMA_MISMATCH,
    URL_ELICITATION_RESPONSE_MUST_NOT_HAVE_CONTENT,
    INVALID_DEPRECATED_RESPONSE,
)

ALL_CODES = ACCEPT_CODES + RETRY_CODES


class GateError(Exception):
    """Base class of every error the gate raises."""


class GateRejection(GateError):
    """The gate refused a result or an answer.

    Attributes:
        code: one of :data:`ALL_CODES`.
        reason: a human-readable explanation that never contains secrets,
            ``requestState`` or answer values (safe to log).
        key: the input-request key the rejection is about, when there is one.
    """

    def __init__(self, code: str, reason: str = "", *, key: str | None = None) -> None:
        if code not in ALL_CODES:  # pragma: no cover - programming error
            raise ValueError(f"unknown gate code {code!r}")
        self.code = code
        self.reason = reason or code
        self.key = key
        super().__init__(f"{code}: {self.reason}")


class BindingConflict(GateError):
    """``register`` was asked to bind a request id that is already live for that user and tenant."""


class StoreUnavailable(GateError):
    """The binding store could not be read or written (fail closed: nothing is sent)."""


class SchemaRefused(ValueError):
    """The ``requestedSchema`` is outside the restricted subset; ``str(exc)`` says why (no values)."""


class ContentMismatch(ValueError):
    """An answer does not satisfy the schema.

    Attributes:
        errors: field name (or ``""`` for the whole answer) -> list of messages for the person.
    """

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        fields = ", ".join(sorted(k or "(answer)" for k in errors))
        super().__init__(f"answer does not match the requested schema (fields: {fields})")
