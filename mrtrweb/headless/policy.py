"""Scripted consent for headless operations (:mod:`.client`): the :class:`ConsentPolicy` that answers
every round, and the shapes a run returns or raises (:class:`HeadlessOutcome`, :class:`HeadlessError`).

Consent policies (:meth:`ConsentPolicy.parse`):

``accept-defaults``
    Accept every form with its schema's defaults (SEP-1034), optional fields without a default
    left out -- **only when every required field has a default** (that validates). A machine does
    not invent answers: when a form of the round has a required field without one (a "drop the
    database?" boolean, a ticket number, a choice), no stand-in is picked (not the first option,
    not ``false``, not ``""``); the whole round is answered ``cancel`` (sent as the retry, as a
    person's Cancel), the outcome names those fields (``missing_defaults``: ``KEY.FIELD``, names
    only, never a value) and ``mrtr_client`` exits 9.
``decline`` / ``cancel``
    Answer every request of every round with that action.
``answers:FILE.json``
    A JSON object keyed by input-request key: an object value is the form content to accept
    (absent fields take their defaults; the gate validates it), the strings ``"decline"`` /
    ``"cancel"`` answer that key with that action. A key absent from the file is declined.

URL-mode requests are **declined** unless ``url_done=True`` (command flag ``--url-done``): a
machine cannot open the page, so "accept" (meaning "I completed it") is only sent when the caller
vouches that the out-of-band step is done. ``url_done`` applies to the accepting policies
(``accept-defaults``, ``answers``); with ``decline`` / ``cancel`` it is refused as ``bad_policy``
(those policies answer every request with their action). An answers file may decline or cancel
one URL request by its key.

Sampling and roots requests (the deprecated exception, only where a tenant admin allowed them,
:mod:`mrtrweb.consent.sampling`) are approved only as the caller says:

* ``roots/list`` is answered with the server's configured roots (what the card shows a person)
  by ``accept-defaults``, and by ``answers`` when the file holds an object for its key (``{}``);
* ``sampling/createMessage`` only by ``answers``, with an object for its key: the sampling
  provider's form data (the default provider, :class:`mrtrweb.consent.sampling.PersonWritesReply`,
  takes ``{"reply": "the assistant's text"}``); the provider builds the result and the gate
  validates it. ``accept-defaults`` never approves one: a machine has no reply of its own.

Otherwise (``decline``, ``cancel``, a key absent or ``"decline"``/``"cancel"`` in the file) the
operation ends ``denied`` (``deprecated_request_refused``), as when a person refuses one; nothing
is sent.

Names a server chose (input-request keys, form fields) are shown through :func:`shown_name`; no
answer value is logged or printed. No I/O here but reading an answers file (:meth:`ConsentPolicy.parse`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..gate import CheckedSchema, ContentMismatch, Round
from ..text import display

__all__ = ["ACCEPT_DEFAULTS", "ANSWERS", "APP_ONLY", "CANCEL", "DECLINE", "SHOWN_NAME_CHARS", "TASK_REQUIRED", "TIMEOUT",
           "ConsentPolicy", "HeadlessError", "HeadlessOutcome", "default_content", "shown_name"]

ACCEPT_DEFAULTS = "accept-defaults"
DECLINE = "decline"
CANCEL = "cancel"
ANSWERS = "answers"

#: the outcome status when ``timeout_s`` passed first (the operation is then stopped)
TIMEOUT = "timeout"
#: the outcome of a ``tools/call`` of a tool listed with ``execution.taskSupport: "required"``:
#: not run, no operation (:mod:`mrtrweb.operations.tasks`)
TASK_REQUIRED = "task_required"
#: the outcome of a ``tools/call`` of a tool for its MCP App alone (``_meta.ui.visibility`` without
#: ``"model"``, :func:`mrtrweb.mcpapps.meta.app_only`): not a person's call, nor this client's;
#: not run, no operation
APP_ONLY = "app_only"


class HeadlessError(Exception):
    """The operation could not be run at all (bad policy, not a member, refused before sending).

    Attributes:
        code: a stable code (``bad_policy``, ``not_a_member``, ``limit_reached``,
            ``binding_store_unavailable``...).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class HeadlessOutcome:
    """How a headless operation ended.

    Attributes:
        status: an :class:`~mrtrweb.models.Operation` terminal status (``completed``, ``failed``,
            ``denied``, ``expired``, ``interrupted``), ``timeout``, ``app_only`` (the tool is for its MCP App alone: nothing was sent), or ``task_required`` (the tool
            runs only as a task and the server declares no task support: nothing was sent,
            ``operation_id`` is ``""``).
        result: the server's final result object (``completed`` only), else ``None``.
        rounds: how many ``input_required`` rounds the operation had.
        operation_id: the Operation row's id (its audit trail and history page).
        error_code: the operation's error code (``""`` when completed), or ``headless_timeout``.
        missing_defaults: for ``accept-defaults``: the required fields without a (valid) default
            that made it answer a round ``cancel``, as ``KEY.FIELD`` in round order (server names,
            control and format characters shown as ``\\uXXXX``, see :func:`shown_name`); ``()``
            when it cancelled nothing.
        error_message: what the operation page says of how it ended (``Operation.error_message``:
            the product's message and, for a JSON-RPC error, the server's code and message
            cleaned by :func:`mrtrweb.operations.server_error_text`; at most 500 characters);
            ``""`` when completed or timed out. Server text: print it through
            :func:`mrtrweb.text.display.shown`, never log it.
    """

    status: str
    result: Any
    rounds: int
    operation_id: str
    error_code: str
    missing_defaults: tuple[str, ...] = ()
    error_message: str = ""


