"""How an operation's end reads to its person, and the way on (issue 17, "A person").

* an expired round says so (when, nothing sent), never "Waiting for your answer", and offers
  "Run again": a POST (CSRF) that starts a new operation with the same arguments (the server sees
  them), once;
* the person's own Stop reads "Stopped by you" (page, index, history), a denial by the gate stays
  "Denied", and both offer "Run again"; the stored status stays ``denied``;
* an answer posted to a round no longer open is a 409 that says so once, with the real status;
* a running operation cannot be run again (409, nothing started).

The site's error pages are in tests/views/test_error_pages.py; the browser's view in
tests/views/test_browser_outcomes.py.
"""

from __future__ import annotations

import html
import datetime as dt
import re
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from mrtrweb.operations import expiry
from mrtrweb import operations
from mrtrweb.consent import outcomes
from mrtrweb.text import results
from mrtrweb.models import AuditEvent, Operation
from tests.answering import post_answer, until, waiting_round

pytestmark = [pytest.mark.django_db(transaction=True)]

WAITING = "Waiting for your answer"
CLOSED_ONCE = "This round is no longer open"
RERUN_FORM = re.compile(r'<form method="post" action="/mcp/operations/([0-9a-f-]{36})/rerun/" '
                        r'class="inline rerun-form"><input type="hidden" name="csrfmiddlewaretoken" value="[^"]+">')


@pytest.fixture
def short_ttl(settings):
    settings.MRTRWEB = {"TTL_S": 1}
    operations.reset_gate()
    yield
    operations.reset_gate()


