"""The headless client (mrtrweb.headless and manage.py mrtr_client) against the real demo MCP
server on loopback: the browser's code path (start_operation, gate, consent receipt, answer_round,
audit) answered by scripted consent policies; exit codes; no values in logs or audit rows."""

from __future__ import annotations

import json
import logging

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from mrtrweb.headless import client as headless
from mrtrweb import operations
from mrtrweb.headless.client import ConsentPolicy, HeadlessError
from mrtrweb.management.commands import mrtr_client
from mrtrweb.models import AuditEvent, McpServer, Membership, Operation, Tenant
from tests.answering import post_answer

pytestmark = [pytest.mark.django_db(transaction=True)]


def _events(op_id: str) -> list[str]:
    return list(AuditEvent.objects.filter(operation_id=op_id).order_by("sequence").values_list("event", flat=True))


async def _aevents(op_id: str) -> list[tuple[str, int, str]]:
    return [(e.event, e.round_number, e.reason) async for e in
            AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")]


def _text(outcome: headless.HeadlessOutcome) -> str:
    return " ".join(c.get("text", "") for c in (outcome.result or {}).get("content", []))


async def _run(seeded, tool: str, arguments: dict, consent: ConsentPolicy, **kw) -> headless.HeadlessOutcome:
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    return await headless.arun(url=server.url, user=alice, tenant=server.tenant, method="tools/call",
                               params={"name": tool, "arguments": arguments}, consent=consent, **kw)


async def test_accept_defaults_completes_a_form_round_with_the_browsers_audit_trail(seeded):
    outcome = await _run(seeded, "wait_then_ask", {"seconds": 0}, ConsentPolicy.parse("accept-defaults"))
    assert outcome.status == "completed" and outcome.error_code == ""
    assert _text(outcome) == "Went on."  # the schema default go=true was sent
    assert outcome.rounds == 1
    events = await _aevents(outcome.operation_id)
    assert [e for e, _, _ in events] == ["received", "shown", "submitted", "completed"]
    shown = next(r for e, _, r in events if e == "shown")
    assert shown == "headless: scripted consent policy accept-defaults"
    # the same server row is reused for the URL, in the tenant
    op = await Operation.objects.select_related("server").aget(pk=outcome.operation_id)
    assert op.server_id == seeded["servers"]["acme"].pk
    sub = await AuditEvent.objects.aget(operation_id=outcome.operation_id, event="submitted")
    assert sub.actions == {"go_on": "accept"}


async def test_state_only_round_then_a_form_without_default_is_cancelled(seeded):
    outcome = await _run(seeded, "busy_report", {"topic": "ops"}, ConsentPolicy.parse("accept-defaults"))
    assert outcome.status == "completed", outcome
    # a required single-select without default: never its first option, the round is cancelled
    assert _text(outcome) == "Report cancelled by the user; nothing was done."
    assert outcome.missing_defaults == ("format.format",)
    assert outcome.rounds == 2
    events = await _aevents(outcome.operation_id)
    # round 1 is requestState-only: retried by the operation itself, nothing shown to anyone
    assert [(e, n) for e, n, _ in events] == [("received", 1), ("submitted", 1), ("received", 2), ("shown", 2),
                                              ("submitted", 2), ("cancelled", 2)]
    sub = await AuditEvent.objects.filter(operation_id=outcome.operation_id, event="submitted").order_by("-sequence") \
        .afirst()
    assert sub.actions == {"format": "cancel"}


async def test_multi_round_with_an_answers_file(seeded, tmp_path):
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"dates": {"start": "2026-12-01", "nights": 2},
                                   "seat": {"seat": "aisle", "confirm": True}}))
    outcome = await _run(seeded, "book_trip", {"destination": "Oslo"}, ConsentPolicy.parse(f"answers:{answers}"))
    assert outcome.status == "completed", outcome
    assert _text(outcome) == "Booked 2 night(s) in Oslo from 2026-12-01, aisle seat."
    assert outcome.rounds == 2
    events = await _aevents(outcome.operation_id)
    assert [(e, n) for e, n, _ in events if e in ("shown", "submitted")] == [
        ("shown", 1), ("submitted", 1), ("shown", 2), ("submitted", 2)]
    # the retry reached the server exactly once per round
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls("book_trip")] == [False, True, True]


