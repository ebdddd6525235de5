"""Issue 6: the headless client (``manage.py mrtr_client`` and :func:`mrtrweb.headless.arun`)
completes every tool, the prompt and the resource template of the TypeScript MRTR server
(``@modelcontextprotocol/server@2.4.0``, ``tests/ts_server/``), through the product's full path
(gate, binding store, consent receipt, audit) with a scripted consent policy.

Each test checks the result text the TypeScript server really produced, the command's exit code
and, from the TypeScript server's own log: one call plus one retry per round, each retry echoing
exactly the ``requestState`` minted for its round (consumed once, none refused), the 2026-07-28
protocol negotiated, and the exact ``inputResponses`` the scripted policy sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from mrtrweb.headless import client as headless
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.models import AuditEvent, McpServer, Operation
from tests.ts_peer import PROTOCOL_META, PROTOCOL_VERSION, ts_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]

DEFAULTS_CONTENT = {"accept": True, "nickname": "guest", "email": "guest@example.test", "seats": 1, "tip": 2.5,
                    "size": "m", "toppings": ["cheese", "basil"]}
CONNECT_URL = "https://auth.example.test/ts-connect"
VERIFY_URL = "https://verify.example.test/ts-verify"


@pytest.fixture
def peer(seeded, ts_server):  # noqa: F811
    """The TypeScript server with an empty log (the seeded tenants exist for the arun tests)."""
    ts_server.clear()
    return ts_server


# -- running the command ----------------------------------------------------------------------------


def _command(capsys, url: str, *argv: str) -> tuple[int, dict[str, Any]]:
    """``mrtr_client URL ARGV... --json``: (exit code, the one operation of its JSON output)."""
    capsys.readouterr()
    try:
        call_command("mrtr_client", url, *argv, "--json")
        code = 0
    except SystemExit as exc:
        code = int(exc.code)
    data = json.loads(capsys.readouterr().out)
    [op] = data["operations"]
    assert op["exit_code"] == code, (op, code)
    return code, op


def _tool_text(op: dict[str, Any]) -> str:
    assert op["status"] == "completed", op
    assert op["result"].get("isError") is not True, op["result"]
    [item] = op["result"]["content"]
    return item["text"]


def _answers_file(tmp_path, data: dict[str, Any]) -> str:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(data))
    return f"answers:{path}"


# -- what the TypeScript server received (the ideas of tests/interop/test_ts_server.py) ---------------------


def _assert_modern(peer) -> None:
    """2026-07-28 negotiated (``server/discover``, no ``initialize``); every request carried that
    version in ``MCP-Protocol-Version`` and its ``_meta``; every HTTP request went to the MCP
    endpoint (nothing else, e.g. a URL-mode page, was requested from this host)."""
    assert peer.rpc_requests("server/discover") and not peer.rpc_requests("initialize")
    http = peer.entries("request")
    assert http
    for entry in http:
        assert entry["protocolHeader"] == PROTOCOL_VERSION, entry
        assert entry["body"]["params"]["_meta"][PROTOCOL_META] == PROTOCOL_VERSION, entry
        assert (entry["httpMethod"], entry["path"]) == ("POST", "/mcp"), entry
    assert peer.entries("sdk-error") == []


def _assert_rounds(peer, calls: list[dict[str, Any]], minted: list[dict[str, Any]], consumed_as: str,
                   answers: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """One first call, then one retry per minted state, each retry echoing exactly the state of its
    round (and carrying exactly ``answers[i]`` as ``inputResponses``, none for ``None``); every
    state consumed once, none refused. Returns the retries."""
    assert len(minted) == len(answers), [m["payload"] for m in minted]
    first, retries = calls[0], calls[1:]
    assert "requestState" not in first["params"] and "inputResponses" not in first["params"]
    assert len(retries) == len(minted), [r["params"] for r in retries]
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == len(ids)
    for retry, state, answer in zip(retries, minted, answers, strict=True):
        params = retry["params"]
        assert params["requestState"] == state["requestState"]
        for key in ("arguments", "uri"):
            assert params.get(key) == first["params"].get(key)
        if answer is None:
            assert "inputResponses" not in params, params
        else:
            assert params["inputResponses"] == answer
    echoed = [c["params"]["requestState"] for c in calls if "requestState" in c["params"]]
    assert sorted(echoed) == sorted(m["requestState"] for m in minted)  # each state echoed exactly once
    consumed = [e["nonce"] for e in peer.entries("consumed") if e["tool"] == consumed_as]
    assert sorted(consumed) == sorted(m["nonce"] for m in minted)
    assert peer.entries("refused") == []
    return retries


def _assert_tool_rounds(peer, tool: str, answers: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    return _assert_rounds(peer, peer.tool_calls(tool), peer.minted(tool), tool, answers)


def _events(op_id: str) -> list[tuple[str, int, str]]:
    return [(e.event, e.round_number, e.reason)
            for e in AuditEvent.objects.filter(operation_id=op_id).order_by("sequence")]


def _submitted_actions(op_id: str) -> list[dict[str, str]]:
    return [e.actions for e in AuditEvent.objects.filter(operation_id=op_id, event="submitted").order_by("sequence")]


# -- 1. every field defaulted ------------------------------------------------------------------------


def test_defaults_form_accept_defaults(peer, capsys):
    code, op = _command(capsys, peer.url, "--tool", "defaults_form", "--args", '{"item":"pizza"}',
                        "--consent", "accept-defaults")
    assert code == 0 and op["rounds"] == 1 and op["error_code"] == ""
    assert _tool_text(op) == ("pizza for guest <guest@example.test>: accept=true, seats=1, tip=2.5, size=m, "
                              "toppings=cheese+basil.")
    [state] = peer.minted("defaults_form")
    assert state["keys"] == ["order"]
    _assert_tool_rounds(peer, "defaults_form", [{"order": {"action": "accept", "content": DEFAULTS_CONTENT}}])
    _assert_modern(peer)


# -- 2. two form rounds from an answers file ----------------------------------------------------------


def test_multi_round_answers_file(peer, capsys, tmp_path):
    # the seat answer leaves "meal" out: it takes its schema default (true)
    policy = _answers_file(tmp_path, {"dates": {"start": "2026-12-05", "nights": 2}, "seat": {"seat": "aisle"}})
    code, op = _command(capsys, peer.url, "--tool", "multi_round", "--args", '{"destination":"Oslo"}',
                        "--consent", policy)
    assert code == 0 and op["rounds"] == 2
    assert _tool_text(op) == "Booked 2 night(s) in Oslo from 2026-12-05, aisle seat, meal included."
    first, second = peer.minted("multi_round")
    assert (first["keys"], second["keys"]) == (["dates"], ["seat"])
    assert first["requestState"] != second["requestState"]
    assert second["payload"] == {"tool": "multi_round", "nonce": second["payload"]["nonce"], "step": 2,
                                 "destination": "Oslo", "start": "2026-12-05", "nights": 2}
    _assert_tool_rounds(peer, "multi_round", [
        {"dates": {"action": "accept", "content": {"start": "2026-12-05", "nights": 2}}},
        {"seat": {"action": "accept", "content": {"seat": "aisle", "meal": True}}},
    ])
    _assert_modern(peer)
    assert [(e, n) for e, n, _ in _events(op["operation_id"])] == [
        ("received", 1), ("shown", 1), ("submitted", 1), ("received", 2), ("shown", 2), ("submitted", 2),
        ("completed", 2)]


def test_multi_round_key_absent_from_the_answers_file_is_declined(peer, capsys, tmp_path):
    policy = _answers_file(tmp_path, {"dates": {"start": "2027-01-10", "nights": 5}})
    code, op = _command(capsys, peer.url, "--tool", "multi_round", "--args", '{"destination":"Bergen"}',
                        "--consent", policy)
    assert code == 0 and op["rounds"] == 2
    assert _tool_text(op) == "Trip declined; nothing was done."
    _assert_tool_rounds(peer, "multi_round", [
        {"dates": {"action": "accept", "content": {"start": "2027-01-10", "nights": 5}}},
        {"seat": {"action": "decline"}},
    ])


# -- 3. a requestState-only round ----------------------------------------------------------------------


def test_state_only_completes_without_consent(peer, capsys):
    code, op = _command(capsys, peer.url, "--tool", "state_only", "--args", '{"ticket":"JOB-1"}')
    assert code == 0 and op["rounds"] == 1
    [state] = peer.minted("state_only")
    assert state["keys"] == []
    assert _tool_text(op) == f"Job JOB-1 done after a state-only round (state nonce {state['payload']['nonce']})."
    _assert_tool_rounds(peer, "state_only", [None])
    _assert_modern(peer)
    # nobody was shown anything and nothing was answered: the operation echoed the state itself
    assert [(e, n) for e, n, _ in _events(op["operation_id"])] == [("received", 1), ("submitted", 1),
                                                                  ("completed", 1)]
    assert _submitted_actions(op["operation_id"]) == [{}]


# -- 4. a URL-mode round -----------------------------------------------------------------------------


def test_url_declined_without_url_done(peer, capsys):
    code, op = _command(capsys, peer.url, "--tool", "url", "--args", '{"provider":"github"}')
    assert code == 0 and op["rounds"] == 1
    assert _tool_text(op) == "Connection declined; nothing was done."
    _assert_tool_rounds(peer, "url", [{"signin": {"action": "decline"}}])
    _assert_modern(peer)
    assert _submitted_actions(op["operation_id"]) == [{"signin": "decline"}]


def test_url_accepted_with_url_done(peer, capsys):
    code, op = _command(capsys, peer.url, "--tool", "url", "--args", '{"provider":"github"}',
                        "--consent", "accept-defaults", "--url-done")
    assert code == 0 and op["rounds"] == 1
    [state] = peer.minted("url")
    elicitation = state["payload"]["elicitation"]
    assert _tool_text(op) == f"Account at github connected (elicitation {elicitation})."
    [retry] = _assert_tool_rounds(peer, "url", [{"signin": {"action": "accept"}}])
    # the URL the server asked the person to open went nowhere: not into the retry, not to the server
    asked = peer.response_to(peer.tool_calls("url")[0]["id"])["result"]["inputRequests"]["signin"]
    assert asked["params"]["url"] == f"{CONNECT_URL}?provider=github&e={elicitation}"
    assert CONNECT_URL not in json.dumps(retry)
    _assert_modern(peer)


@pytest.mark.parametrize("policy", ["decline", "cancel"])
def test_url_done_with_a_non_accepting_policy_is_refused_before_anything_runs(peer, policy):
    """--url-done accepts URL-mode requests; decline/cancel answer every request with their action:
    the contradiction is a usage error (bad_policy), and nothing reaches the server."""
    peer.clear()
    with pytest.raises(CommandError, match="bad_policy|--url-done"):
        call_command("mrtr_client", peer.url, "--tool", "url", "--args", '{"provider":"github"}',
                     "--consent", policy, "--url-done")
    assert peer.tool_calls("url") == []


# -- 5. a form and a URL in one round ------------------------------------------------------------------


def test_two_questions_accept_defaults_url_done(peer, capsys):
    code, op = _command(capsys, peer.url, "--tool", "two_questions", "--args", '{"topic":"db-down"}',
                        "--consent", "accept-defaults", "--url-done")
    assert code == 0 and op["rounds"] == 1
    # priority takes its default (p2); the optional note has none and is left out
    assert _tool_text(op) == "Incident db-down: contact priority p2, note null; verify accept."
    [state] = peer.minted("two_questions")
    assert sorted(state["keys"]) == ["contact", "verify"]
    _assert_tool_rounds(peer, "two_questions", [{"contact": {"action": "accept", "content": {"priority": "p2"}},
                                                 "verify": {"action": "accept"}}])
    _assert_modern(peer)
    assert _submitted_actions(op["operation_id"]) == [{"contact": "accept", "verify": "accept"}]


# -- 6. required fields without a default ------------------------------------------------------------


def test_form_accept_defaults_cancels_what_it_cannot_answer(peer, capsys):
    """``form`` requires a name of 2 to 40 characters and an email, neither with a default:
    accept-defaults invents nothing, it answers cancel, names the two fields and exits 9."""
    code, op = _command(capsys, peer.url, "--tool", "form", "--args", '{"subject":"tea"}',
                        "--consent", "accept-defaults")
    assert code == 9 and op["rounds"] == 1 and op["error_code"] == ""
    assert op["missing_defaults"] == ["profile.name", "profile.email"]
    assert _tool_text(op) == "Order cancelled; nothing was done."
    [retry] = _assert_tool_rounds(peer, "form", [{"profile": {"action": "cancel"}}])
    assert "content" not in retry["params"]["inputResponses"]["profile"]  # no content of any kind was sent
    _assert_modern(peer)
    events = _events(op["operation_id"])
    assert [e for e, _, _ in events] == ["received", "shown", "submitted", "cancelled"]
    assert _submitted_actions(op["operation_id"]) == [{"profile": "cancel"}]


def test_form_invalid_answers_file_denied_and_nothing_sent(peer, capsys, tmp_path):
    policy = _answers_file(tmp_path, {"profile": {"name": "A", "email": "not-an-email", "quantity": 11}})
    code, op = _command(capsys, peer.url, "--tool", "form", "--args", '{"subject":"tea"}', "--consent", policy)
    assert code == 4 and op["status"] == "denied" and op["result"] is None
    assert [e for e, _, _ in _events(op["operation_id"])] == ["received", "shown", "rejected", "denied"]
    assert len(peer.tool_calls("form")) == 1 and peer.retries("form") == []
    assert len(peer.minted("form")) == 1 and peer.entries("consumed") == []


# -- 7. roots/list, not allowed for this server --------------------------------------------------------


def test_roots_not_allowed(peer, capsys):
    code, op = _command(capsys, peer.url, "--tool", "roots", "--args", "{}", "--consent", "accept-defaults")
    assert code == 3 and op["status"] == "failed" and op["error_code"] == "jsonrpc_error"
    assert op["result"] is None and op["rounds"] == 0
    [call] = peer.tool_calls("roots")
    assert "roots" not in call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    error = peer.response_to(call["id"])["error"]
    assert error["code"] == -32021 and error["data"] == {"requiredCapabilities": {"roots": {}}}
    assert peer.retries("roots") == []
    _assert_modern(peer)


# -- 8. prompts/get and resources/read rounds ----------------------------------------------------------


def _prompt_retries(peer) -> list[dict[str, Any]]:
    return [b for b in peer.rpc_requests("prompts/get") if b["params"].get("name") == "briefing"]


def test_prompt_briefing_answers_file(peer, capsys, tmp_path):
    policy = _answers_file(tmp_path, {"audience": {"audience": "executives"}})
    code, op = _command(capsys, peer.url, "--prompt", "briefing", "--args", '{"topic":"the outage"}',
                        "--consent", policy)
    assert code == 0 and op["method"] == "prompts/get" and op["status"] == "completed" and op["rounds"] == 1
    assert op["result"]["messages"] == [{"role": "user", "content": {"type": "text",
                                                                     "text": "Brief executives on the outage."}}]
    _assert_rounds(peer, _prompt_retries(peer), peer.minted("briefing"), "briefing",
                   [{"audience": {"action": "accept", "content": {"audience": "executives"}}}])
    _assert_modern(peer)


def test_prompt_briefing_accept_defaults_never_takes_the_first_option(peer, capsys):
    code, op = _command(capsys, peer.url, "--prompt", "briefing", "--args", '{"topic":"the outage"}',
                        "--consent", "accept-defaults")
    assert code == 9 and op["rounds"] == 1 and op["missing_defaults"] == ["audience.audience"]
    assert op["result"]["messages"] == [{"role": "user", "content": {"type": "text",
                                                                     "text": "Brief a general audience on the outage."}}]
    _assert_rounds(peer, _prompt_retries(peer), peer.minted("briefing"), "briefing",
                   [{"audience": {"action": "cancel"}}])


def _resource_calls(peer) -> list[dict[str, Any]]:
    return peer.rpc_requests("resources/read")


def test_resource_template_answers_file(peer, capsys, tmp_path):
    policy = _answers_file(tmp_path, {"period": {"since": "2026-01-05"}})
    code, op = _command(capsys, peer.url, "--resource", "ts://reports/core%20ops", "--consent", policy)
    assert code == 0 and op["method"] == "resources/read" and op["name"] == "ts://reports/core%20ops"
    assert op["status"] == "completed" and op["rounds"] == 1
    assert op["result"]["contents"] == [{"uri": "ts://reports/core%20ops", "mimeType": "text/plain",
                                         "text": "Report for team core ops since 2026-01-05: 7 changes."}]
    _assert_rounds(peer, _resource_calls(peer), peer.minted("team_report"), "team_report",
                   [{"period": {"action": "accept", "content": {"since": "2026-01-05"}}}])
    _assert_modern(peer)


def test_resource_template_accept_defaults_cancels_a_required_date(peer, capsys):
    # "since" is a required date without a default: accept-defaults answers cancel
    code, op = _command(capsys, peer.url, "--resource", "ts://reports/ops", "--consent", "accept-defaults")
    assert code == 9 and op["status"] == "completed" and op["rounds"] == 1
    assert op["missing_defaults"] == ["period.since"]
    assert op["result"]["contents"] == [{"uri": "ts://reports/ops", "mimeType": "text/plain",
                                         "text": "No report for ops."}]
    _assert_rounds(peer, _resource_calls(peer), peer.minted("team_report"), "team_report",
                   [{"period": {"action": "cancel"}}])


# -- 9. the audit trail of a headless run (headless.arun) ----------------------------------------------


async def test_arun_writes_the_audit_trail_with_the_scripted_receipt(peer, seeded):
    alice = seeded["users"]["alice"]
    tenant = seeded["servers"]["acme"].tenant
    try:
        outcome = await headless.arun(url=peer.url, user=alice, tenant=tenant, method="tools/call",
                                      params={"name": "defaults_form", "arguments": {"item": "soup"}},
                                      consent=ConsentPolicy.parse("accept-defaults"))
    finally:
        await headless.close_connections()
    assert (outcome.status, outcome.rounds, outcome.error_code) == ("completed", 1, "")
    assert outcome.result["content"] == [{"type": "text", "text": "soup for guest <guest@example.test>: accept=true, "
                                                                  "seats=1, tip=2.5, size=m, toppings=cheese+basil."}]
    events = [(e.event, e.round_number, e.reason, e.actions) async for e in
              AuditEvent.objects.filter(operation_id=outcome.operation_id).order_by("sequence")]
    assert [(e, n) for e, n, _, _ in events] == [("received", 1), ("shown", 1), ("submitted", 1), ("completed", 1)]
    assert [r for e, _, r, _ in events if e == "shown"] == ["headless: scripted consent policy accept-defaults"]
    assert [a for e, _, _, a in events if e == "submitted"] == [{"order": "accept"}]
    # the tenant got a server row for the URL; the operation is alice's, in acme
    op = await Operation.objects.select_related("server").aget(pk=outcome.operation_id)
    assert (op.user_id, op.tenant_id, op.server.url) == (alice.pk, tenant.pk, peer.url)
    assert await McpServer.objects.filter(tenant=tenant, url=peer.url).acount() == 1
    _assert_tool_rounds(peer, "defaults_form", [{"order": {"action": "accept", "content": DEFAULTS_CONTENT}}])
    _assert_modern(peer)


def test_command_audit_reason_names_the_answers_policy(peer, capsys, tmp_path):
    policy = _answers_file(tmp_path, {"order": {"nickname": "ada", "seats": 3}})
    code, op = _command(capsys, peer.url, "--tool", "defaults_form", "--args", '{"item":"tea"}', "--consent", policy)
    assert code == 0
    assert _tool_text(op) == "tea for ada <guest@example.test>: accept=true, seats=3, tip=2.5, size=m, " \
                             "toppings=cheese+basil."
    _assert_tool_rounds(peer, "defaults_form", [{"order": {"action": "accept", "content": dict(
        DEFAULTS_CONTENT, nickname="ada", seats=3)}}])
    events = _events(op["operation_id"])
    assert [(e, n) for e, n, _ in events] == [("received", 1), ("shown", 1), ("submitted", 1), ("completed", 1)]
    assert [r for e, _, r in events if e == "shown"] == ["headless: scripted consent policy answers"]
    # the command ran as the dedicated headless identity
    row = Operation.objects.select_related("user", "tenant").get(pk=op["operation_id"])
    assert (row.user.username, row.tenant.slug) == ("mrtr-headless", "headless")
