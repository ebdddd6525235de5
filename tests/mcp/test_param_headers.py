"""``Mcp-Param-*`` headers (MCP 2026-07-28, SEP-2243) sent by ``McpConnection`` against a real MCP
server (the SDK's low-level ``Server`` over Streamable HTTP, :mod:`tests.headers_mcp`), whose own
inbound validation refuses a ``tools/call`` whose headers do not match its arguments. Needs no
Django; the headless client's side is in ``tests/headless/test_headless_errors.py``."""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid

import pytest

from mrtrweb.mcp import INVALID_X_MCP_HEADER, InvalidToolHeaders, McpCallError, McpConnection
from mrtrweb.mcp.param_headers import ToolHeaders, is_modern

from .. import headers_mcp

#: what ``route`` is called with: every encoding case of the value-encoding rules
ARGUMENTS = {
    "region": "us-west1",         # plain token: as it is
    "priority": 42,               # integer: as text
    "verbose": None,              # null: no header
    "note": " Grüße,\tworld ",    # non-ASCII, a tab, edge spaces: base64
    "score": 3.5,                 # number, unannotated: never mirrored
    "query": "SELECT 1",          # unannotated: never mirrored
}
EXPECTED = {"mcp-param-region": "us-west1", "mcp-param-priority": "42",
            "mcp-param-note": "=?base64?" + base64.b64encode(" Grüße,\tworld ".encode()).decode() + "?="}


@pytest.fixture(scope="module")
def server():
    handle, log = headers_mcp.serve()
    yield handle, log
    handle.stop()


@pytest.fixture
def log(server):
    server[1].clear()
    return server[1]


def rid() -> str:
    return f"t-{uuid.uuid4()}"


def text_of(result: dict) -> str:
    return " ".join(b["text"] for b in result["content"] if b.get("type") == "text")


async def test_listing_excludes_invalid_tools_and_logs_their_names_only(server, log, caplog):
    async with McpConnection(server[0].url, timeout_s=10) as conn:
        assert is_modern(conn.protocol_version)
        with caplog.at_level(logging.INFO, logger="mrtrweb.mcp"):
            names = [t["name"] for t in await conn.list_tools()]
            again = [t["name"] for t in await conn.list_tools()]
    assert names == again == ["route", "fails"]
    excluded = [r.getMessage() for r in caplog.records if "excluded" in r.getMessage()]
    # once per tool and connection, by name; never the server's property or header names
    assert excluded == [f"tool '{n}' excluded: its inputSchema has an invalid x-mcp-header annotation (SEP-2243)"
                        for n in ("bad_space", "bad_number")]
    assert "My Region" not in caplog.text


async def test_a_round_and_its_retry_from_another_connection_carry_the_same_headers(server, log):
    first = {"name": "route", "arguments": ARGUMENTS}
    # a connection that never listed: it lists once before its first call of the tool
    async with McpConnection(server[0].url, timeout_s=10) as conn:
        raw = await conn.send("tools/call", first, rid())
    assert raw["resultType"] == "input_required"
    # the retry goes out from another worker's connection (which has not listed either)
    async with McpConnection(server[0].url, timeout_s=10) as other:
        final = await other.send("tools/call", {**first, "inputResponses": {"go": {"action": "accept",
                                                                                  "content": {"go": True}}},
                                                "requestState": raw["requestState"]}, rid())
    assert text_of(final) == "route done"  # the server's own header validation accepted both
    assert [s.method for s in log.all() if s.method != "server/discover"] == \
        ["tools/list", "tools/call", "tools/list", "tools/call"]
    calls = log.all("tools/call", "route")
    assert [c.param_headers for c in calls] == [EXPECTED, EXPECTED]
    assert calls[1].params["requestState"] == raw["requestState"]


async def test_the_server_refuses_a_call_without_them(server, log, monkeypatch):
    """The check above can fail: the same call with no Mcp-Param headers is refused by the server."""
    monkeypatch.setattr(ToolHeaders, "headers_for", lambda self, name, arguments: {})
    async with McpConnection(server[0].url, timeout_s=10) as conn:
        with pytest.raises(McpCallError) as err:
            await conn.send("tools/call", {"name": "route", "arguments": ARGUMENTS}, rid())
    assert err.value.code == "jsonrpc_error" and "Mcp-Param-" in (err.value.rpc_message or "")


async def test_concurrent_first_calls_list_once(server, log):
    async with McpConnection(server[0].url, timeout_s=10) as conn:
        results = await asyncio.gather(*(conn.send("tools/call", {"name": "route", "arguments": {"region": f"r{i}"}},
                                                   rid()) for i in range(3)))
        await conn.send("tools/call", {"name": "route", "arguments": {"region": "again"}}, rid())
    assert all(r["resultType"] == "input_required" for r in results)
    assert len(log.all("tools/list")) == 1
    assert sorted(c.param_headers["mcp-param-region"] for c in log.all("tools/call")) == ["again", "r0", "r1", "r2"]


@pytest.mark.parametrize("tool", ["bad_space", "bad_number"])
async def test_an_excluded_tool_called_by_name_is_refused_before_sending(server, log, caplog, tool):
    async with McpConnection(server[0].url, timeout_s=10) as conn:
        with caplog.at_level(logging.INFO, logger="mrtrweb.mcp"), pytest.raises(InvalidToolHeaders) as err:
            await conn.send("tools/call", {"name": tool, "arguments": {"v": "x", "n": 1.5}}, rid())
        assert conn.is_open  # nothing broke
    assert err.value.code == INVALID_X_MCP_HEADER
    assert "invalid x-mcp-header" in err.value.shown_message
    assert log.all("tools/call") == []  # nothing was sent
    assert f"tools/call '{tool}' refused: the tool's x-mcp-header annotation is invalid (SEP-2243)" in caplog.text


async def test_an_unlisted_tool_is_listed_for_once_and_carries_none(server, log):
    async with McpConnection(server[0].url, timeout_s=10) as conn:
        for _ in range(2):  # the server answers any name; headers come only from what it listed
            assert text_of(await conn.send("tools/call", {"name": "nope", "arguments": {"region": "x"}}, rid())) \
                == "nope done"
        await conn.list_tools()
    assert len(log.all("tools/list")) == 2  # once for the unknown name (not on every call), once asked
    assert [c.param_headers for c in log.all("tools/call")] == [{}, {}]


def test_logged_names_are_made_visible_and_bounded():
    from mrtrweb.mcp.param_headers import _logged_name

    assert _logged_name("a\u202eb\x1b[2Jc\n") == "a⟨U+202E⟩b⟨U+001B⟩[2Jc⟨U+000A⟩"
    assert _logged_name("x" * 500) == "x" * 100 + "…"
