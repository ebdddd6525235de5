"""The headless client (``mrtr_client``, :mod:`mrtrweb.headless`) leaves app-only tools out
(issue 31, item 1): a tool whose ``_meta.ui.visibility`` is ``["app"]`` is not in ``--list``, not
run by ``--each``, and refused by name (``app_only``, exit 11) with nothing sent; a real MCP server
(the SDK's low-level ``Server`` over Streamable HTTP) records the calls it received."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from mrtrweb import headless
from mrtrweb.models import Operation
from tests.mcpapps.show_server import CALLS

pytestmark = [pytest.mark.django_db(transaction=True)]


def _command(*argv: str) -> int:
    try:
        call_command("mrtr_client", *argv)
    except SystemExit as exc:
        return int(exc.code)
    return 0


def test_list_and_each_leave_app_only_tools_out(app_server, capsys):  # noqa: F811
    CALLS.clear()
    assert _command(app_server.url, "--list", "--json") == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)["tools"]] == ["show", "plain"]
    assert _command(app_server.url, "--list") == 0
    assert "refresh" not in capsys.readouterr().out
    assert _command(app_server.url, "--each", "--consent", "accept-defaults", "--json") == 0
    assert [o["name"] for o in json.loads(capsys.readouterr().out)["operations"]] == ["show", "plain"]
    assert sorted(CALLS) == ["plain", "show"]


def test_an_app_only_tool_called_by_name_is_not_run(app_server, capsys):  # noqa: F811
    CALLS.clear()
    assert _command(app_server.url, "--tool", "refresh") == 11
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "tools/call refresh: app_only (not run)"
    assert "for its MCP App alone" in lines[1]
    assert CALLS == [] and not Operation.objects.filter(name="refresh").exists()  # nothing sent, no operation
    # the library says the same
    from django.contrib.auth import get_user_model
    from mrtrweb.models import Membership, Tenant

    tenant = Tenant.objects.create(name="t", slug="t")
    user = get_user_model().objects.create_user("u")
    Membership.objects.create(tenant=tenant, user=user)
    outcome = headless.run(url=app_server.url, user=user, tenant=tenant, method="tools/call",
                           params={"name": "refresh", "arguments": {}}, consent=headless.ConsentPolicy("decline"))
    assert (outcome.status, outcome.operation_id) == ("app_only", "")
