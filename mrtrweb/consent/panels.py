"""Server-side rendering of an operation's panel: its status, the consent card of its open round,
or its result. Used by the operation page and by the WebSocket consumer (the same HTML)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from django.template.loader import render_to_string

from ..audit import events as audit
from .. import rendering
from ..text import names, results
from . import outcomes, sampling
from ..authz.pages import auth_failure
from .forms import SchemaForm
from ..gate import Round, StoreUnavailable, digest
from ..models import AuditEvent, Membership, Operation
from ..operations import get_gate, handle_of, legacy_hold, message_for
from ..operations.url_required import is_url_required_round

logger = logging.getLogger("mrtrweb.panels")


def consent_forms(rnd: Round, data: Any = None) -> dict[str, SchemaForm]:
    """One :class:`SchemaForm` per form-mode request of the round, prefixed by its key (and one
    :class:`~mrtrweb.consent.sampling.SamplingForm` per allowed sampling request). Their titles, labels
    and descriptions share one budget: what ``MAX_SHOWN_CHARS`` leaves after the card's messages
    (:func:`mrtrweb.text.results.card_budget`)."""
    budget = results.card_budget(results.shown_messages(rnd.requests))
    forms = {
        key: SchemaForm(view.schema, data=data, prefix=f"in-{key}", budget=budget)
        for key, view in rnd.requests.items()
        if view.kind == "form" and view.schema is not None
    }
    forms.update(sampling.sampling_forms(rnd, data))
    return forms


def run_again_url(op: Operation) -> str:
    """Where "Change the arguments" leads: the call page of the operation's tool (showing its
    arguments, ``&from=<id>``) or prompt (named exactly as it was called, :mod:`mrtrweb.text.names`),
    else the server page."""
    kind = {"tools/call": "tool", "prompts/get": "prompt"}.get(op.method)
    params = results.stored_params(op.params)
    name = params.get("name") if isinstance(params, dict) else None
    if kind == "tool" and isinstance(name, str):  # the call page shows this operation's arguments, to edit
        return f"{names.call_url(kind, op.server_id, name)}&from={op.id}"
    return names.call_url(kind, op.server_id, name) if kind else names.call_url("tool", op.server_id, None)


def display_digest(op: Operation, rnd: Round) -> str:
    """``sha256:`` of exactly what the consent card shows: the verified server, the operation, the
    round, and each request's kind, message, schema (by digest) and URL."""
    messages = results.shown_messages(rnd.requests)
    return digest({
        "server": op.server.name, "origin": op.server.origin, "method": op.method, "name": op.name,
        "round": rnd.number,
        "requests": {key: {"kind": v.kind, "message": messages[key], "schema": v.schema_digest,
                           "url": v.url.url if v.url else None, "warnings": list(v.url.warnings) if v.url else [],
                           **_deprecated_display(op, v)}
                     for key, v in rnd.requests.items()},
    })


def _deprecated_display(op: Operation, view: Any) -> dict[str, Any]:
    """The extra content a sampling/roots request shows: the request itself, or the roots sent."""
    if view.kind == "sampling":
        return {"sampling": digest(dict(view.params))}
    if view.kind == "roots":
        return {"roots": digest(sampling.roots_answer(op.server))}
    return {}


def deprecated_refusal(op: Operation) -> dict[str, Any] | None:
    """For an operation the gate stopped because the server asked for a client request not allowed
    for it (``unapproved_deprecated_client_request``): what the page explains."""
    if op.error_code != sampling.UNAPPROVED:
        return None
    is_admin = Membership.objects.filter(tenant_id=op.tenant_id, user_id=op.user_id,
                                         role=Membership.Role.ADMIN).exists()
    return {"server": op.server, "is_admin": is_admin}