async def _until_due(op: Operation, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while op.pk not in await sync_to_async(expiry.due_ids)():
        assert time.monotonic() < deadline, "the round never became due"
        await __import__("asyncio").sleep(0.1)


def _panel(body: str) -> str:
    return body.split('<section class="panel"', 1)[1].split("</section>", 1)[0]


async def test_an_expired_round_says_so_and_runs_again_with_the_same_arguments(seeded, short_ttl):
    client, op = await waiting_round(seeded, "gitlab", shown=True)
    await _until_due(op)
    assert await expiry.sweep() == 1
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    panel = _panel(page)
    assert 'data-status="expired"' in panel
    assert WAITING not in page and CLOSED_ONCE not in page
    assert '<strong class="status-label">Expired</strong>' in panel
    assert "This round expired" in panel and "Nothing was sent to the server." in panel
    assert re.search(r'the round closed at <time class="when" datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"[^>]*>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>', panel)
    form = RERUN_FORM.search(panel)
    assert form and form.group(1) == str(op.id)

    # CSRF: the form's token is required (a client enforcing checks, no token: refused)
    strict = AsyncClient(enforce_csrf_checks=True)
    await strict.aforce_login(seeded["users"]["alice"])
    assert (await strict.post(f"/mcp/operations/{op.id}/rerun/")).status_code == 403

    before = len(seeded["mcp"].log.tool_calls("connect_account"))
    resp = await client.post(f"/mcp/operations/{op.id}/rerun/")
    assert resp.status_code == 302
    new_id = resp["Location"].rstrip("/").split("/")[-1]
    assert new_id != str(op.id)
    new = await until(Operation(pk=new_id), lambda o: o.status == "awaiting_input")
    assert (new.method, new.name, new.params, new.server_id) == (op.method, op.name, op.params, op.server_id)
    sent = seeded["mcp"].log.tool_calls("connect_account")[before:]
    assert len(sent) == 1 and sent[0].params["arguments"] == {"provider": "gitlab"}  # the server saw the same

    # once: the old page now leads to the new operation; a second POST starts nothing
    again = _panel((await client.get(f"/mcp/operations/{op.id}/")).content.decode())
    assert RERUN_FORM.search(again) is None and f'href="/mcp/operations/{new_id}/"' in again
    assert (await client.post(f"/mcp/operations/{op.id}/rerun/")).status_code == 409
    assert await Operation.objects.filter(user=seeded["users"]["alice"]).acount() == 2


async def test_an_answer_after_expiry_reads_expired_not_denied(seeded, short_ttl):
    """The round's binding is gone before the sweep: the answer is denied with reason timeout,
    and the person reads that the round expired (the stored status stays ``denied``)."""
    client, op = await waiting_round(seeded, "gitlab", shown=True)
    time.sleep(1.2)  # past the round's lifetime, within the sweep's grace
    answer = await post_answer(client, f"/mcp/operations/{op.id}/answer/", {"action": "decline", "round": "1"})
    assert answer.status_code == 409
    body = answer.content.decode()
    assert (await Operation.objects.aget(pk=op.pk)).status == "denied"
    assert '<strong class="status-label">Expired</strong>' in body and WAITING not in body
    assert body.count("expired before the answer arrived") == 1 and RERUN_FORM.search(body)
    assert seeded["mcp"].calls[("connect_account", True)] == 0


async def test_the_persons_stop_reads_stopped_by_you(seeded):
    client, op = await waiting_round(seeded, "stop", shown=True)
    assert (await client.post(f"/mcp/operations/{op.id}/stop/")).status_code == 302
    row = await Operation.objects.aget(pk=op.pk)
    assert (row.status, row.error_code) == ("denied", "denied")  # the stored contract is unchanged
    events = [(e.event, e.reason) async for e in AuditEvent.objects.filter(operation_id=op.id).order_by("sequence")]
    assert events[-1] == ("denied", "cancelled")
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    panel = _panel(page)
    assert '<strong class="status-label">Stopped by you</strong>' in panel and "Denied" not in panel
    assert "The operation was stopped" in panel and RERUN_FORM.search(panel)
    index = (await client.get("/mcp/")).content.decode()
    assert re.search(r'<td data-label="Status" class="status status-denied">Stopped by you</td>', index)
    history = (await client.get("/mcp/history/")).content.decode()
    assert "Stopped by you" in history
    timeline = (await client.get(f"/mcp/history/operations/{op.id}/")).content.decode()
    assert "Stopped by you" in timeline and "Stopped by you (<code>denied</code>)" not in timeline
    # the audit event keeps its value (data-event, filters, exports); the history reads it as a stop
    assert re.search(r'<span class="event-name" title="denied">stopped by the person</span>', timeline)
    history = (await client.get("/mcp/tenants/acme/history/")).content.decode()  # alice administers acme
    assert re.search(r'<span class="event-name" title="denied">stopped by the person</span>', history)
    again = await client.post(f"/mcp/operations/{op.id}/stop/")  # a second Stop (another tab)
    assert again.status_code == 409
    body = again.content.decode()
    assert "This operation had already ended: there was nothing to stop." in body and "no longer open" not in body


async def test_a_denial_by_the_gate_stays_denied(seeded):
    """The round shown, then the server's configuration changes: the answer is denied by the gate
    (not stopped by the person): the page reads "Denied", and Run again is offered."""
    client, op = await waiting_round(seeded, "gitlab", shown=True)
    await operations.deny(op, "server_config_changed")
    panel = _panel((await client.get(f"/mcp/operations/{op.id}/")).content.decode())
    assert '<strong class="status-label">Denied</strong>' in panel and "Stopped by you" not in panel
    assert "The operation was denied" in panel and RERUN_FORM.search(panel)
    row = await Operation.objects.aget(pk=op.pk)
    assert not outcomes.stopped_by_person(row) and outcomes.status_label(row) == "Denied"


async def test_a_duplicate_send_is_a_409_that_says_it_once_with_the_real_status(seeded):
    client, op = await waiting_round(seeded, "gitlab", shown=True)
    url = f"/mcp/operations/{op.id}/answer/"
    first = await post_answer(client, url, {"action": "decline", "round": "1"})
    assert first.status_code == 302
    await operations.wait_idle()
    row = await until(op, lambda o: o.status == "completed")
    again = await client.post(url, {"action": "decline", "round": "1"})
    assert again.status_code == 409
    body = again.content.decode()
    assert body.count("no longer open") == 1 and WAITING not in body
    assert "Your answer was not sent" in body
    assert '<strong class="status-label">Completed</strong>' in body
    # the way on: the server's result
    assert "Account connection declined by the user; nothing was done." in body.split('<div class="result', 1)[1]
    # below its result, Run again (issue 28: every finished operation offers it), once
    assert len(RERUN_FORM.findall(body.split('<div class="result', 1)[1])) == 1 and outcomes.rerunnable(row)
    assert seeded["mcp"].calls[("connect_account", True)] == 1


async def test_a_round_gone_before_its_row_moved_is_not_waiting(seeded):
    """The round is no longer in the store while the row still says waiting (answered from
    another tab, the retry on its way): a 409 says so once, and the status is not "waiting"."""
    client, op = await waiting_round(seeded, "gitlab", shown=True)
    await sync_to_async(operations.get_gate().close)(operations.handle_of(op))
    again = await client.post(f"/mcp/operations/{op.id}/answer/", {"action": "decline", "round": "1"})
    assert again.status_code == 409
    body = again.content.decode()
    assert body.count("no longer open") == 1 and WAITING not in body
    assert '<strong class="status-label">Round closed</strong>' in body
    page = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert page.count("no longer open") == 1 and WAITING not in page


async def test_a_running_operation_cannot_be_run_again(seeded):
    client, op = await waiting_round(seeded, "gitlab", shown=True)
    resp = await client.post(f"/mcp/operations/{op.id}/rerun/")
    assert resp.status_code == 409
    assert await Operation.objects.filter(user=seeded["users"]["alice"]).acount() == 1
    other = AsyncClient()
    await other.aforce_login(seeded["users"]["bob"])
    assert (await other.post(f"/mcp/operations/{op.id}/rerun/")).status_code == 404


@pytest.mark.parametrize("message, label", [
    (operations.STOPPED_BY["person"], "Stopped by you"),
    (operations.STOPPED_BY_AT_ROUND["person"], "Stopped by you"),
    (operations.STOPPED_BY["headless_timeout"], "Stopped: time limit"),
    (operations.STOPPED_BY_AT_ROUND["headless_timeout"], "Stopped: time limit"),
    (operations.DENY_MESSAGES["server_config_changed"], "Denied"),
    (operations.DENY_MESSAGES["timeout"], "Expired"),
])
def test_the_shown_status_of_a_denied_operation(message, label):
    op = Operation(status="denied", error_code="denied", error_message=message)
    assert outcomes.status_label(op) == label
    assert outcomes.rerunnable(op)
    if label == "Stopped by you":
        assert outcomes.status_label(op, own=False) == "Stopped by its person"
    assert outcomes.status_label(Operation(status="awaiting_input")) == "Waiting for your answer"


async def test_the_card_says_until_when_it_can_be_answered(seeded):
    """The card names its round's deadline (a <time> in UTC the viewer's zone script rewrites), so a
    person on the card knows how long they have, not only the navigation's list."""
    client, op = await waiting_round(seeded, "gitlab", shown=True)
    row = await Operation.objects.aget(pk=op.pk)
    assert row.round_expires_at is not None
    panel = _panel((await client.get(f"/mcp/operations/{op.id}/")).content.decode())
    iso = row.round_expires_at.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    clock = row.round_expires_at.astimezone(dt.timezone.utc).strftime("%H:%M:%S")
    assert re.search(rf'<p class="round-expiry muted">Answer before <time class="when" datetime="{iso}"[^>]*>'
                     rf'{clock} UTC</time>: after that this round closes and nothing is sent.</p>', panel), panel


async def test_change_the_arguments_shows_the_operations_own_arguments_to_edit(seeded):
    """"Change the arguments" opens the tool's call page with the ended operation's arguments
    filled in; someone else's operation id, or one that is no id, fills in nothing."""
    client, op = await waiting_round(seeded, "stop-and-change", shown=True)
    assert (await client.post(f"/mcp/operations/{op.id}/stop/")).status_code == 302
    row = await Operation.objects.aget(pk=op.pk)
    assert results.stored_params(row.params)["arguments"] == {"provider": "stop-and-change"}
    panel = _panel((await client.get(f"/mcp/operations/{op.id}/")).content.decode())
    href = html.unescape(re.search(r'<a class="change-arguments" href="([^"]+)"', panel).group(1))
    assert href.endswith(f"&from={op.id}")
    filled = 'name="arg-provider" value="stop-and-change"'
    page = (await client.get(href)).content.decode()
    assert filled in page, page
    plain = href.split("&from=")[0]
    assert filled not in (await client.get(plain)).content.decode()
    assert filled not in (await client.get(f"{plain}&from=not-a-uuid")).content.decode()
    carol = AsyncClient()  # acme too: the same page, but alice's operation is not hers
    await carol.aforce_login(seeded["users"]["carol"])
    theirs = await carol.get(href)
    assert theirs.status_code == 200 and filled not in theirs.content.decode()