@dataclasses.dataclass(frozen=True)
class ConsentPolicy:
    """A scripted consent policy (see the module docstring).

    Attributes:
        kind: ``accept-defaults``, ``decline``, ``cancel`` or ``answers``.
        answers: for ``answers``: input-request key -> content object, or ``"decline"``/``"cancel"``.
        url_done: accept URL-mode requests (the caller completed the out-of-band step).
    """

    kind: str
    answers: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    url_done: bool = False

    @classmethod
    def parse(cls, spec: str, *, url_done: bool = False) -> ConsentPolicy:
        """``accept-defaults``, ``decline``, ``cancel`` or ``answers:PATH`` (a JSON file).

        Raises:
            HeadlessError: ``bad_policy`` (unknown policy, unreadable file, not a JSON object, a
                value that is neither an object nor ``"decline"``/``"cancel"``, or ``url_done``
                with ``decline``/``cancel``).
        """
        if url_done and spec in (DECLINE, CANCEL):
            raise HeadlessError("bad_policy", f"--url-done accepts URL-mode requests, but the {spec!r} policy answers "
                                              f"every request with {spec!r}: use accept-defaults or answers:FILE.json")
        if spec in (ACCEPT_DEFAULTS, DECLINE, CANCEL):
            return cls(spec, url_done=url_done)
        if spec.startswith(ANSWERS + ":"):
            path = Path(spec[len(ANSWERS) + 1:])
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise HeadlessError("bad_policy", f"cannot read answers file {path}: {exc.__class__.__name__}") \
                    from None
            return cls.from_answers(data, url_done=url_done)
        raise HeadlessError("bad_policy", f"unknown consent policy {spec!r} (accept-defaults, decline, cancel, "
                                          "answers:FILE.json)")

    @classmethod
    def from_answers(cls, data: Any, *, url_done: bool = False) -> ConsentPolicy:
        """An ``answers`` policy from an already-parsed object (see :meth:`parse`)."""
        if not isinstance(data, dict):
            raise HeadlessError("bad_policy", "the answers file must hold a JSON object keyed by input-request key")
        for key, value in data.items():
            if not (isinstance(value, dict) or value in (DECLINE, CANCEL)):
                raise HeadlessError("bad_policy", f"answer for {key!r} must be an object (the content) or "
                                                  "\"decline\"/\"cancel\"")
        return cls(ANSWERS, answers=dict(data), url_done=url_done)

    # -- building the answers of one round ---------------------------------------------------

    def approved_deprecated(self, rnd: Round) -> dict[str, dict[str, Any]] | None:
        """The sampling/roots requests of ``rnd`` this policy approves (see the module docstring),
        as ``{key: form data}`` (``{}`` for roots), or ``None`` when it refuses one of them (the
        operation is then refused). ``{}`` when the round holds none."""
        approved: dict[str, dict[str, Any]] = {}
        for key, view in rnd.requests.items():
            if view.kind not in ("sampling", "roots"):
                continue
            given = self.answers.get(key) if self.kind == ANSWERS else None
            if isinstance(given, dict):
                approved[key] = dict(given) if view.kind == "sampling" else {}
            elif self.kind == ACCEPT_DEFAULTS and view.kind == "roots":
                approved[key] = {}
            else:
                return None
        return approved

    def responses(self, rnd: Round, provided: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The answers to every request of ``rnd``, or ``None`` when the round holds a
        sampling/roots request without an answer in ``provided`` (built by the caller for the keys
        :meth:`approved_deprecated` names: the configured roots, the provider's sampling result):
        the operation is then refused. For ``accept-defaults``, every request is answered
        ``cancel`` when :meth:`missing_defaults` names a field (refused when the round also holds
        a sampling/roots request: those cannot be cancelled one by one)."""
        out: dict[str, Any] = {}
        provided = provided or {}
        deprecated = [key for key, view in rnd.requests.items() if view.kind in ("sampling", "roots")]
        if any(key not in provided for key in deprecated):
            return None
        if self.missing_defaults(rnd):
            return None if deprecated else {key: {"action": CANCEL} for key in rnd.requests}
        for key, view in rnd.requests.items():
            if key in deprecated:
                out[key] = provided[key]
                continue
            given = self.answers.get(key, DECLINE) if self.kind == ANSWERS else None
            if self.kind in (DECLINE, CANCEL):
                out[key] = {"action": self.kind}
            elif view.kind == "url":
                if given in (DECLINE, CANCEL):
                    out[key] = {"action": given}
                else:
                    out[key] = {"action": "accept"} if self.url_done else {"action": DECLINE}
            elif self.kind == ACCEPT_DEFAULTS:
                content = default_content(view.schema) if view.schema is not None else None
                out[key] = {"action": "accept", "content": content} if content is not None else {"action": CANCEL}
            else:
                out[key] = {"action": "accept", "content": dict(given)} if isinstance(given, dict) \
                    else {"action": given}
        return out

    def missing_defaults(self, rnd: Round) -> list[str]:
        """For ``accept-defaults``: the fields of ``rnd``'s forms that keep it from accepting --
        required fields without a default, or whose defaults fail the form's own schema -- as
        ``KEY.FIELD`` (:func:`shown_name`), in request and field order; ``[]`` for any other
        policy, or when every form can be accepted with its defaults."""
        if self.kind != ACCEPT_DEFAULTS:
            return []
        missing: list[str] = []
        for key, view in rnd.requests.items():
            if view.kind == "url" or view.schema is None:
                continue
            names = [f.name for f in view.schema.fields if f.required and not f.has_default]
            if not names:
                try:
                    view.schema.validate({f.name: f.default for f in view.schema.fields if f.has_default})
                except ContentMismatch as exc:  # the server's own defaults break its schema
                    names = [f.name for f in view.schema.fields if f.name in exc.errors] or \
                        [f.name for f in view.schema.fields if f.has_default]
            missing += [f"{shown_name(key)}.{shown_name(name)}" for name in names]
        return missing


def default_content(checked: CheckedSchema) -> dict[str, Any] | None:
    """The ``accept-defaults`` content of a form: its defaults (optional fields without one left
    out), or ``None`` when a required field has no default or the defaults do not validate."""
    if any(spec.required and not spec.has_default for spec in checked.fields):
        return None
    try:
        return checked.validate({spec.name: spec.default for spec in checked.fields if spec.has_default})
    except ContentMismatch:
        return None


#: the longest server name :func:`shown_name` returns, in characters
SHOWN_NAME_CHARS = 100


def shown_name(name: Any) -> str:
    """A server-chosen key or field name fit for a terminal line or a log: control, bidi and
    invisible characters made visible (``⟨U+202E⟩``, :func:`mrtrweb.text.display.shown`); at most
    :data:`SHOWN_NAME_CHARS` characters (then "…")."""
    text = display.shown(str(name))
    return text if len(text) <= SHOWN_NAME_CHARS else text[: SHOWN_NAME_CHARS - 1] + "…"