def record_shown(op: Operation, rnd: Round, *, reason: str = "", first: bool = False) -> None:
    """Write the consent receipt (``shown`` event) the first time this card is displayed.

    ``reason`` says who saw it when it was not a person's browser (the headless client: no values).
    ``first``: the caller shows this round for what is mostly its first time (the headless client; a
    push of the card, :mod:`mrtrweb.live.consumers`): the receipt is appended without looking for it
    first -- the append's own guard (``once``: its claim, a unique key inserted in the append's
    statement) still keeps it to one, and a receipt already there costs a second read. A card
    displayed again (a page reload, another tab) looks first: one read instead of an append."""
    shown = display_digest(op, rnd)
    if not first and AuditEvent.objects.filter(operation_id=op.id, round_number=rnd.number, event="shown",
                                               display_digest=shown).exists():
        return
    try:
        # the round's digests as the gate holds them (those its ``received`` event carries): record()
        # need not look that event up
        audit.record(op, "shown", reason=reason, round_number=rnd.number, request_id=op.latest_request_id,
                     display_digest=shown, state_digest=rnd.state_digest,
                     schema_digests={k: v.schema_digest for k, v in rnd.requests.items() if v.schema_digest},
                     once=("round_number", "display_digest"))  # two tabs at once: one receipt
    except audit.AuditUnavailable:
        pass  # logged; without a receipt an answer to this round is denied


def record_pushed(op: Operation, rnd: Round) -> None:
    """The receipt of a card a push sent (:func:`record_shown`): on PostgreSQL appended without a
    look first (``first``: the append's once-claim keeps a repeat out in its one statement; a card
    pushed is mostly its round's first display); elsewhere looked for first (SQLite's append takes
    the database's write lock even to find a repeat: one per tab and per repeated push)."""
    from django.db import connections, router

    record_shown(op, rnd, first=connections[router.db_for_write(AuditEvent)].vendor == "postgresql")


def panel_context(op: Operation, *, forms: dict[str, SchemaForm] | None = None, error: str = "",
                  review: dict[str, Any] | None = None, receipt: bool = True) -> dict[str, Any]:
    """The template context of an operation panel (reads the live round from the binding store).

    ``review``: the review of the person's valid answers (``views._review_context``), shown
    instead of the card while the round is still open. ``receipt``: write the consent receipt of
    a card shown (:func:`record_shown`) now; False when the caller writes it once the card went
    out (:func:`render_push`)."""
    ctx: dict[str, Any] = {"op": op, "error": error, "round": None, "requests": [], "store_error": "",
                           "status_label": outcomes.status_label(op)}
    if op.status == Operation.Status.AWAITING_INPUT:
        try:
            state = get_gate().state(handle_of(op))
        except StoreUnavailable:
            state = None
            ctx["store_error"] = message_for("binding_store_unavailable")
        rnd = state.round if state else None
        if rnd is not None:
            if review is None and receipt:  # the review is no display of the card: it writes no receipt
                record_shown(op, rnd)
            if forms is None:
                try:
                    forms = consent_forms(rnd)
                except (ImportError, TypeError, AttributeError):  # a misconfigured SAMPLING_PROVIDER
                    logger.error("sampling provider unusable while rendering operation %s", op.id)
                    ctx["store_error"] = sampling.PROVIDER_FAILED_MESSAGE
                    forms = {}
            ctx["round"] = rnd
            messages = results.shown_messages(rnd.requests)  # at most MAX_SHOWN_CHARS in all (mrtrweb.text.results)
            ctx["requests"] = [
                {"key": key, "view": dataclasses.replace(view, message=messages[key]),
                 "form": forms.get(key),
                 "sampling": sampling.sampling_view(view.params) if view.kind == "sampling" else None,
                 "roots": sampling.roots_answer(op.server)["roots"] if view.kind == "roots" else None}
                for key, view in rnd.requests.items()
            ]
            ctx["has_deprecated"] = any(v.kind in sampling.DEPRECATED_KINDS for v in rnd.requests.values())
            # a 2025-11-25 server holding its call open for this round: the notice and its deadline
            ctx["legacy_hold"] = legacy_hold(op)
            # made from a -32042 error: done (accept) sends the original request again, nothing else
            ctx["url_required"] = is_url_required_round(op.id, rnd.number, rnd)
            ctx["review"] = review
        elif not ctx["store_error"]:
            # answered meanwhile (another tab) or past its lifetime, not swept yet: not "waiting";
            # said once (a 409's own error already says it)
            ctx["round_gone"] = not error
            ctx["status_label"] = str(outcomes.ROUND_CLOSED)
    if op.status == Operation.Status.FAILED:
        ctx["deprecated_refusal"] = deprecated_refusal(op)
        ctx["auth_failure"] = auth_failure(op)  # stopped on authorization: Connect and run again (issue 13)
    if op.is_terminal:
        ctx.update(_outcome(op))
        if error and error == op.error_message:
            ctx["error"] = ""  # the outcome below says it: once
    if op.status == Operation.Status.COMPLETED:
        # blocks within MAX_SHOWN_CHARS (the rest downloads), media checked, markdown safe,
        # structured content checked against the tool's output schema (mrtrweb.rendering)
        ctx.update(rendering.render(op.method, op.result, op.output_schema))
    return ctx


