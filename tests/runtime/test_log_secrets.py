"""Tokens, ``requestState`` and answer values never reach a log, even with every logger at DEBUG:
the SDK's wire loggers (which print whole JSON-RPC messages at DEBUG and the MCP session id at
INFO) are held at WARNING by the app unless a project configured them itself."""

from __future__ import annotations

import logging

from mrtrweb.headless import client as headless
from mrtrweb.headless.client import ConsentPolicy
from mrtrweb.runtime.logsafe import SDK_WIRE_LOGGERS


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



def test_the_access_log_of_uvicorn_never_holds_an_authorization_code(tmp_path):
    """The authorization server sends the browser to ``oauth/callback/?code=...&state=...``; uvicorn
    writes every request line to its access log. A real uvicorn (as ``./dev demo`` and production
    run it) serving the product logs the callback with those values replaced by ``[redacted]``."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    from mrtrweb.bench.machine import free_port

    port = free_port()  # a port of this test process's own range
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mrtrweb.site.settings",
           "MRTRWEB_SQLITE_PATH": str(tmp_path / "db.sqlite3")}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "mrtrweb.site.asgi:application", "--host", "127.0.0.1",
                             "--port", str(port), "--lifespan", "on"], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    code, state = "AUTHCODE-4f1e9b2c7d", "STATE-8a3b6c1d0e"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/mcp/oauth/callback/?code={code}&state={state}"
                                            "&iss=https%3A%2F%2Fas.example", timeout=5) as resp:
                    status = resp.status
                break
            except urllib.error.HTTPError as exc:  # the login redirect's target, or a refusal page
                status = exc.code
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        assert status == 400  # not signed in: the signed_out page, never a sign-in redirect carrying the code
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert "/mcp/oauth/callback/?code=[redacted]&state=[redacted]" in out, out[-2000:]
    assert code not in out and state not in out, out[-2000:]


def test_oauth_parameters_are_redacted_also_when_carried_inside_another_url():
    from mrtrweb.runtime.logsafe import redact_query

    line = ("/accounts/login/?next=/mcp/oauth/callback/%3Fcode%3DAUTHCODE%26state%3DSTATE%26iss%3Dhttps%253A"
            "&access_token=T0K&x=code%3D1")
    out = redact_query(line)
    assert "AUTHCODE" not in out and "STATE" not in out and "T0K" not in out
    assert out.startswith("/accounts/login/?next=/mcp/oauth/callback/%3Fcode%3D[redacted]%26state%3D[redacted]"
                          "%26iss%3Dhttps%253A&access_token=[redacted]")
    assert redact_query("/mcp/servers/1/tools/?name=codes&decode=1") == "/mcp/servers/1/tools/?name=codes&decode=1"
