"""Tokens, ``requestState`` and answer values never reach a log, even with every logger at DEBUG:
the SDK's wire loggers (which print whole JSON-RPC messages at DEBUG and the MCP session id at
INFO) are held at WARNING by the app unless a project configured them itself."""

from __future__ import annotations

import logging

from mrtrweb import headless
from mrtrweb.headless import ConsentPolicy
from mrtrweb.logsafe import SDK_WIRE_LOGGERS


def test_the_sdk_wire_loggers_are_held_at_warning(caplog):
    caplog.set_level(logging.DEBUG)  # a project whose root logger is at DEBUG
    for name in SDK_WIRE_LOGGERS:
        logger = logging.getLogger(name)
        assert not logger.isEnabledFor(logging.INFO), name


async def test_a_round_at_debug_logs_no_state_no_answer_no_session_id(seeded, caplog):
    caplog.set_level(logging.DEBUG)  # the root logger and every logger without a level of its own
    alice, server = seeded["users"]["alice"], seeded["servers"]["acme"]
    outcome = await headless.arun(url=server.url, user=alice, tenant=server.tenant, method="tools/call",
                                  params={"name": "busy_report", "arguments": {"topic": "ops"}},
                                  consent=ConsentPolicy.parse("accept-defaults"))
    retries = [r for r in seeded["mcp"].log.tool_calls("busy_report") if r.has_request_state]
    assert retries, outcome
    states = {r.params["requestState"] for r in retries}
    assert caplog.records  # the product itself did log at DEBUG/INFO
    text = caplog.text
    for state in states:
        assert state not in text
    assert "Received session ID" not in text