def _outcome(op: Operation) -> dict[str, Any]:
    """An ended operation's part of the panel (issue 17): how it ended (``expired``; ``stopped``:
    by its person or the headless time limit; ``outcome_heading``) and the way on: "Run again"
    with the same arguments (``rerun``; ``rerun_done``/``rerun_of``: it already became one), and the
    call page to change them (``run_again_url``)."""
    ctx: dict[str, Any] = {"expired": outcomes.expired(op),
                           "stopped": outcomes.stopped_by_person(op) or outcomes.stopped_at_time_limit(op),
                           "outcome_heading": outcomes.outcome_heading(op)}
    ctx.update(outcomes.way_on(op))
    if ctx["rerun"] or ctx["rerun_done"]:
        ctx["run_again_url"] = run_again_url(op)
    ctx["sent_arguments"] = sent_arguments(op)
    return ctx


#: the most characters of the arguments a finished operation's page shows (the rest: the download)
MAX_SENT_ARGUMENTS_CHARS = 4000


def sent_arguments(op: Operation) -> str | None:
    """What a finished operation sent, as indented JSON for its page (issue 28): a tool's
    ``arguments``, a prompt's ``arguments``, a resource's ``uri``; None when there were none.
    At most :data:`MAX_SENT_ARGUMENTS_CHARS` characters, control and bidi characters escaped."""
    from ..text import display

    params = results.stored_params(op.params)
    if not isinstance(params, dict):
        return None
    sent = params.get("arguments") if op.method in ("tools/call", "prompts/get") else {"uri": params.get("uri")}
    if not sent:
        return None
    text = display.json_text(sent, indent=2)
    return text if len(text) <= MAX_SENT_ARGUMENTS_CHARS else text[:MAX_SENT_ARGUMENTS_CHARS] + "\n…"


def render_panel(op: Operation, csrf_token: str, request: Any = None, **kwargs: Any) -> str:
    """The panel's HTML (escaped server text; the URL-mode URL is the only link)."""
    ctx = panel_context(op, **kwargs)
    ctx["csrf_token"] = csrf_token
    return render_to_string("mrtrweb/_panel.html", ctx, request=request)


def render_push(op: Operation, csrf_token: str) -> tuple[str, Round | None]:
    """A pushed panel: ``(html, round)``, ``round`` the round whose card the HTML shows (None: no
    card). Its consent receipt is not written here: the pusher writes it (:func:`record_shown`)
    once the card went out -- off the push's critical path, still before any answer to the round
    is accepted (``answer_round`` refuses an answer to a round without its ``shown`` receipt)."""
    ctx = panel_context(op, receipt=False)
    ctx["csrf_token"] = csrf_token
    html = render_to_string("mrtrweb/_panel.html", ctx)
    return html, ctx["round"]
