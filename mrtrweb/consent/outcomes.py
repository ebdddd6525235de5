"""How an operation's outcome reads to its person (issue 17), derived from what is stored.

The stored ``Operation.status`` and ``error_code`` stay as they are (the audit trail, metrics,
the headless client and the tests rely on them); this module only says how they are *shown*:

* the person's own Stop is stored ``denied`` (code ``denied``, audit reason ``cancelled``, the
  message of :data:`~mrtrweb.operations.STOPPED_BY` / ``STOPPED_BY_AT_ROUND``): it reads
  "Stopped by you", not "Denied" (a refusal by the gate or by access);
* an answer that came after its round's lifetime is stored ``denied`` (reason ``timeout``), and so
  is a legacy server's held call that no answer reached before its deadline (the server was told
  cancel: :data:`mrtrweb.text.stored_text.LEGACY_TIMEOUT`): to its person that round expired, as a
  swept one (status ``expired``) did -- it reads "Expired", never "Denied";
* which ended operations offer "Run again" with the same arguments (:func:`rerunnable`).
"""

from __future__ import annotations

import re
from typing import Any, Final

from django.utils.translation import gettext, gettext_lazy as _

from ..models import Operation
from ..operations.messages import DENY_MESSAGES, STOPPED_BY, STOPPED_BY_AT_ROUND
from ..text import stored_text

__all__ = ["ENDED_WITHOUT_RESULT", "STOPPED_BY_YOU", "TOOL_ERROR", "expired", "outcome_heading", "rerunnable", "status_label",
           "stopped_by_person", "tool_error", "way_on"]

#: the shown status of an operation its person stopped
STOPPED_BY_YOU: Final = _("Stopped by you")
#: the same, read by someone else (a tenant admin's view of the operation's timeline)
STOPPED_BY_OWNER: Final = _("Stopped by its person")
#: the shown status of an operation the headless client stopped when its time limit passed
STOPPED_AT_TIME_LIMIT: Final = _("Stopped: time limit")
#: the shown status of an operation still marked waiting whose round is no longer open (answered
#: from another tab and on its way, or past its lifetime and not yet swept)
ROUND_CLOSED: Final = _("Round closed")

#: the statuses of an operation that ended without a result: each may be run again
ENDED_WITHOUT_RESULT: Final = frozenset({Operation.Status.FAILED, Operation.Status.INTERRUPTED,
                                         Operation.Status.DENIED, Operation.Status.EXPIRED})

#: the stored messages of the person's own Stop (while a call ran, or while a round waited)
_STOPPED_BY_PERSON_MESSAGES: Final = frozenset({STOPPED_BY["person"][:500], STOPPED_BY_AT_ROUND["person"][:500]})
#: the same, of the headless client's time limit
_STOPPED_AT_LIMIT_MESSAGES: Final = frozenset({STOPPED_BY["headless_timeout"][:500],
                                               STOPPED_BY_AT_ROUND["headless_timeout"][:500]})
#: the stored message of an answer that arrived after its round's lifetime
_LATE_ANSWER_MESSAGE: Final = DENY_MESSAGES["timeout"][:500]
#: the stored message of a legacy round whose hold ran out, its clock any text
_LEGACY_TIMEOUT: Final = re.compile(re.escape(stored_text.LEGACY_TIMEOUT).replace(re.escape("%(clock)s"), ".{1,40}"),
                                    re.DOTALL)


def stopped_by_person(op: Operation) -> bool:
    """Whether ``op`` ended because its own person pressed Stop (not the gate, not their access,
    not the headless client's time limit)."""
    return (op.status == Operation.Status.DENIED and op.error_code == "denied"
            and op.error_message in _STOPPED_BY_PERSON_MESSAGES)


def stopped_at_time_limit(op: Operation) -> bool:
    """Whether the headless client stopped ``op`` because its time limit passed."""
    return (op.status == Operation.Status.DENIED and op.error_code == "denied"
            and op.error_message in _STOPPED_AT_LIMIT_MESSAGES)


