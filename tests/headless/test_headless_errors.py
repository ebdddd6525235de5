"""``manage.py mrtr_client`` against a real MCP server (:mod:`tests.headers_mcp`: the SDK's
low-level ``Server`` over Streamable HTTP): a failed call prints what its operation page says (the
server's JSON-RPC code and message, cleaned, bounded, controls and bidi made visible), never the
round's ``requestState`` or an argument value; tools with an invalid ``x-mcp-header`` are left out
of ``--list`` / ``--each`` and refused by name (SEP-2243)."""

from __future__ import annotations

import json
import logging

import pytest
from django.core.management import call_command

from mrtrweb import operations
from mrtrweb.operations import messages
from mrtrweb.models import Operation

from .. import headers_mcp

pytestmark = [pytest.mark.django_db(transaction=True)]

SECRET_ARG = "arg-value-7f3a91"


@pytest.fixture(scope="module")
def server():
    handle, log = headers_mcp.serve()
    yield handle, log
    handle.stop()


def _command(*argv: str) -> int:
    try:
        call_command("mrtr_client", *argv)
    except SystemExit as exc:
        return int(exc.code)
    return 0


def _page_text(op: Operation) -> str:
    from django.test import Client

    client = Client()
    client.force_login(op.user)
    return client.get(f"/mcp/operations/{op.id}/").content.decode()


def test_a_jsonrpc_error_prints_the_servers_code_and_message_as_the_page_shows_them(server, capsys, caplog):
    caplog.set_level(logging.DEBUG, logger="mrtrweb")
    code = _command(server[0].url, "--tool", "fails", "--args", json.dumps({"secret_arg": SECRET_ARG}),
                    "--consent", "accept-defaults")
    out = capsys.readouterr().out
    assert code == 3, out
    lines = out.splitlines()
    status = next(i for i, line in enumerate(lines) if line.startswith("tools/call fails: failed after 1 round(s)"))
    assert lines[status].endswith("[jsonrpc_error]")
    said = lines[status + 1]
    op = Operation.objects.get(name="fails")
    # the page's text exactly (the server's words cleaned and cut), indented
    cleaned = operations.server_error_text(headers_mcp.HOSTILE_MESSAGE)
    assert said == f"  The MCP server answered with an error. It said (JSON-RPC error {headers_mcp.HOSTILE_CODE}): " \
                   + cleaned
    assert op.error_message == said.strip()
    assert said.endswith("…") and len(cleaned) == messages.SERVER_ERROR_SHOWN_CHARS
    # control and format characters became spaces (what is left of an escape sequence is plain text)
    assert "It said (JSON-RPC error -32010): [2J [31mAccess denied [0m exe.txt line two <b>bold</b> tail" in said
    for raw in ("\x1b", "\u202e", "\r"):  # nothing that moves the cursor, recolours or reorders the terminal
        assert raw not in out
    # never the round's requestState nor an argument value, in the output or the logs
    assert server[1].all("tools/call", "fails")[-1].params["requestState"] == "round-1-state"
    for secret in ("round-1-state", SECRET_ARG):
        assert secret not in out and secret not in caplog.text
    # ... and the server's text never reaches the logs (it may echo what was sent)
    assert "Access denied" not in caplog.text and "bold" not in caplog.text
    page = _page_text(op)
    assert "It said (JSON-RPC error -32010): [2J [31mAccess denied [0m exe.txt line two &lt;b&gt;bold" in page


def test_json_output_carries_the_error_message(server, capsys):
    assert _command(server[0].url, "--tool", "fails", "--consent", "accept-defaults", "--json") == 3
    (op,) = json.loads(capsys.readouterr().out)["operations"]
    assert op["error_code"] == "jsonrpc_error"
    assert op["error_message"] == "The MCP server answered with an error. It said (JSON-RPC error -32010): " \
        + operations.server_error_text(headers_mcp.HOSTILE_MESSAGE)


def test_a_control_in_the_message_is_shown_as_the_page_shows_it(server, capsys):
    """What the page's ``shown`` filter makes visible, the headless line makes visible too."""
    from mrtrweb.text import display
    from mrtrweb.headless.client import HeadlessOutcome
    from mrtrweb.management.commands.mrtr_client import Command

    cmd = Command()
    cmd._print_outcome("tools/call", {"name": "x"}, HeadlessOutcome(
        "failed", None, 0, "op", "jsonrpc_error", (), "It said: a\u202eb\u200bc"))
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "  " + display.shown("It said: a\u202eb\u200bc") == "  It said: a⟨U+202E⟩b⟨U+200B⟩c"


def test_list_and_each_leave_out_tools_with_an_invalid_x_mcp_header(server, capsys, caplog):
    caplog.set_level(logging.INFO, logger="mrtrweb")
    assert _command(server[0].url, "--list", "--json") == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)["tools"]] == ["route", "fails"]
    assert "tool 'bad_space' excluded: its inputSchema has an invalid x-mcp-header annotation" in caplog.text
    server[1].clear()
    _command(server[0].url, "--each", "--consent", "accept-defaults", "--json")
    ops = json.loads(capsys.readouterr().out)["operations"]
    assert [o["name"] for o in ops] == ["route", "fails"]
    assert {c.tool for c in server[1].all("tools/call")} == {"route", "fails"}


def test_an_invalid_tool_called_by_name_is_refused_and_says_why(server, capsys, caplog):
    caplog.set_level(logging.INFO, logger="mrtrweb")
    server[1].clear()
    assert _command(server[0].url, "--tool", "bad_space", "--args", '{"v": "x"}') == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tools/call bad_space: failed after 0 round(s)") and \
        lines[0].endswith("[invalid_x_mcp_header]")
    assert lines[1] == ("  This tool was not called: its input schema declares an invalid x-mcp-header "
                        "(MCP 2026-07-28, SEP-2243), and clients must not use such a tool.")
    assert server[1].all("tools/call") == []  # nothing was sent
    assert "tools/call 'bad_space' refused: the tool's x-mcp-header annotation is invalid (SEP-2243)" in caplog.text


async def test_the_pages_leave_them_out_too(seeded, server):
    from django.test import AsyncClient

    from mrtrweb.models import McpServer

    alice = seeded["users"]["alice"]
    row = await McpServer.objects.acreate(tenant=seeded["servers"]["acme"].tenant, name="Headers", url=server[0].url)
    client = AsyncClient()
    await client.aforce_login(alice)
    page = (await client.get(f"/mcp/servers/{row.pk}/")).content.decode()
    assert "route" in page and "fails" in page and "bad_space" not in page and "bad_number" not in page
    assert (await client.get(f"/mcp/servers/{row.pk}/tools/route/")).status_code == 200
    assert (await client.get(f"/mcp/servers/{row.pk}/tools/bad_space/")).status_code == 404
    assert (await client.post(f"/mcp/servers/{row.pk}/tools/bad_space/", {"arguments": "{}"})).status_code == 404
