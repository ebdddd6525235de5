"""The review step: Accept shows what will be sent and sends nothing; Send sends exactly the
reviewed answers once; Change shows the card again pre-filled; a Send whose answers differ from
the reviewed ones, or whose review token is missing, forged, for another round or expired, is
refused (400, a stable message, the reason logged) and nothing reaches the MCP server.

Real parts: the demo MCP server over Streamable HTTP on loopback, the whole Django stack.
"""

from __future__ import annotations

import html
import json
import logging
from html.parser import HTMLParser

import pytest
from django.core import signing
from django.test import AsyncClient

from mrtrweb import operations, views
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.answering import (
    DEPLOY_OK, ONBOARD_OK, answer_url, post_answer, post_review, reload_op, review_token, reviewed_page,
    signed_client, start_call,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


class _Inputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, list[tuple[str, bool]]] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("type") != "hidden" and a.get("name"):
            self.found.setdefault(a["name"], []).append((a.get("value") or "", "checked" in a))


def _inputs(page: str) -> dict[str, list[tuple[str, bool]]]:
    """The visible inputs of a page: name -> [(value, checked)] (values unescaped)."""
    parser = _Inputs()
    parser.feed(page)
    return parser.found


async def _deploy(seeded, **args):
    client = await signed_client(seeded["users"]["alice"])
    op = await start_call(client, seeded["servers"]["acme"], "deploy", {"env": "production", "replicas": "3", **args})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    return client, op


async def test_accept_shows_the_review_and_sends_nothing(seeded):
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    hostile = "<b>CHG</b>&\"1'"
    page, token = await reviewed_page(client, op, dict(DEPLOY_OK, **{"in-confirm_deploy-ticket": hostile,
                                                                 "in-confirm_deploy-window": ""}))
    assert mcp.calls[("deploy", True)] == 0
    assert (await reload_op(op)).status == Operation.Status.AWAITING_INPUT
    assert "Review your answer before sending" in page and "Nothing has been sent yet." in page
    assert 'class="card review"' in page and 'value="send"' in page and 'value="change"' in page
    assert 'value="accept"' not in page  # the card's own buttons are not on the review
    # who asks and what happens next
    assert '<strong class="server-name">Demo server</strong>' in page
    assert "Send gives this answer to Demo server as the retry of tools/call deploy." in page
    assert "Deploy 3 replica(s) to production?" in page
    # each field label with the value as it will be sent; server text and answers escaped
    assert '<dt data-name="ticket">Change ticket</dt>' in page
    assert f'<span class="review-value">{html.escape(hostile)}</span>' in page and hostile not in page
    # read as a person reads them: yes/no, the option's title, the chosen options as a list
    assert '<dd data-name="confirm"><span class="review-value">Yes</span>' in page
    assert '<dd data-name="region"><span class="review-value">US East (N. Virginia)</span>' in page
    assert ('<dd data-name="notify"><ul class="review-value review-list"><li>email</li><li>slack</li></ul>'
            in page)
    assert "[&quot;email&quot;" not in page.split('<details class="review-json">')[0]  # no raw JSON in the list
    # the empty window is filled with the server's default by the gate: the review says so
    assert ('<dd data-name="window"><span class="review-value">2</span> '
            '<span class="muted">(the server\'s default)</span>') in page
    # exactly what is sent, one click away: the content as JSON (defaults filled), escaped
    sent = page.split('<pre class="review-json-text" dir="ltr">')[1].split("</pre>")[0]
    assert json.loads(html.unescape(sent)) == {
        "confirm": True, "ticket": hostile, "email": "ops@example.test", "region": "us-east-1",
        "notify": ["email", "slack"], "window": 2}
    # the answers ride along as hidden fields (escaped), with the token and CSRF
    assert f'name="in-confirm_deploy-ticket" value="{html.escape(hostile)}"' in page
    assert 'name="csrfmiddlewaretoken"' in page
    # the review wrote no consent receipt of its own (the card's GET did)
    assert await AuditEvent.objects.filter(operation_id=op.id, event="shown").acount() == 1

    resp = await client.post(answer_url(op), dict(DEPLOY_OK, action="send", round="1", review_token=token,
                                            **{"in-confirm_deploy-ticket": hostile, "in-confirm_deploy-window": ""}))
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    retries = [r for r in mcp.log.tool_calls("deploy") if r.is_retry]
    assert len(retries) == 1
    assert retries[0].params["inputResponses"]["confirm_deploy"]["content"]["ticket"] == hostile
    assert retries[0].params["inputResponses"]["confirm_deploy"]["content"]["window"] == 2