@pytest.mark.parametrize("policy, text, last_event", [
    ("decline", "Deployment declined by the user; nothing was done.", "completed"),
    ("cancel", "Deployment cancelled by the user; nothing was done.", "cancelled"),
])
async def test_decline_and_cancel(seeded, policy, text, last_event):
    outcome = await _run(seeded, "deploy", {"env": "staging", "replicas": 1}, ConsentPolicy.parse(policy))
    assert outcome.status == "completed"
    assert _text(outcome) == text
    events = await _aevents(outcome.operation_id)
    assert events[-1][0] == last_event
    sub = await AuditEvent.objects.aget(operation_id=outcome.operation_id, event="submitted")
    assert sub.actions == {"confirm_deploy": policy}


async def test_accept_defaults_cancels_a_form_its_defaults_cannot_answer(seeded):
    # deploy requires a confirmation and a ticket, with no default for either: a machine does not invent them
    outcome = await _run(seeded, "deploy", {"env": "staging", "replicas": 1}, ConsentPolicy.parse("accept-defaults"))
    assert outcome.status == "completed"
    assert _text(outcome) == "Deployment cancelled by the user; nothing was done."
    assert outcome.missing_defaults == ("confirm_deploy.confirm", "confirm_deploy.ticket")


@pytest.mark.parametrize("policy, url_done, text", [
    ("accept-defaults", False, "Account connection declined by the user; nothing was done."),
    ("accept-defaults", True, "Account at github connected."),
    ({"authorize": "cancel"}, True, "Account connection cancelled by the user; nothing was done."),
    ({}, False, "Account connection declined by the user; nothing was done."),
])
async def test_url_mode_is_declined_unless_vouched_done(seeded, policy, url_done, text):
    consent = ConsentPolicy.parse(policy, url_done=url_done) if isinstance(policy, str) \
        else ConsentPolicy.from_answers(policy, url_done=url_done)
    outcome = await _run(seeded, "connect_account", {"provider": "github"}, consent)
    assert outcome.status == "completed"
    assert _text(outcome) == text


async def test_an_answer_the_gate_refuses_denies_the_operation_and_sends_nothing(seeded):
    consent = ConsentPolicy.from_answers({"dates": {"start": "not a date", "nights": 99}})
    outcome = await _run(seeded, "book_trip", {"destination": "Oslo"}, consent)
    assert outcome.status == "denied"
    assert [e for e, _, _ in await _aevents(outcome.operation_id)] == ["received", "shown", "rejected", "denied"]
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls("book_trip")] == [False]


async def _refused(outcome, seeded, tool: str) -> None:
    assert outcome.status == "denied"
    assert await AuditEvent.objects.filter(operation_id=outcome.operation_id, event="denied",
                                           reason="deprecated_request_refused").aexists()
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls(tool)] == [False]


async def test_sampling_is_never_approved_by_accept_defaults(seeded):
    server = seeded["servers"]["acme"]
    server.allow_sampling = True
    await server.asave()
    outcome = await _run(seeded, "summarize_with_sampling", {"text": "x"}, ConsentPolicy.parse("accept-defaults"))
    await _refused(outcome, seeded, "summarize_with_sampling")


@pytest.mark.parametrize("answers", [{}, {"summary": "decline"}, {"summary": "cancel"}])
async def test_sampling_not_named_in_the_answers_file_is_refused(seeded, answers):
    server = seeded["servers"]["acme"]
    server.allow_sampling = True
    await server.asave()
    outcome = await _run(seeded, "summarize_with_sampling", {"text": "x"}, ConsentPolicy.from_answers(answers))
    await _refused(outcome, seeded, "summarize_with_sampling")


async def test_sampling_approved_in_the_answers_file_gets_the_providers_reply(seeded):
    server = seeded["servers"]["acme"]
    server.allow_sampling = True
    await server.asave()
    consent = ConsentPolicy.from_answers({"summary": {"reply": "A short summary."}})
    outcome = await _run(seeded, "summarize_with_sampling", {"text": "x"}, consent)
    assert outcome.status == "completed", outcome
    assert "A short summary." in _text(outcome)
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls("summarize_with_sampling")] == [False, True]
    submitted = await AuditEvent.objects.aget(operation_id=outcome.operation_id, event="submitted")
    assert "A short summary." not in json.dumps(submitted.actions)  # digests and actions only


@pytest.mark.parametrize("policy", ["accept-defaults", "answers"])
async def test_roots_are_answered_with_the_configured_roots_by_an_accepting_policy(seeded, policy):
    server = seeded["servers"]["acme"]
    server.allow_roots = True
    server.roots = [{"uri": "file:///srv/projects", "name": "projects"}]
    await server.asave()
    consent = ConsentPolicy.parse(policy) if policy != "answers" else ConsentPolicy.from_answers({"roots": {}})
    outcome = await _run(seeded, "list_my_roots", {}, consent)
    assert outcome.status == "completed", outcome
    assert _text(outcome) == "Roots: file:///srv/projects (projects)"