def expired(op: Operation) -> bool:
    """Whether ``op``'s round expired unanswered: swept (``expired``), or answered too late (a
    ``denied`` outcome with reason ``timeout``). Either way nothing was sent for it."""
    if op.status == Operation.Status.EXPIRED:
        return True
    if op.status != Operation.Status.DENIED:
        return False
    return op.error_message == _LATE_ANSWER_MESSAGE or legacy_timeout(op)


def legacy_timeout(op: Operation) -> bool:
    """Whether ``op`` is a legacy server's held call that no answer reached before its deadline
    (stored ``denied`` with :data:`mrtrweb.text.stored_text.LEGACY_TIMEOUT` filled in)."""
    return (op.status == Operation.Status.DENIED and op.error_code == "denied"
            and _LEGACY_TIMEOUT.fullmatch(op.error_message or "") is not None)


def status_label(op: Operation, own: bool = True) -> str:
    """The status as the person reads it: "Stopped by you" for their own Stop ("Stopped by its
    person" when ``own`` is False: an admin reading someone else's timeline), "Expired" for a
    round answered after its lifetime, "Tool error" for a completed call whose result says
    ``isError: true``, else the stored status's label."""
    if stopped_by_person(op):
        return str(STOPPED_BY_YOU if own else STOPPED_BY_OWNER)
    if stopped_at_time_limit(op):
        return str(STOPPED_AT_TIME_LIMIT)
    if expired(op):
        return str(Operation.Status.EXPIRED.label)
    if tool_error(op):
        return str(TOOL_ERROR)
    return str(op.get_status_display())


#: the status of a completed tools/call whose result says ``isError: true`` (issue 28)
TOOL_ERROR = _("Tool error")


def tool_error(op: Operation) -> bool:
    """Whether ``op`` completed with a result that says ``isError: true`` (the server ran the tool
    and says it did not succeed): read "Tool error", not "Completed"."""
    return (op.status == Operation.Status.COMPLETED and isinstance(op.result, dict)
            and op.result.get("isError") is True)


def rerunnable(op: Operation) -> bool:
    """Whether ``op`` may be run again with the same arguments (:mod:`mrtrweb.consent.rerun`): it ended
    ended: without a result (failed, interrupted, denied -- the person's Stop and their Decline/Cancel of a
    sampling, roots or URL-required round included --, expired), or completed, a tool error too
    (issue 28: a finished operation offers Run again and Change the arguments below its result).
    Never an MCP App's call: the app's to make again (it may be of a tool for the app alone, which
    is no person's call)."""
    if op.initiator == Operation.Initiator.APP:
        return False
    return op.status in ENDED_WITHOUT_RESULT or op.status == Operation.Status.COMPLETED


def way_on(op: Operation) -> dict[str, Any]:
    """What the page of an ended operation offers next: ``rerun`` (the "Run again" form: the same
    arguments, a new operation); once it was run again (one run again per operation),
    ``rerun_done`` and ``rerun_of``, the new operation while it exists. No query unless it was
    run again (a pushed panel costs what it did)."""
    if not rerunnable(op):
        return {"rerun": False, "rerun_done": False, "rerun_of": None}
    if op.rerun_as is None:
        return {"rerun": True, "rerun_done": False, "rerun_of": None}
    exists = Operation.objects.filter(pk=op.rerun_as, user_id=op.user_id).exists()
    return {"rerun": False, "rerun_done": True, "rerun_of": op.rerun_as if exists else None}


def outcome_heading(op: Operation) -> str:
    """The heading of an ended-without-result outcome the panel explains (expired, stopped,
    denied); ``""`` for the others (failed and interrupted have their own)."""
    if expired(op):
        return gettext("This round expired")
    if stopped_by_person(op) or stopped_at_time_limit(op):
        return gettext("The operation was stopped")
    if op.status == Operation.Status.DENIED:
        return gettext("The operation was denied")
    return ""
