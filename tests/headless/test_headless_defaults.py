"""``accept-defaults`` never answers what it should not (issue 12, item 10).

It accepts a form only when every required field has a default; otherwise the round is answered
``cancel`` (sent as the retry, as a person's Cancel), the outcome and the command's output name
the fields that had none (names only, control and bidi characters made visible), and
``mrtr_client`` exits 9. Against real servers on loopback: the honest server's "drop database?"
confirmation (tests/honest.py), and the 2025-11-25 legacy demo server (the answer goes back on
the open call)."""

from __future__ import annotations

import json
import logging

import pytest
from django.core.management import call_command

from mrtrweb.headless import client as headless
from mrtrweb.demo.legacy import serve_legacy_in_thread
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.management.commands import mrtr_client
from mrtrweb.models import AuditEvent, McpServer

from .. import honest

pytestmark = [pytest.mark.django_db(transaction=True)]

ACCEPT_DEFAULTS = ConsentPolicy.parse("accept-defaults")


@pytest.fixture(scope="module")
def honest_mcp():
    handle = honest.serve()
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def legacy_mcp():
    handle = serve_legacy_in_thread()
    yield handle
    handle.stop()


@pytest.fixture
def server(seeded, honest_mcp):
    honest_mcp.log.clear()
    return McpServer.objects.create(tenant=seeded["servers"]["acme"].tenant, name="Honest", url=honest_mcp.url)


async def _run(seeded, server, tool: str, consent: ConsentPolicy = ACCEPT_DEFAULTS) -> headless.HeadlessOutcome:
    return await headless.arun(url=server.url, user=seeded["users"]["alice"], tenant=server.tenant,
                               method="tools/call", params={"name": tool, "arguments": {}}, consent=consent)


def _text(outcome: headless.HeadlessOutcome) -> str:
    return " ".join(c.get("text", "") for c in (outcome.result or {}).get("content", []))


def _retries(mcp, tool: str) -> list[dict]:
    return [c.params.get("inputResponses") for c in mcp.log.tool_calls(tool) if c.is_retry]


async def test_a_required_boolean_without_default_is_never_answered_yes_or_no(seeded, server, honest_mcp):
    outcome = await _run(seeded, server, "drop_database")
    assert outcome.status == "completed" and outcome.error_code == ""
    assert _text(outcome) == "Not dropped (confirm_drop=cancel)."
    assert outcome.missing_defaults == ("confirm_drop.confirm",)
    # the one retry carried cancel and no content: not true, not false
    assert _retries(honest_mcp, "drop_database") == [{"confirm_drop": {"action": "cancel"}}]
    events = [(e.event, e.actions) async for e in
              AuditEvent.objects.filter(operation_id=outcome.operation_id).order_by("sequence")]
    assert events == [("received", {}), ("shown", {}), ("submitted", {"confirm_drop": "cancel"}),
                      ("cancelled", {})]
    assert mrtr_client.exit_code(outcome) == mrtr_client.EXIT_MISSING_DEFAULTS == 9


async def test_only_the_required_fields_without_default_are_named(seeded, server, honest_mcp):
    outcome = await _run(seeded, server, "mixed_defaults")
    # region has a default, note is optional: neither is named; replicas and tags stop the accept
    assert outcome.missing_defaults == ("settings.replicas", "settings.tags")
    assert _retries(honest_mcp, "mixed_defaults") == [{"settings": {"action": "cancel"}}]


async def test_every_required_field_defaulted_is_accepted_with_the_defaults(seeded, server, honest_mcp):
    outcome = await _run(seeded, server, "all_defaults")
    # a required boolean WITH a default (false) is accepted as such; the optional note is left out
    assert _text(outcome) == 'accept {"force": false, "region": "us", "replicas": 2}'
    assert outcome.missing_defaults == ()
    assert mrtr_client.exit_code(outcome) == 0


async def test_one_form_without_defaults_cancels_the_whole_round(seeded, server, honest_mcp):
    outcome = await _run(seeded, server, "two_forms")
    assert outcome.missing_defaults == ("b.y",)
    assert _retries(honest_mcp, "two_forms") == [{"a": {"action": "cancel"}, "b": {"action": "cancel"}}]


async def test_other_policies_name_nothing(seeded, server, honest_mcp):
    outcome = await _run(seeded, server, "drop_database", ConsentPolicy.parse("decline"))
    assert _text(outcome) == "Not dropped (confirm_drop=decline)." and outcome.missing_defaults == ()
    assert mrtr_client.exit_code(outcome) == 0


def _command(*argv: str) -> int:
    try:
        call_command("mrtr_client", *argv)
    except SystemExit as exc:
        return int(exc.code)
    return 0


def test_the_command_names_the_fields_and_exits_9(seeded, server, capsys, caplog):
    caplog.set_level(logging.INFO, logger="mrtrweb")
    assert _command(server.url, "--tool", "drop_database", "--consent", "accept-defaults",
                    "--user", "alice", "--tenant", "acme") == 9
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tools/call drop_database: completed after 1 round(s)")
    assert out[1] == "  accept-defaults answered cancel: required field(s) without a default: confirm_drop.confirm"
    assert "accept-defaults answers cancel: required fields without a default: confirm_drop.confirm" in caplog.text
    # --json: the names, and the exit code of the operation
    assert _command(server.url, "--tool", "drop_database", "--consent", "accept-defaults", "--json",
                    "--user", "alice", "--tenant", "acme") == 9
    (op,) = json.loads(capsys.readouterr().out)["operations"]
    assert op["missing_defaults"] == ["confirm_drop.confirm"] and op["exit_code"] == 9
    # with several operations the first non-zero code wins: a plain completed one first, then 9
    assert _command(server.url, "--each", "--consent", "accept-defaults", "--json",
                    "--user", "alice", "--tenant", "acme") == 9


def test_field_names_are_shown_with_their_control_characters_visible(seeded, server, capsys, caplog):
    caplog.set_level(logging.INFO, logger="mrtrweb")
    assert _command(server.url, "--tool", "odd_names", "--consent", "accept-defaults",
                    "--user", "alice", "--tenant", "acme") == 9
    out = capsys.readouterr().out
    assert "required field(s) without a default: q.dro⟨U+202E⟩p⟨U+0007⟩" in out
    assert "\u202e" not in out and "\u0007" not in out
    assert "\u202e" not in caplog.text and "\u0007" not in caplog.text
    assert len(headless.shown_name("x" * 500)) == headless.SHOWN_NAME_CHARS


async def test_a_legacy_servers_form_without_defaults_is_cancelled_on_the_open_call(seeded, legacy_mcp):
    server = await McpServer.objects.acreate(tenant=seeded["servers"]["acme"].tenant, name="Legacy",
                                             url=legacy_mcp.url)
    legacy_mcp.log.clear()
    outcome = await headless.arun(url=server.url, user=seeded["users"]["alice"], tenant=server.tenant,
                                  method="tools/call", params={"name": "legacy_deploy", "arguments": {"env": "prod"}},
                                  consent=ACCEPT_DEFAULTS)
    assert outcome.status == "completed", outcome
    assert outcome.missing_defaults == ("elicitation.confirm", "elicitation.ticket")  # replicas has a default
    [response] = legacy_mcp.log.responses()
    assert response.error is None and response.result == {"action": "cancel"}
    assert mrtr_client.exit_code(outcome) == 9