async def test_change_shows_the_card_prefilled_and_sends_nothing(seeded):
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    await reviewed_page(client, op, DEPLOY_OK)
    resp = await client.post(answer_url(op), dict(DEPLOY_OK, action="change", round="1"))
    page = resp.content.decode()
    assert resp.status_code == 200
    # no review form (the phrase itself is also in the page's live-region texts, operation.html)
    assert 'class="card"' in page and 'value="accept"' in page and 'class="card review"' not in page
    fields = _inputs(page)
    assert fields["in-confirm_deploy-ticket"] == [("CHG-1042", False)]
    assert fields["in-confirm_deploy-email"] == [("ops@example.test", False)]
    assert fields["in-confirm_deploy-window"] == [("3", False)]
    assert fields["in-confirm_deploy-confirm"] == [("", True)]
    assert fields["in-confirm_deploy-notify"] == [("email", True), ("slack", True), ("pager", False)]
    assert '<option value="us-east-1" selected>' in page
    assert "field-error" not in page
    assert mcp.calls[("deploy", True)] == 0
    # changed, reviewed again, sent: the new answer is what arrives
    changed = dict(DEPLOY_OK, **{"in-confirm_deploy-ticket": "CHG-2000"})
    resp = await post_answer(client, answer_url(op), dict(changed, action="accept", round="1"))
    assert resp.status_code == 302
    await operations.wait_idle()
    retry = [r for r in mcp.log.tool_calls("deploy") if r.is_retry]
    assert len(retry) == 1 and retry[0].params["inputResponses"]["confirm_deploy"]["content"]["ticket"] == "CHG-2000"


@pytest.mark.parametrize("alter", [
    {"in-confirm_deploy-ticket": "CHG-6666"},  # another value
    {"in-confirm_deploy-notify": ["email"]},  # one option fewer
    {"in-confirm_deploy-confirm": ""},  # unticked (an absent box is false)
    {"in-confirm_deploy-window": ""},  # emptied: the default 2 would be sent instead of 3
])
async def test_send_with_answers_other_than_the_reviewed_is_refused(seeded, caplog, alter):
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    _, token = await reviewed_page(client, op, DEPLOY_OK)
    posted = {k: v for k, v in dict(DEPLOY_OK, **alter).items() if v != ""}
    with caplog.at_level(logging.INFO, logger="mrtrweb"):
        resp = await client.post(answer_url(op), dict(posted, action="send", round="1", review_token=token))
    await operations.wait_idle()
    page = resp.content.decode()
    assert resp.status_code == 400
    assert views.REVIEW_CHANGED_MESSAGE in html.unescape(page)
    assert 'value="accept"' in page  # the card again, to review once more
    assert mcp.calls[("deploy", True)] == 0
    assert (await reload_op(op)).status == Operation.Status.AWAITING_INPUT
    logged = caplog.text
    assert "Send refused, nothing sent (answers differ from the reviewed ones)" in logged
    assert token not in logged and "CHG-1042" not in logged and "CHG-6666" not in logged
    # the reviewed answers still go through: nothing was lost
    resp = await client.post(answer_url(op), dict(DEPLOY_OK, action="send", round="1", review_token=token))
    assert resp.status_code == 302
    await operations.wait_idle()
    assert mcp.calls[("deploy", True)] == 1
    assert (await reload_op(op)).status == Operation.Status.COMPLETED


def _forged(token: str) -> str:
    value, _, signature = token.rpartition(":")
    return f"{value}:{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"