@pytest.mark.parametrize("consent", [ConsentPolicy.parse("decline"), ConsentPolicy.from_answers({}),
                                     ConsentPolicy.from_answers({"roots": "decline"})])
async def test_roots_are_refused_unless_the_policy_accepts(seeded, consent):
    server = seeded["servers"]["acme"]
    server.allow_roots = True
    server.roots = [{"uri": "file:///srv/projects", "name": "projects"}]
    await server.asave()
    outcome = await _run(seeded, "list_my_roots", {}, consent)
    await _refused(outcome, seeded, "list_my_roots")


async def test_roots_not_allowed_by_the_admin_are_refused_by_the_gate_whatever_the_policy(seeded):
    outcome = await _run(seeded, "list_my_roots", {}, ConsentPolicy.parse("accept-defaults"))
    assert outcome.status == "failed"
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls("list_my_roots")] == [False]


async def test_timeout_stops_the_operation(seeded):
    outcome = await _run(seeded, "long_task", {"seconds": 10}, ConsentPolicy.parse("decline"), timeout_s=1)
    assert outcome.status == "timeout" and outcome.error_code == "headless_timeout"
    op = await Operation.objects.aget(pk=outcome.operation_id)
    assert op.status == "denied"  # stopped as the person's Stop button does
    # ... but says who stopped it: the time limit, not the person
    assert op.error_message == "The headless client's time limit passed; the call was cancelled at the server."


async def test_a_timeout_while_a_round_waits_says_so(seeded):
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    op = await operations.start_operation(user=alice, server=server, method="tools/call", name="deploy",
                                          params={"name": "deploy", "arguments": {"env": "staging", "replicas": 2}})
    await operations.wait_idle()
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == "awaiting_input"
    assert await operations.stop_operation(op, by="headless_timeout")
    op = await Operation.objects.aget(pk=op.pk)
    assert op.status == "denied"
    assert op.error_message == "The headless client's time limit passed; nothing was sent for its open round."
    assert await AuditEvent.objects.filter(operation_id=op.id, event="denied", reason="cancelled").aexists()
    assert [c.has_input_responses for c in seeded["mcp"].log.tool_calls("deploy")] == [False]


async def test_stop_by_must_be_known(seeded):
    with pytest.raises(ValueError):
        await operations.stop_operation(Operation(), by="someone")


async def test_not_a_member_is_refused_before_anything_is_sent(seeded):
    bob, acme = seeded["users"]["bob"], seeded["servers"]["acme"]
    with pytest.raises(HeadlessError) as info:
        await headless.arun(url=acme.url, user=bob, tenant=acme.tenant, method="tools/call",
                            params={"name": "echo", "arguments": {"text": "x"}}, consent=ConsentPolicy("decline"))
    assert info.value.code == "not_a_member"
    assert seeded["mcp"].log.tool_calls() == []


def test_policy_parsing(tmp_path):
    assert ConsentPolicy.parse("decline").kind == "decline"
    for bad in ("yes", "answers:" + str(tmp_path / "missing.json")):
        with pytest.raises(HeadlessError):
            ConsentPolicy.parse(bad)
    (tmp_path / "a.json").write_text('{"k": 3}')
    with pytest.raises(HeadlessError):
        ConsentPolicy.parse(f"answers:{tmp_path / 'a.json'}")


def test_synthesized_arguments_never_follow_refs():
    schema = {"type": "object", "required": ["a", "b", "c", "d", "e", "f"],
              "properties": {"a": {"type": "number"}, "b": {"type": "integer", "minimum": 2},
                             "c": {"enum": ["x", "y"]}, "d": {"type": "boolean"},
                             "e": {"$ref": "https://canary.example/schema.json"}, "f": {"default": [1]},
                             "g": {"type": "string"}}}
    assert mrtr_client.synthesize_arguments(schema) == {"a": 0, "b": 2, "c": "x", "d": False, "e": "", "f": [1]}


# -- the command ----------------------------------------------------------------------------------


def _command(*argv: str) -> int:
    try:
        call_command("mrtr_client", *argv)
    except SystemExit as exc:
        return int(exc.code)
    return 0


