"""Issue 15, the third-party server matrix, headless: ``manage.py mrtr_client`` against servers
installed from the registries at pinned versions (:mod:`tests.thirdparty`) --

* npm ``@modelcontextprotocol/server-everything`` 2026.8.31 (TypeScript SDK 1.x, 2025-11-25),
* PyPI ``fastmcp`` 3.4.11 (2025-11-25) and 4.2.3 (2026-07-28), running
  ``tests/thirdparty_servers/fastmcp_features.py``.

Every tool that elicits is completed with a scripted consent policy, and the tool's own result
says what arrived at the server (the exact content, or the action). Sampling and roots run with
the tenant admin's allowances on the headless tenant's server row.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import call_command

from mrtrweb.headless import client as headless
from mrtrweb.models import AuditEvent, McpServer, Tenant
from tests.thirdparty import everything_server, fastmcp3_server, fastmcp4_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True)]

ROOTS = [{"uri": "file:///srv/project", "name": "project"}]


@pytest.fixture(autouse=True)
def _fresh(settings, _fresh_gate_and_cache):
    """A new gate and cache; start limits out of the way (a module runs ~40 operations a minute)."""
    settings.MRTRWEB = {"MAX_STARTS_PER_MINUTE": 10_000, "MAX_TENANT_STARTS_PER_MINUTE": 10_000}


def _row(url: str, **fields: Any) -> McpServer:
    """The headless tenant's server row for ``url`` (what ``mrtr_client`` uses), with ``fields``
    set as a tenant admin would."""
    tenant, _ = Tenant.objects.get_or_create(slug="headless", defaults={"name": "Headless clients"})
    server = headless.server_for(url, tenant)
    for name, value in fields.items():
        setattr(server, name, value)
    server.full_clean(exclude=["tenant"])
    server.save()
    return server


def _allow_all(url: str, **fields: Any) -> McpServer:
    return _row(url, allow_sampling=True, allow_roots=True, roots=ROOTS, **fields)


def _command(capsys, url: str, *argv: str) -> tuple[int, list[dict[str, Any]]]:
    """``mrtr_client URL ARGV... --json``: (exit code, its operations)."""
    capsys.readouterr()
    try:
        call_command("mrtr_client", url, *argv, "--json")
        code = 0
    except SystemExit as exc:
        code = int(exc.code)
    ops = json.loads(capsys.readouterr().out)["operations"]
    assert ops and code == next((o["exit_code"] for o in ops if o["exit_code"]), 0), (code, ops)
    return code, ops


def _run(capsys, url: str, tool: str, args: dict[str, Any] | None = None, *policy: str) -> tuple[int, dict]:
    code, [op] = _command(capsys, url, "--tool", tool, "--args", json.dumps(args or {}), *policy)
    return code, op


def _texts(op: dict[str, Any]) -> list[str]:
    assert op["status"] == "completed", op
    return [c["text"] for c in op["result"]["content"] if c.get("type") == "text"]


def _assert_refused_deprecated(code: int, op: dict[str, Any]) -> None:
    """Exit 4, denied, its audit trail ending ``denied`` for ``deprecated_request_refused``."""
    assert (code, op["status"], op["error_code"], op["rounds"], op["result"]) == (4, "denied", "denied", 1, None)
    last = AuditEvent.objects.filter(operation_id=op["operation_id"]).order_by("sequence").last()
    assert (last.event, last.reason) == ("denied", "deprecated_request_refused")


def _answers(tmp_path, data: dict[str, Any]) -> list[str]:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(data))
    return ["--consent", f"answers:{path}"]


ACCEPT_DEFAULTS = ["--consent", "accept-defaults"]


# -- FastMCP: the ctx.elicit tools, on FastMCP 3 (2025-11-25) and FastMCP 4 pinned to 2025-11-25 ------
# (issue 15 item 5: a tenant admin pins McpServer.protocol for a server that refuses ctx.elicit on
# 2026-07-28; these cases were strict xfails until it landed)

@pytest.fixture(params=["fastmcp3", "fastmcp4-at-2025-11-25"])  # the second: issue 15 item 5
def legacy_fastmcp(request):
    """The URL of a FastMCP server spoken to on 2025-11-25 (FastMCP 4: its row's protocol pinned)."""
    if request.param == "fastmcp3":
        return request.getfixturevalue("fastmcp3_server").url
    url = request.getfixturevalue("fastmcp4_server").url
    _row(url, protocol=McpServer.Protocol.LEGACY)
    return url


def test_fastmcp_order_form_accept_defaults(legacy_fastmcp, capsys):
    code, op = _run(capsys, legacy_fastmcp, "order_form", {"item": "tea"}, *ACCEPT_DEFAULTS)
    assert (code, op["rounds"]) == (0, 1)
    assert _texts(op) == ['order tea: accept: {"code": "ABC-123", "gift": true, "seats": 2, "size": "m", '
                          '"tip": 12.5, "toppings": ["cheese"]}']


def test_fastmcp_profile_form_every_field_type_from_an_answers_file(legacy_fastmcp, capsys, tmp_path):
    given = {"name": "Ada Lovelace", "email": "ada@example.test", "age": 36, "subscribe": True, "plan": "pro",
             "colour": "b", "languages": ["de", "fr"], "birthday": "1815-12-10"}
    code, op = _run(capsys, legacy_fastmcp, "profile_form", {}, *_answers(tmp_path, {"elicitation": given}))
    assert (code, op["rounds"]) == (0, 1)
    # absent optional fields took their schema defaults (team, height)
    expected = dict(given, team="ops", height=1.75)
    [text] = _texts(op)
    assert text.startswith("profile: accept: ")
    assert json.loads(text.removeprefix("profile: accept: ")) == expected


@pytest.mark.parametrize("policy, said, exit_code", [
    (["--consent", "decline"], "profile: decline", 0),
    (["--consent", "cancel"], "profile: cancel", 0),
    (ACCEPT_DEFAULTS, "profile: cancel", 9),  # name and email have no default: it invents nothing
])
def test_fastmcp_profile_form_decline_and_cancel(legacy_fastmcp, capsys, policy, said, exit_code):
    code, op = _run(capsys, legacy_fastmcp, "profile_form", {}, *policy)
    assert code == exit_code and _texts(op) == [said]
    if exit_code == 9:
        assert op["missing_defaults"] == ["elicitation.name", "elicitation.email"]


def test_fastmcp_profile_form_answers_breaking_the_schema_are_denied(legacy_fastmcp, capsys, tmp_path):
    bad = {"name": "A", "email": "ada@example.test", "age": 12, "languages": ["en", "de", "fr"]}
    code, op = _run(capsys, legacy_fastmcp, "profile_form", {}, *_answers(tmp_path, {"elicitation": bad}))
    assert (code, op["status"], op["result"]) == (4, "denied", None)


@pytest.mark.parametrize("tool, answer, said", [
    ("pick_priority", {"value": "high"}, 'priority: accept: "high"'),  # titled oneOf (dict syntax)
    ("pick_tags", {"value": ["red", "blue"]}, 'tags: accept: ["red", "blue"]'),  # multi-select enum
    ("confirm", {"value": True}, "confirm: accept: true"),  # scalar bool
])
def test_fastmcp_scalar_and_choice_elicitations(legacy_fastmcp, capsys, tmp_path, tool, answer, said):
    code, op = _run(capsys, legacy_fastmcp, tool, {}, *_answers(tmp_path, {"elicitation": answer}))
    assert (code, op["rounds"], _texts(op)) == (0, 1, [said])


def test_fastmcp3_empty_form_accepted(fastmcp3_server, capsys):  # noqa: F811
    code, op = _run(capsys, fastmcp3_server.url, "ask_nothing", {}, *ACCEPT_DEFAULTS)
    assert (code, op["rounds"], _texts(op)) == (0, 1, ["nothing: accept: {}"])


# -- FastMCP: plain tools, errors, progress (both releases, their default protocol) -------------------


@pytest.fixture(params=["fastmcp3", "fastmcp4"])
def any_fastmcp(request):
    return request.getfixturevalue(f"{request.param}_server").url


def test_fastmcp_plain_tool(any_fastmcp, capsys):
    code, op = _run(capsys, any_fastmcp, "echo", {"text": "hello <b>there</b>"})
    assert (code, op["rounds"], _texts(op)) == (0, 0, ["echo: hello <b>there</b>"])


def test_fastmcp_tool_error_is_exit_8_with_the_servers_text(any_fastmcp, capsys):
    code, op = _run(capsys, any_fastmcp, "fail", {"reason": "no stock"})
    assert code == 8 and op["result"]["isError"] is True and _texts(op) == ["refused: no stock"]


def test_fastmcp_progress_tool(any_fastmcp, capsys):
    code, op = _run(capsys, any_fastmcp, "count_up", {"steps": 4})
    assert (code, _texts(op)) == (0, ["counted 4"])


def test_fastmcp4_on_2026_07_28_refuses_ctx_elicit_with_its_own_text(fastmcp4_server, capsys):  # noqa: F811
    """Automatic protocol: FastMCP 4 is reached on 2026-07-28, where ``ctx.elicit`` has no
    back-channel; the person (here: the exit 8 and the text) learns why (issue 15 item 5)."""
    code, op = _run(capsys, fastmcp4_server.url, "order_form", {"item": "tea"}, *ACCEPT_DEFAULTS)
    assert (code, op["rounds"]) == (8, 0)
    assert _texts(op) == ["elicitation via server-initiated requests is unavailable on 2026-07-28 connections."]


def test_fastmcp4_guard_pattern_is_an_mrtr_round(fastmcp4_server, capsys, tmp_path):  # noqa: F811
    code, op = _run(capsys, fastmcp4_server.url, "guard_form", {"item": "tea"},
                    *_answers(tmp_path, {"order": {"seats": 4, "note": "window"}}))
    assert (code, op["rounds"]) == (0, 1)
    assert _texts(op) == ['guard tea (state item=tea): {"action": "accept", "content": {"note": "window", "seats": 4}}']


def test_fastmcp4_guard_pattern_accept_defaults_cancels_a_required_field_without_default(fastmcp4_server,  # noqa: F811
                                                                                         capsys, tmp_path):
    # seats has a default, note is optional: accept-defaults accepts {"seats": 2}
    code, op = _run(capsys, fastmcp4_server.url, "guard_form", {"item": "jam"}, *ACCEPT_DEFAULTS)
    assert code == 0
    assert _texts(op) == ['guard jam (state item=jam): {"action": "accept", "content": {"seats": 2}}']


# -- FastMCP: sampling and roots, allowed by the tenant admin -----------------------------------------

def test_fastmcp3_roots_answered_with_the_configured_roots(fastmcp3_server, capsys):  # noqa: F811
    """FastMCP's ``ctx.list_roots()`` asks on the standalone stream, related to no call: answered at
    session level with the configured roots (issue 15 item 2), no round."""
    _allow_all(fastmcp3_server.url)
    code, op = _run(capsys, fastmcp3_server.url, "show_roots", {}, *ACCEPT_DEFAULTS)
    assert (code, _texts(op)) == (0, ['roots: [{"name": "project", "uri": "file:///srv/project"}]'])
    assert op["rounds"] == 0


def test_fastmcp3_roots_not_allowed_refused_at_session_level(fastmcp3_server, capsys):  # noqa: F811
    """Not allowed (not declared): the standalone roots/list gets the refusal, the tool says so."""
    code, op = _run(capsys, fastmcp3_server.url, "show_roots", {}, *ACCEPT_DEFAULTS)
    assert (code, op["status"], op["rounds"]) == (8, "completed", 0)
    assert "roots/list refused by the client: roots are not allowed for this server" in _texts(op)[0]


def test_fastmcp3_sampling_allowed_accept_defaults_refuses_it(fastmcp3_server, capsys):  # noqa: F811
    """accept-defaults has no reply of its own: the round is refused, the operation denied."""
    _allow_all(fastmcp3_server.url)
    code, op = _run(capsys, fastmcp3_server.url, "summarize", {"text": "a long story"}, *ACCEPT_DEFAULTS)
    _assert_refused_deprecated(code, op)


def test_fastmcp3_sampling_answered_with_the_reply_of_the_answers_file(fastmcp3_server, capsys, tmp_path):  # noqa: F811
    _allow_all(fastmcp3_server.url)
    code, op = _run(capsys, fastmcp3_server.url, "summarize", {"text": "a long story"},
                    *_answers(tmp_path, {"sampling": {"reply": "It was long."}}))
    assert (code, op["rounds"], _texts(op)) == (0, 1, ["sampled: It was long."])


def test_fastmcp3_sampling_not_declared_when_not_allowed(fastmcp3_server, capsys):  # noqa: F811
    code, op = _run(capsys, fastmcp3_server.url, "summarize", {"text": "x"}, *ACCEPT_DEFAULTS)
    assert code == 8 and _texts(op) == ["Error calling tool 'summarize': Client does not support sampling"]


def test_fastmcp3_each_runs_every_tool(fastmcp3_server, capsys):  # noqa: F811
    code, ops = _command(capsys, fastmcp3_server.url, "--each", "--consent", "accept-defaults")
    by_name = {o["name"]: (o["status"], o["exit_code"]) for o in ops}
    assert by_name == {
        "echo": ("completed", 0), "fail": ("completed", 8), "order_form": ("completed", 0),
        "profile_form": ("completed", 9), "pick_priority": ("completed", 9), "pick_tags": ("completed", 9),
        "confirm": ("completed", 9), "ask_nothing": ("completed", 0), "count_up": ("completed", 0),
        "summarize": ("completed", 8),  # sampling not allowed: not declared, the tool says so
        "show_roots": ("completed", 8),  # roots not allowed: refused at session level, the tool says so
        "ship": ("completed", 8), "plant": ("completed", 8),  # a required model as "": the tool refuses it
    }
    assert code == 8  # the first non-zero code, in order (fail comes second)


# -- the everything server ---------------------------------------------------------------------------

EVERYTHING_ANSWER = {
    "name": "Ada Lovelace", "check": True, "email": "ada@example.test", "homepage": "https://ada.example.test/",
    "birthdate": "1815-12-10", "integer": 7, "untitledSingleSelectEnum": "Ross",
    "untitledMultipleSelectEnum": ["Piano", "Drums"], "titledSingleSelectEnum": "hero-3",
    "titledMultipleSelectEnum": ["fish-2", "fish-3"], "legacyTitledEnum": "pet-2"}


def _raw_result(op: dict[str, Any]) -> dict[str, Any]:
    raw = [t for t in _texts(op) if t.startswith("\nRaw result: ")]
    assert len(raw) == 1, _texts(op)
    return json.loads(raw[0].removeprefix("\nRaw result: "))


def test_everything_plain_tools(everything_server, capsys):  # noqa: F811
    code, op = _run(capsys, everything_server.url, "get-sum", {"a": 2, "b": 40})
    assert (code, _texts(op)) == (0, ["The sum of 2 and 40 is 42."])
    code, op = _run(capsys, everything_server.url, "echo", {"message": "hi"})
    assert (code, _texts(op)) == (0, ["Echo: hi"])


def test_everything_elicitation_every_field_type(everything_server, capsys, tmp_path):  # noqa: F811
    code, op = _run(capsys, everything_server.url, "trigger-elicitation-request", {},
                    *_answers(tmp_path, {"elicitation": EVERYTHING_ANSWER}))
    assert (code, op["rounds"]) == (0, 1)
    # the absent fields took their defaults: firstLine, number
    assert _raw_result(op) == {"action": "accept", "content": dict(
        EVERYTHING_ANSWER, firstLine="It was a dark and stormy night.", number=3.14)}
    assert _texts(op)[0] == "✅ User provided the requested information!"


@pytest.mark.parametrize("policy, action", [("decline", "decline"), ("cancel", "cancel"),
                                            ("accept-defaults", "cancel")])  # name has no default
def test_everything_elicitation_decline_cancel(everything_server, capsys, policy, action):  # noqa: F811
    code, op = _run(capsys, everything_server.url, "trigger-elicitation-request", {}, "--consent", policy)
    assert code == (9 if policy == "accept-defaults" else 0)
    assert _raw_result(op) == {"action": action}


CONNECT = "https://connect.example.test/start"


@pytest.mark.parametrize("policy, said", [(["--url-done"], "✅ User completed the URL elicitation flow."),
                                          ([], "❌ User declined to open the URL")])  # not vouched: declined
def test_everything_url_elicitation_request_path(everything_server, capsys, policy, said):  # noqa: F811
    code, op = _run(capsys, everything_server.url, "trigger-url-elicitation", {"url": CONNECT}, *ACCEPT_DEFAULTS,
                    *policy)
    assert (code, op["rounds"]) == (0, 1)
    assert _texts(op)[0].startswith(said), _texts(op)


def test_everything_url_elicitation_error_path(everything_server, capsys):  # noqa: F811
    code, op = _run(capsys, everything_server.url, "trigger-url-elicitation", {"url": CONNECT, "errorPath": True},
                    *ACCEPT_DEFAULTS, "--url-done")
    # the -32042's URL as a round, the call sent again on the same session (the server keys its
    # "prerequisite done" on it), then the request path's own URL round
    assert (code, op["status"], op["rounds"]) == (0, "completed", 2)
    assert _texts(op)[0].startswith("✅ User completed the URL elicitation flow."), _texts(op)


def test_everything_long_running_call_with_roots_allowed(everything_server, capsys):  # noqa: F811
    """Issue 15 item 2: the server's roots/list 350 ms after initialized is session-level (answered
    with the configured roots), never a round of the long call that is in flight."""
    _allow_all(everything_server.url)
    code, op = _run(capsys, everything_server.url, "trigger-long-running-operation", {"duration": 1, "steps": 2})
    assert (code, op["rounds"]) == (0, 0)
    assert "Long running operation completed" in _texts(op)[0]


def test_everything_long_running_call_with_nothing_allowed(everything_server, capsys):  # noqa: F811
    code, op = _run(capsys, everything_server.url, "trigger-long-running-operation", {"duration": 1, "steps": 2})
    assert (code, op["rounds"]) == (0, 0)
    assert "Long running operation completed" in _texts(op)[0]


def test_everything_roots_tool_answered_with_the_configured_roots(everything_server, capsys):  # noqa: F811
    """get-roots-list shows the roots the server got at session level (it asks on the standalone
    stream after initialized, or then during the call): no round."""
    _allow_all(everything_server.url)
    code, op = _run(capsys, everything_server.url, "get-roots-list", {}, *ACCEPT_DEFAULTS)
    assert (code, op["rounds"]) == (0, 0)
    assert "1. project\n   URI: file:///srv/project" in "\n".join(_texts(op))


def test_everything_sampling_allowed_accept_defaults_refuses_it(everything_server, capsys):  # noqa: F811
    _allow_all(everything_server.url)
    code, op = _run(capsys, everything_server.url, "trigger-sampling-request", {"prompt": "hi", "maxTokens": 20},
                    *ACCEPT_DEFAULTS)
    _assert_refused_deprecated(code, op)


def test_everything_sampling_answered_with_the_reply_of_the_answers_file(everything_server, capsys,  # noqa: F811
                                                                         tmp_path):
    _allow_all(everything_server.url)
    code, op = _run(capsys, everything_server.url, "trigger-sampling-request", {"prompt": "hi", "maxTokens": 20},
                    *_answers(tmp_path, {"sampling": {"reply": "Hello from a script."}}))
    assert (code, op["rounds"]) == (0, 1)
    assert "Hello from a script." in "\n".join(_texts(op)), _texts(op)


def test_everything_list_shows_the_tools_for_allowed_capabilities(everything_server, capsys):  # noqa: F811
    _allow_all(everything_server.url)
    capsys.readouterr()
    call_command("mrtr_client", everything_server.url, "--list", "--json")
    tools = {t["name"] for t in json.loads(capsys.readouterr().out)["tools"]}
    assert {"trigger-sampling-request", "get-roots-list", "trigger-elicitation-request"} <= tools


def test_everything_list_shows_the_elicitation_tools(everything_server, capsys):  # noqa: F811
    capsys.readouterr()
    call_command("mrtr_client", everything_server.url, "--list", "--json")
    tools = {t["name"] for t in json.loads(capsys.readouterr().out)["tools"]}
    assert {"echo", "get-sum", "trigger-elicitation-request", "trigger-url-elicitation"} <= tools
    assert "trigger-sampling-request" not in tools and "get-roots-list" not in tools  # nothing allowed
