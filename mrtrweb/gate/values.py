"""What the gate hands out, frozen: an operation's handle, an accepted round and its input
requests, a retry, an operation's live state; and the limits and names its checks share.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from .ids import digest
from .policy import Policy
from .schema import CheckedSchema
from .urls import UrlView


_KEY_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


#: the most input requests one round may hold (row 7: a larger ``inputRequests`` is refused as
#: ``invalid_named_input_request``): one card shows them all, and a person answers them at once
MAX_INPUT_REQUESTS = 64


#: the most form fields all the form requests of one round may hold together (row 8: refused as
#: ``invalid_form_requestedSchema``): the card is answered by one form post, which web frameworks
#: cap (Django: 1,000 fields, ``DATA_UPLOAD_MAX_NUMBER_FIELDS``)
MAX_ROUND_FIELDS = 512


ELICITATION = "elicitation/create"


SAMPLING = "sampling/createMessage"


ROOTS = "roots/list"


_ACTIONS = ("accept", "decline", "cancel")


#: extra seconds a store keeps a record after its logical expiry (for late-answer diagnostics)
_STORE_SLACK_S = 60.0


@dataclasses.dataclass(frozen=True)
class OperationHandle:
    """Identifies a registered operation: its tenant and its operation id (a UUID string)."""

    tenant: str
    operation_id: str


@dataclasses.dataclass(frozen=True)
class InputRequestView:
    """One accepted input request of a round.

    ``kind`` is ``form``, ``url``, ``sampling`` or ``roots``. ``message`` is server text (escape
    it). ``schema`` is set for forms, ``url`` for URL mode; ``params`` is the request's params as
    received (for sampling/roots display).
    """

    key: str
    method: str
    kind: str
    message: str
    schema: CheckedSchema | None
    url: UrlView | None
    params: Mapping[str, Any]
    schema_digest: str | None


@dataclasses.dataclass(frozen=True)
class Round:
    """An accepted ``input_required`` round.

    Attributes:
        handle: the operation.
        number: 1 for the first round of the operation, 2 for the next...
        request_id: the JSON-RPC id of the request this round answered.
        requests: key -> :class:`InputRequestView`, in key order (empty for a state-only round).
        has_state: whether a ``requestState`` came (its value stays in the store).
        state_digest: ``sha256:`` digest of the ``requestState``, or ``None``.
        expires_at: epoch seconds after which the round can no longer be answered.
        backoff_s: for a state-only round, the pause before retrying it (0 otherwise).
    """

    handle: OperationHandle
    number: int
    request_id: Any
    requests: Mapping[str, InputRequestView]
    has_state: bool
    state_digest: str | None
    expires_at: float
    backoff_s: float

    @property
    def state_only(self) -> bool:
        return not self.requests


@dataclasses.dataclass(frozen=True)
class Retry:
    """The retry the gate built: send ``params`` as ``method`` under JSON-RPC id ``id``.

    ``actions`` maps each answered key to its action (``accept``/``decline``/``cancel``, or
    ``result`` for a deprecated request); values are never exposed here for logging.
    """

    handle: OperationHandle
    id: Any
    method: str
    params: dict[str, Any]
    round_number: int
    actions: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class OperationState:
    """A read-only view of a live binding (for views and diagnostics)."""

    handle: OperationHandle
    user: str
    server_id: str
    origin: str
    method: str
    params: Mapping[str, Any]
    latest_id: Any
    status: str
    rounds: int
    round: Round | None
    policy: Policy
