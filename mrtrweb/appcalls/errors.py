"""The one refusal of an app's request: a stable ``code``, the sentence the person (and the app)
reads, and the HTTP status of the host's endpoint."""

from __future__ import annotations


class AppCallRefused(Exception):
    """An app's request refused; nothing was sent to any server.

    ``code`` (stable): ``not_rendered`` (no rendering of this app by the product), ``apps_off``,
    ``not_listed`` (no such tool on the app's server), ``not_for_apps`` (its visibility leaves out
    ``"app"``), ``too_many_tools`` (beyond ``APPS_MAX_TOOLS``), ``rate_limited``
    (``APPS_CALLS_PER_SECOND``), ``bad_request`` (not the shape of the request), ``declined`` (the
    person declined), ``expired`` (the confirmation or the call outlived ``APPS_CALL_TIMEOUT_S``),
    ``unavailable`` (the server could not be listed), ``unsafe_url``, ``bad_download``, or an
    :class:`~mrtrweb.operations.OperationRefused` code (limits, draining, access)."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
