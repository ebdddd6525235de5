"""How a history row reads (the newcomer's findings): a round only when there was one, a person's
decision on the model's proposal says who decided and who proposed, a timeout reads "expired"."""

from __future__ import annotations

import datetime as dt

from django.template.loader import render_to_string

from mrtrweb.audit.history.rows import ROW_FIELDS, row


def _event(**values) -> dict:
    base = {name: "" for name in ROW_FIELDS}
    base.update(pk=1, sequence=1, created_at=dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.timezone.utc),
                tenant_id=1, operation_id="00000000-0000-0000-0000-000000000001", round_number=0,
                user_digest="u1", actions=None, initiator_detail=None, server_id="1")
    base.update(values)
    return base


def _html(*events: dict, names: dict | None = None) -> str:
    rows = [row(e, names=names or {}, servers={"1": "Demo server"}) for e in events]
    return render_to_string("mrtrweb/history_events.html", {"rows": rows, "show_operation": True, "show_user": True})


def test_a_round_is_named_only_when_the_event_had_one():
    html = _html(_event(event="proposed", method="chat/proposal", name="book_trip", initiator="model"),
                 _event(event="completed", method="tools/call", name="echo", initiator="model"),
                 _event(event="received", method="tools/call", name="deploy", round_number=2))
    assert "round 0" not in html
    assert html.count('class="round muted"') == 1 and "round 2" in html


def test_a_persons_approval_names_the_person_as_actor_and_the_model_as_proposer():
    html = _html(_event(event="approved", method="chat/proposal", name="book_trip", initiator="model"),
                 names={"u1": "alice"})
    assert "decided by: alice" in html and 'data-initiator="model">proposed by: model' in html
    assert "made by:" not in html  # the model made no decision
    anonymous = _html(_event(event="proposal_denied", method="chat/proposal", name="x", initiator="model"))
    assert "decided by: the person" in anonymous and "proposed by: model" in anonymous
    # the model's own events and the calls it started still say who made them
    made = _html(_event(event="proposed", method="chat/proposal", name="x", initiator="model"),
                 _event(event="completed", method="tools/call", name="x", initiator="model"))
    assert made.count("made by: model") == 2 and "decided by" not in made


def test_a_timeout_reads_expired_and_a_stop_stays_a_stop():
    html = _html(_event(event="denied", code="denied", reason="timeout", round_number=1))
    assert '<span class="event-name" title="denied">expired</span>' in html
    stop = _html(_event(event="denied", code="denied", reason="cancelled", round_number=1))
    assert "stopped by the person" in stop
    refused = _html(_event(event="denied", code="access_revoked", reason="access", round_number=1))
    assert '<span class="event-name" title="denied">denied</span>' in refused
