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


async def test_what_the_sdk_logs_of_a_hostile_stream_holds_no_server_data_and_no_forged_line(caplog):
    """A server whose SSE stream carries an unknown, long event name (with an ANSI escape and a
    bidi override) and a message that fails the SDK's validation (its ``input_value`` a
    ``requestState``-like value): the SDK logs both at WARNING/ERROR, the second with a traceback.
    What reaches the log is the SDK's line with the server's text made visible and bounded, and
    the exception's type name -- never the value."""
    import json

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from mrtrweb.demo.server import serve_asgi_in_thread
    from mrtrweb.mcp import McpConnection
    from mrtrweb.mcp.outbound import OutboundPolicy
    from tests.hostile import DISCOVER

    secret = "LEAKED-STATE-5e1f0c9a"

    async def endpoint(request: Request) -> Response:
        message = await request.json()
        if "id" not in message:
            return Response(status_code=202)
        rid = message["id"]
        if message.get("method") == "server/discover":
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": DISCOVER})

        body = (f"event: x\x1b[31m\u202eFORGED{'#' * 400}\n"
                f"data: {{}}\n\n"
                f"event: message\n"
                f"data: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'result': secret})}\n\n"
                f"event: message\n"
                f"data: {json.dumps({'jsonrpc': '2.0', 'id': rid, 'result': {'content': [], 'resultType': 'complete'}})}\n\n")
        return StreamingResponse(iter([body.encode()]), media_type="text/event-stream")

    handle = serve_asgi_in_thread(Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])]))
    caplog.set_level(logging.DEBUG)
    try:
        async with McpConnection(handle.url, timeout_s=10, outbound=OutboundPolicy(allow_http_loopback=True)) as conn:
            try:
                await conn.send("tools/call", {"name": "x", "arguments": {}}, "r1", timeout_s=5)
            except Exception:  # noqa: BLE001 -- whatever the call's outcome, the log is the point
                pass
    finally:
        handle.stop()
    sdk = [r for r in caplog.records if r.name.startswith(("mcp.client", "mcp.shared"))]
    assert any(r.levelno >= logging.WARNING for r in sdk), [r.getMessage() for r in caplog.records]
    for record in sdk:
        assert record.exc_info is None and record.exc_text is None
        assert "\n" not in record.getMessage() and "\x1b" not in record.getMessage()
    assert secret not in caplog.text
    unknown = [r.getMessage() for r in sdk if "Unknown SSE event" in r.getMessage()]
    assert unknown and all("\\u001b[31m\\u202eFORGED" in m and "more characters]" in m for m in unknown), unknown
    assert any("details withheld" in r.getMessage() for r in sdk), [r.getMessage() for r in sdk]