@pytest.mark.parametrize("case", ["missing", "forged", "other_salt", "other_round", "other_operation", "expired"])
async def test_send_without_a_valid_review_is_refused(seeded, caplog, monkeypatch, case):
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    _, token = await reviewed_page(client, op, DEPLOY_OK)
    reason = {"missing": "no review token", "forged": "review token bad signature",
              "other_salt": "review token bad signature", "expired": "review token expired",
              "other_round": "review token for another operation or round",
              "other_operation": "review token for another operation or round"}[case]
    payload = signing.loads(token, salt=views.REVIEW_SALT)
    if case == "missing":
        token = ""
    elif case == "forged":
        token = _forged(token)
    elif case == "other_salt":
        token = signing.dumps(payload, salt="another.salt", compress=True)
    elif case == "other_round":
        token = signing.dumps(dict(payload, round=2), salt=views.REVIEW_SALT, compress=True)
    elif case == "other_operation":
        _, other = await _deploy(seeded)
        _, other_token = await reviewed_page(client, other, DEPLOY_OK)
        token = other_token  # a genuine review of the same answers, for another operation
    elif case == "expired":
        monkeypatch.setattr(views.review, "REVIEW_MAX_AGE_S", -1)
    with caplog.at_level(logging.INFO, logger="mrtrweb"):
        resp = await client.post(answer_url(op), dict(DEPLOY_OK, action="send", round="1", review_token=token))
    await operations.wait_idle()
    assert resp.status_code == 400
    assert views.REVIEW_INVALID_MESSAGE in html.unescape(resp.content.decode())
    assert f"Send refused, nothing sent ({reason})" in caplog.text
    assert mcp.calls[("deploy", True)] == 0
    assert (await reload_op(op)).status == Operation.Status.AWAITING_INPUT


async def test_send_and_change_need_csrf(seeded):
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    _, token = await reviewed_page(client, op, DEPLOY_OK)
    strict = AsyncClient(enforce_csrf_checks=True)
    await strict.aforce_login(seeded["users"]["alice"])
    for action in ("send", "change", "accept"):
        resp = await strict.post(answer_url(op), dict(DEPLOY_OK, action=action, round="1", review_token=token))
        assert resp.status_code == 403
    assert mcp.calls[("deploy", True)] == 0


async def test_a_review_of_a_closed_round_sends_nothing(seeded):
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    _, token = await reviewed_page(client, op, DEPLOY_OK)
    assert (await client.post(answer_url(op), dict(DEPLOY_OK, action="send", round="1", review_token=token))).status_code == 302
    await operations.wait_idle()
    again = await client.post(answer_url(op), dict(DEPLOY_OK, action="send", round="1", review_token=token))
    assert again.status_code == 409  # the same review cannot send twice
    assert mcp.calls[("deploy", True)] == 1


async def test_a_round_answered_meanwhile_shows_no_review(seeded, monkeypatch):
    """Two tabs (or workers): this tab's Accept passed the checks, then the other tab's Send
    answered the round before the review was rendered. No review (its Send could only fail) and no
    silent 200 page: 409 saying the round is no longer open."""
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    assert (await client.get(f"/mcp/operations/{op.id}/")).status_code == 200
    real = views._review_response

    async def answered_elsewhere_first(request, op_, *args, **kwargs):
        await Operation.objects.filter(pk=op_.pk).aupdate(status=Operation.Status.RUNNING)
        return await real(request, op_, *args, **kwargs)

    monkeypatch.setattr(views.answers, "_review_response", answered_elsewhere_first)
    resp, token = await post_review(client, answer_url(op), dict(DEPLOY_OK, round="1"))
    assert resp.status_code == 409 and token is None
    page = resp.content.decode()
    assert str(views.common.ANSWER_NOT_SENT) in html.unescape(page)  # "Your answer was not sent: ... no longer open"
    assert 'class="card review"' not in page  # no review form
    assert mcp.calls[("deploy", True)] == 0


async def test_decline_needs_no_review(seeded):
    mcp = seeded["mcp"]
    client, op = await _deploy(seeded)
    card = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert ("Accept shows you what will be sent, to review before you send it. Decline and Cancel are sent to the "
            "server at once as your answer.") in card
    resp = await client.post(answer_url(op), {"action": "decline", "round": "1"})
    assert resp.status_code == 302
    await operations.wait_idle()
    assert mcp.calls[("deploy", True)] == 1 and (await reload_op(op)).status == Operation.Status.COMPLETED


async def test_url_mode_review_says_accept_with_no_content(seeded):
    mcp = seeded["mcp"]
    client = await signed_client(seeded["users"]["alice"])
    op = await start_call(client, seeded["servers"]["acme"], "connect_account", {"provider": "github"})
    page, token = await reviewed_page(client, op, {})
    assert "You confirm that you are done at auth.example.test. The server receives “accept”, with no content." in page
    assert mcp.calls[("connect_account", True)] == 0
    resp = await client.post(answer_url(op), {"action": "send", "round": "1", "review_token": token})
    assert resp.status_code == 302
    await operations.wait_idle()
    retry = [r for r in mcp.log.tool_calls("connect_account") if r.is_retry]
    assert len(retry) == 1 and retry[0].params["inputResponses"] == {"authorize": {"action": "accept"}}