def test_command_default_identity_and_exit_codes(seeded, capsys, tmp_path):
    url = seeded["mcp"].url
    assert _command(url, "--tool", "echo", "--args", '{"text": "hello"}') == 0
    out = capsys.readouterr().out
    assert "tools/call echo: completed after 0 round(s)" in out and "  hello" in out
    # the dedicated headless user and tenant, created on first use, with a server row for the URL
    tenant = Tenant.objects.get(slug="headless")
    assert Membership.objects.filter(tenant=tenant, user__username="mrtr-headless").exists()
    assert McpServer.objects.filter(tenant=tenant, url=url).count() == 1
    assert _command(url, "--tool", "echo", "--args", '{"text": "again"}') == 0
    assert McpServer.objects.filter(tenant=tenant, url=url).count() == 1  # reused

    # 3 failed: the server asks round after round past the limit
    assert _command(url, "--tool", "endless", "--consent", "accept-defaults") == 3
    # 4 denied: the answer does not match the schema
    answers = tmp_path / "bad.json"
    answers.write_text('{"dates": {"start": "someday", "nights": 0}}')
    assert _command(url, "--tool", "book_trip", "--args", '{"destination": "Oslo"}', "--consent",
                    f"answers:{answers}") == 4
    # 7 timeout
    assert _command(url, "--tool", "long_task", "--args", '{"seconds": 10}', "--timeout", "1") == 7
    # 8 completed with a tool error: an argument the tool's schema refuses
    assert _command(url, "--tool", "echo", "--args", '{"text": 5}') == 8
    # 9 accept-defaults cancelled a round: required fields without a default, named on the outcome's line
    capsys.readouterr()
    assert _command(url, "--tool", "deploy", "--args", '{"env": "staging", "replicas": 1}',
                    "--consent", "accept-defaults") == 9
    assert "  accept-defaults answered cancel: required field(s) without a default: confirm_deploy.confirm, " \
           "confirm_deploy.ticket" in capsys.readouterr().out.splitlines()
    # 1 nothing run
    with pytest.raises(CommandError):
        call_command("mrtr_client", url, "--tool", "echo", "--consent", "sure")
    with pytest.raises(CommandError):
        call_command("mrtr_client", url, "--tool", "echo", "--user", "alice", "--tenant", "globex")


def test_command_json_output_and_named_identity(seeded, capsys):
    url = seeded["servers"]["acme"].url
    assert _command(url, "--prompt", "release_notes", "--args", '{"version": "1.2"}', "--consent", "decline",
                    "--user", "alice", "--tenant", "acme", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    (op,) = data["operations"]
    assert op["method"] == "prompts/get" and op["name"] == "release_notes" and op["status"] == "completed"
    assert op["rounds"] == 1 and op["exit_code"] == 0
    assert op["result"]["messages"][0]["content"]["text"] == "Write short, neutral release notes for version 1.2."
    # the tenant's existing server row for that URL was used
    assert Operation.objects.get(pk=op["operation_id"]).server_id == seeded["servers"]["acme"].pk
    assert _command(url, "--resource", "demo://reports/ops", "--consent", "cancel", "--user", "alice",
                    "--tenant", "acme") == 0
    assert "resources/read demo://reports/ops: completed after 1 round(s)" in capsys.readouterr().out


def test_command_list(seeded, capsys):
    assert _command(seeded["mcp"].url, "--list", "--json") == 0
    listing = json.loads(capsys.readouterr().out)
    assert "deploy" in [t["name"] for t in listing["tools"]]
    assert [t["uriTemplate"] for t in listing["resourceTemplates"]] == ["demo://reports/{team}"]


def test_command_list_as_text_shows_each_first_description_line(seeded, capsys):
    assert _command(seeded["mcp"].url, "--list") == 0
    out = capsys.readouterr().out
    assert "  deploy  Deploy the service to an environment, after a confirmation form." in out.splitlines()
    assert "['" not in out


def test_no_answer_value_or_request_state_in_logs_or_audit(seeded, tmp_path, caplog):
    secret_day = "2031-07-19"
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"dates": {"start": secret_day, "nights": 3},
                                   "seat": {"seat": "middle", "confirm": True}}))
    # the product's loggers at their most verbose (the SDK's own DEBUG logging prints whole messages:
    # it is off unless a deployment turns it on, see docs/security.md, "No secrets in logs")
    caplog.set_level(logging.DEBUG, logger="mrtrweb")
    assert _command(seeded["mcp"].url, "--tool", "book_trip", "--args", '{"destination": "Oslo"}',
                    "--consent", f"answers:{answers}") == 0
    states = [c.params["requestState"] for c in seeded["mcp"].log.tool_calls("book_trip") if c.has_request_state]
    assert len(states) == 2
    logged = caplog.text
    rows = json.dumps([list(r) for r in AuditEvent.objects.values_list()], default=str)
    for secret in (secret_day, *states):
        assert secret not in logged
        assert secret not in rows


