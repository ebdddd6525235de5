"""The one refusal of an app's request: a stable ``code``, the sentence the person (and the app)
reads, the HTTP status of the host's endpoint, and the JSON-RPC error code the app receives."""

from __future__ import annotations

#: the JSON-RPC error code of a refusal by the product (its right, its rate, the person...)
REFUSED = -32001
#: JSON-RPC 2.0 "Invalid params": the app's arguments are not the tool's (``bad_arguments``)
INVALID_PARAMS = -32602
#: JSON-RPC 2.0 "Method not found": the host does not offer this (``not_offered``: an app's sampling
#: where the tenant has no model or its server may not sample)
NOT_OFFERED = -32601


class AppCallRefused(Exception):
    """An app's request refused; nothing was sent to any server.

    ``code`` (stable): ``not_rendered`` (no rendering of this app by the product), ``apps_off``,
    ``not_listed`` (no such tool on the app's server), ``not_for_apps`` (its visibility leaves out
    ``"app"``), ``too_many_tools`` (beyond ``APPS_MAX_TOOLS``), ``rate_limited``
    (``APPS_CALLS_PER_SECOND``), ``too_many_waiting`` (429: already
    ``calls.MAX_WAITING_CONFIRMATIONS`` calls wait for the person's confirmation), ``bad_request`` (not the shape of the request), ``bad_arguments``
    (the arguments do not match the tool's ``inputSchema``, or are larger than the product takes),
    ``declined`` (the person declined), ``expired`` (the confirmation or the call outlived
    ``APPS_CALL_TIMEOUT_S``), ``unavailable`` (the server could not be listed), ``unsafe_url``,
    ``bad_download``; for an app's sampling (:mod:`.sampling`) ``not_offered``, ``busy``, ``model_failed``,
    ``bad_reply``, ``audit_unavailable``; or an :class:`~mrtrweb.operations.OperationRefused` code (limits, draining, access).

    ``rpc``: the JSON-RPC error code the app reads (:data:`INVALID_PARAMS` for ``bad_arguments``,
    :data:`NOT_OFFERED` for ``not_offered``, else :data:`REFUSED`); ``detail``: text added to the sentence (already translated), or ``""``."""

    def __init__(self, code: str, message: str, status: int = 400, *, detail: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.detail = detail
        self.rpc = {"bad_arguments": INVALID_PARAMS, "not_offered": NOT_OFFERED}.get(code, REFUSED)