async def test_roots_review_shows_the_roots_and_sends_them(seeded):
    mcp, server = seeded["mcp"], seeded["servers"]["acme"]
    roots = [{"uri": "file:///home/alice/projects", "name": "Mine <b>"}]
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_roots=True, roots=roots)
    client = await signed_client(seeded["users"]["alice"])
    op = await start_call(client, server, "list_my_roots", {})
    page, token = await reviewed_page(client, op, {})
    assert "The server receives exactly these roots:" in page
    assert '<code class="root-uri">file:///home/alice/projects</code> — <span class="root-name">Mine &lt;b&gt;</span>' in page
    assert mcp.calls[("list_my_roots", True)] == 0
    # the roots configured after the review are not the reviewed ones: refused, nothing sent
    await McpServer.objects.filter(pk=server.pk).aupdate(roots=[{"uri": "file:///other"}])
    resp = await client.post(answer_url(op), {"action": "send", "round": "1", "review_token": token})
    assert resp.status_code == 400 and views.REVIEW_CHANGED_MESSAGE in html.unescape(resp.content.decode())
    assert mcp.calls[("list_my_roots", True)] == 0


async def test_sampling_review_shows_the_reply_and_sends_exactly_it(seeded, caplog):
    mcp, server = seeded["mcp"], seeded["servers"]["acme"]
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_sampling=True)
    client = await signed_client(seeded["users"]["alice"])
    op = await start_call(client, server, "summarize_with_sampling", {"text": "hello"})
    fields = {"in-summary-approve": "on", "in-summary-reply": "Short <i>reply</i>"}
    page, token = await reviewed_page(client, op, fields)
    assert '<code class="reply-model">human</code>' in page
    assert '<pre class="reply-text">Short &lt;i&gt;reply&lt;/i&gt;</pre>' in page
    assert mcp.calls[("summarize_with_sampling", True)] == 0
    with caplog.at_level(logging.INFO, logger="mrtrweb"):
        refused = await client.post(answer_url(op), dict(fields, action="send", round="1", review_token=token,
                                                   **{"in-summary-reply": "Another reply"}))
    assert refused.status_code == 400 and mcp.calls[("summarize_with_sampling", True)] == 0
    assert "answers differ from the reviewed ones" in caplog.text and "Another reply" not in caplog.text
    resp = await client.post(answer_url(op), dict(fields, action="send", round="1", review_token=token))
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert op.result["content"][0]["text"] == "Summary (human): Short <i>reply</i>"


async def test_review_token_and_values_are_not_in_the_audit_rows(seeded):
    client, op = await _deploy(seeded)
    _, token = await reviewed_page(client, op, DEPLOY_OK)
    assert (await client.post(answer_url(op), dict(DEPLOY_OK, action="send", round="1", review_token=token))).status_code == 302
    await operations.wait_idle()
    rows = [e async for e in AuditEvent.objects.filter(operation_id=op.id).values()]
    text = repr(rows)
    assert rows and token not in text and "CHG-1042" not in text and "ops@example.test" not in text


def test_review_token_helper_reads_only_reviews():
    class R:
        status_code = 400
        content = b'<input type="hidden" name="review_token" value="x">'

    assert review_token(R()) is None