def test_each_runs_every_listed_tool_and_prompt_once(seeded, capsys):
    code = _command(seeded["mcp"].url, "--each", "--consent", "accept-defaults", "--json")
    ops = json.loads(capsys.readouterr().out)["operations"]
    names = [(o["method"], o["name"]) for o in ops]
    assert ("tools/call", "deploy") in names and ("prompts/get", "release_notes") in names
    assert len(names) == len(set(names)) == 14  # twelve tools (not the app-only refresh_status), one prompt,
    assert ("resources/read", "ui://demo/service-status.html") in names  # and one resource: the app's
    by_name = {o["name"]: o for o in ops}
    assert by_name["echo"]["status"] == "completed" and by_name["wait_then_ask"]["status"] == "completed"
    assert by_name["endless"]["status"] == "failed"  # past the round limit
    assert code == next(o["exit_code"] for o in ops if o["exit_code"])  # the first non-zero one


async def test_headless_and_browser_write_the_same_audit_trail(seeded):
    """The same tool answered the same way in the browser and headless: the same events, each with
    the same kinds of digests; only the consent receipt's reason tells them apart."""
    from django.test import AsyncClient

    from mrtrweb import operations

    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    client = AsyncClient()
    await client.aforce_login(alice)
    resp = await client.post(f"/mcp/servers/{server.pk}/tools/wait_then_ask/", {"arg-seconds": "0"})
    assert resp.status_code == 302
    op_id = resp["Location"].rstrip("/").split("/")[-1]
    await operations.wait_idle()
    await client.get(f"/mcp/operations/{op_id}/")  # the person sees the card
    resp = await post_answer(client, f"/mcp/operations/{op_id}/answer/", {"action": "accept", "round": "1",
                                                                          "in-go_on-go": "on"})
    assert resp.status_code == 302
    await operations.wait_idle()
    outcome = await _run(seeded, "wait_then_ask", {"seconds": 0}, ConsentPolicy.parse("accept-defaults"))

    def shape(e: AuditEvent) -> tuple:
        return (e.event, e.round_number, bool(e.state_digest), sorted(e.schema_digests or {}), bool(e.display_digest),
                bool(e.config_digest), e.actions, e.code)

    browser = [e async for e in AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")]
    scripted = [e async for e in AuditEvent.objects.filter(operation_id=outcome.operation_id).order_by("sequence")]
    assert [shape(e) for e in browser] == [shape(e) for e in scripted]
    assert [e.reason for e in browser if e.event == "shown"] == [""]
    assert [e.reason for e in scripted if e.event == "shown"] == ["headless: scripted consent policy accept-defaults"]
    # the same display digest: the scripted agent was shown exactly what the person was
    assert {e.display_digest for e in browser if e.event == "shown"} == \
        {e.display_digest for e in scripted if e.event == "shown"}


def test_membership_and_the_server_row_are_read_in_one_statement(seeded):
    """Issue 30: before anything is listed or started, the headless client learns that the user
    is an active member and finds the tenant's server for the URL in one statement; a non-member
    or inactive user is refused, and a URL the tenant has no server for still gets one made."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    alice, bob, server = seeded["users"]["alice"], seeded["users"]["bob"], seeded["servers"]["acme"]
    tenant = server.tenant
    with CaptureQueriesContext(connection) as ctx:
        found = headless._member_server(alice, tenant, server.url)
    assert len(ctx.captured_queries) == 1
    assert found == headless.server_for(server.url, tenant)
    assert {f.attname: getattr(found, f.attname) for f in McpServer._meta.concrete_fields} == \
        {f.attname: getattr(server, f.attname) for f in McpServer._meta.concrete_fields}
    with pytest.raises(HeadlessError) as info:
        headless._member_server(bob, tenant, server.url)
    assert info.value.code == "not_a_member"
    made = headless._member_server(alice, tenant, "http://127.0.0.1:9/other-mcp")
    assert made.pk and made.tenant_id == tenant.pk and made.url == "http://127.0.0.1:9/other-mcp"
    type(alice).objects.filter(pk=alice.pk).update(is_active=False)
    with pytest.raises(HeadlessError):
        headless._member_server(type(alice).objects.get(pk=alice.pk), tenant, server.url)
