"""Answering one round of a headless operation (:mod:`.client`): the consent receipt shown to the
scripted agent, the policy's answers (a provider's for sampling requests), the answer sent once
(:func:`mrtrweb.operations.answer_round`), a refusal denying the operation. Nothing here logs an
answer value: keys, actions and round numbers only.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import operations
from ..consent import sampling
from ..gate import GateRejection, StoreUnavailable, codes
from ..models import Operation
from ..operations.hops import round_hop
from .policy import ConsentPolicy, shown_name

logger = logging.getLogger("mrtrweb.headless")


async def answer(op: Operation, consent: ConsentPolicy, known: Any = None) -> list[str]:
    """Show the open round to the scripted agent (consent receipt), then answer it once. Returns
    :meth:`ConsentPolicy.missing_defaults` of the round when the policy answered it ``cancel``
    for them (else ``[]``). ``known``: the round as the phase that opened it handed it over (a
    :class:`mrtrweb.operations.Change`), else it is read from the binding store.

    When the round is ``known`` and holds no sampling/roots request (nothing for a provider to
    make first), the receipt is written in the answer's own thread hop, right before its checks
    (:func:`mrtrweb.operations.answer_round`'s ``first``): one hop instead of two."""
    from ..consent.panels import record_shown

    reason = f"headless: scripted consent policy {consent.kind}"
    if (known is not None and known.number == op.rounds
            and not any(v.kind in ("sampling", "roots") for v in known.requests.values())):
        responses = consent.responses(known)
        if responses is not None:  # (always, without sampling/roots requests)
            def receipt() -> None:  # the first display to this agent: the append's own guard keeps it to one
                record_shown(op, known, reason=reason, first=True)

            missing = consent.missing_defaults(known)
            await send_answer(op, known, responses, {}, missing, receipt)
            return missing

    def show() -> tuple[Operation, Any]:  # one thread hop: the round, the row, the consent receipt
        rnd = known
        if rnd is None:
            state = operations.get_gate().state(operations.handle_of(op))
            rnd = state.round if state else None
        if rnd is None or rnd.number != op.rounds:
            return op, None  # the round ended meanwhile (expired, stopped): the row says how
        # the first display to this agent: the append's own guard keeps it to one receipt
        record_shown(op, rnd, reason=reason, first=True)
        return op, rnd  # read with its server, tenant and user by _run

    try:
        full, rnd = await round_hop(show)()
    except StoreUnavailable:
        await operations.deny(op, operations.STORE_UNAVAILABLE)
        return []
    if rnd is None:
        return []
    approved = consent.approved_deprecated(rnd)
    provided: dict[str, Any] = {}
    for key, form_data in (approved or {}).items():
        view = rnd.requests[key]
        if view.kind == "roots":
            provided[key] = sampling.roots_answer(full.server)
            continue
        try:
            provided[key] = await sampling.provide(sampling.get_provider(), dict(view.params), user=full.user,
                                                   operation=full, form_data=form_data)
        except Exception:  # noqa: BLE001 -- a provider failure sends nothing
            logger.exception("operation %s round %s: the sampling provider failed", op.id, rnd.number)
            await operations.deny(full, "deprecated_request_refused")
            return []
    responses = consent.responses(rnd, provided) if approved is not None else None
    if responses is None:
        logger.info("operation %s round %s: sampling/roots refused by the scripted policy (keys: %s)", op.id,
                    rnd.number, ", ".join(shown_name(k) for k, v in rnd.requests.items()
                                         if v.kind in ("sampling", "roots")))
        await operations.deny(full, "deprecated_request_refused")
        return []
    missing = consent.missing_defaults(rnd)
    await send_answer(full, rnd, responses, provided, missing)
    return missing


async def send_answer(op: Operation, rnd: Any, responses: dict[str, Any], provided: dict[str, Any],
                       missing: list[str], first: Any = None) -> None:
    """Send ``responses`` as the answer to round ``rnd`` (``first``: sync work for the answer's own
    thread hop, :func:`mrtrweb.operations.answer_round`); a refusal denies the operation -- but
    not when the round is no longer open (``inactive_mrtr_round``: a browser of the same person
    answered it first, or it expired or ended: whoever closed it moves the operation on, and
    denying here would end an operation whose retry is already out), nor when the answer is
    pending (:class:`~mrtrweb.operations.AnswerPending`: consumed and audited, sent by this worker
    once the database is back)."""
    if missing:
        logger.info("operation %s round %s: accept-defaults answers cancel: required fields without a default: %s",
                    op.id, rnd.number, ", ".join(missing))
    if logger.isEnabledFor(logging.INFO):
        logger.info("operation %s round %s: answering %s", op.id, rnd.number,
                    {shown_name(k): v.get("action") or ("approved" if k in provided else None)
                     for k, v in responses.items()})
    try:
        await operations.answer_round(op, responses, round_number=rnd.number, first=first)
    except operations.AnswerPending:
        logger.info("operation %s round %s: answer kept until the database is back", op.id, rnd.number)
    except (GateRejection, operations.OperationRefused) as exc:
        if exc.code == codes.INACTIVE_MRTR_ROUND:  # closed by someone else: theirs to move on
            logger.info("operation %s round %s: the round was no longer open (answered elsewhere, expired or "
                        "ended); the operation is left to that", op.id, rnd.number)
            return
        if isinstance(exc, GateRejection):
            # e.g. answers that do not match the schema: no person can correct them here
            logger.info("operation %s round %s: answer refused by the gate (%s)", op.id, rnd.number, exc.code)
            await operations.deny(op, exc.code)
            return
        logger.info("operation %s round %s: answer refused (%s)", op.id, rnd.number, exc.code)
        if not (await Operation.objects.aget(pk=op.pk)).is_terminal:
            await operations.deny(op, exc.code)