async def test_a_card_of_two_requests_is_reviewed_and_sent_together(seeded):
    mcp = seeded["mcp"]
    client = await signed_client(seeded["users"]["alice"])
    op = await start_call(client, seeded["servers"]["acme"], "onboard_team", {"team": "core"})
    assert op.status == Operation.Status.AWAITING_INPUT, (op.error_code, op.error_message)
    card = (await client.get(f"/mcp/operations/{op.id}/")).content.decode()
    assert card.count('class="input-request"') == 2 and 'data-kind="form"' in card and 'data-kind="url"' in card
    assert 'type="number"' in card and 'step="any"' in card and 'type="url"' in card
    assert 'name="in-profile-budget" value="250.5"' in card  # the number default, pre-filled
    # invalid in both places: the pattern and maxItems; nothing sent
    bad = await client.post(answer_url(op), dict(ONBOARD_OK, action="accept", round="1",
                                          **{"in-profile-display_name": "Core/ops",
                                             "in-profile-channels": ["chat", "mail", "wiki"]}))
    assert bad.status_code == 400 and bad.content.decode().count('class="field-error"') == 2
    page, token = await reviewed_page(client, op, ONBOARD_OK)
    assert page.count('class="review-request"') == 2
    assert '<span class="review-value">99.5</span>' in page
    assert '<ul class="review-value review-list"><li>Team chat</li><li>Wiki</li></ul>' in page
    assert '<dd data-name="size"><span class="review-value">6 to 20 people</span>' in page
    assert "You confirm that you are done at sso.example.test." in page
    assert mcp.calls[("onboard_team", True)] == 0
    resp = await client.post(answer_url(op), dict(ONBOARD_OK, action="send", round="1", review_token=token))
    assert resp.status_code == 302
    await operations.wait_idle()
    op = await reload_op(op)
    assert op.status == Operation.Status.COMPLETED, (op.error_code, op.error_message)
    assert op.result["content"][0]["text"] == ("Team core onboarded (name Core ops; budget 99.5 EUR; channels chat, "
                                               "wiki; page https://core.example.test/; size medium); "
                                               "single sign-on confirmed.")
    retry = [r for r in mcp.log.tool_calls("onboard_team") if r.is_retry]
    assert len(retry) == 1 and set(retry[0].params["inputResponses"]) == {"profile", "sso"}
    assert retry[0].params["inputResponses"]["sso"] == {"action": "accept"}


async def test_the_legacy_hold_notice_shows_only_when_set(seeded):
    from asgiref.sync import sync_to_async
    from django.template.loader import render_to_string

    from mrtrweb.consent.panels import panel_context

    client, op = await _deploy(seeded)
    op = await Operation.objects.select_related("server", "tenant").aget(pk=op.pk)

    def render(**extra) -> str:
        ctx = panel_context(op)
        ctx.update(extra, csrf_token="t")
        return render_to_string("mrtrweb/_panel.html", ctx)

    import datetime

    deadline = datetime.datetime(2026, 11, 30, 12, 34, 56, tzinfo=datetime.timezone.utc)
    op.round_expires_at = deadline  # a legacy round's one deadline is its hold's (the card, the waiting list)
    held = await sync_to_async(render)(legacy_hold={"deadline": deadline, "method": "elicitation/create", "round": 1})
    assert '<aside class="legacy-notice" role="note"' in held
    assert "The server is holding its call open while you decide." in held
    # the deadline in UTC naming its zone; times.js shows it in the viewer's zone (title keeps UTC)
    assert ('<time class="when" datetime="2026-11-30T12:34:56Z" title="2026-11-30 12:34:56 UTC" data-when="time">'
            '12:34:56 UTC</time>') in held
    assert held.index("legacy-notice") < held.index('class="card"')
    assert "legacy-notice" not in await sync_to_async(render)()


@pytest.mark.parametrize("tool,fields", [("list_my_roots", {}),
                                         ("summarize_with_sampling", {"in-summary-approve": "on",
                                                                      "in-summary-reply": "R"})])
async def test_a_deprecated_card_needs_its_review_to_send(seeded, caplog, tool, fields):
    mcp, server = seeded["mcp"], seeded["servers"]["acme"]
    await McpServer.objects.filter(pk=server.pk).aupdate(allow_roots=True, allow_sampling=True,
                                                         roots=[{"uri": "file:///srv/data"}])
    client = await signed_client(seeded["users"]["alice"])
    op = await start_call(client, server, tool, {"text": "x"} if tool == "summarize_with_sampling" else {})
    _, token = await reviewed_page(client, op, fields)
    with caplog.at_level(logging.INFO, logger="mrtrweb"):
        missing = await client.post(answer_url(op), dict(fields, action="send", round="1"))
        forged = await client.post(answer_url(op), dict(fields, action="send", round="1", review_token=_forged(token)))
    for resp in (missing, forged):
        assert resp.status_code == 400 and views.REVIEW_INVALID_MESSAGE in html.unescape(resp.content.decode())
    assert "(no review token)" in caplog.text and "(review token bad signature)" in caplog.text
    assert mcp.calls[(tool, True)] == 0 and (await reload_op(op)).status == Operation.Status.AWAITING_INPUT
    resp = await client.post(answer_url(op), dict(fields, action="send", round="1", review_token=token))
    assert resp.status_code == 302
    await operations.wait_idle()
    assert mcp.calls[(tool, True)] == 1 and (await reload_op(op)).status == Operation.Status.COMPLETED
