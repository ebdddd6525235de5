"""The MCP client never reuses a pooled connection idle for as long as common servers keep one
(uvicorn's and Node's 5 s): a request sent on a connection the server is closing at that moment
fails with ``transport_error`` after it may have left, and a retry is never sent twice to make up
for it -- ci17 lost a person's answer that way once (tests/audit/test_audit_concurrency.py's twenty
users). Measured at the TCP level through a proxy that counts the connections it accepts."""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid

from mrtrweb.demo.server import serve_in_thread
from mrtrweb.mcp import McpConnection
from mrtrweb.mcp.outbound import KEEPALIVE_EXPIRY_S

from tests.faults import TcpProxy

CALL = {"name": "echo", "arguments": {"text": "hi"}}


async def test_an_idle_connection_is_not_reused_past_the_keepalive_expiry():
    assert KEEPALIVE_EXPIRY_S < 5.0  # below the 5 s of uvicorn and Node, with room for a loaded machine
    demo = serve_in_thread()
    parts = urllib.parse.urlsplit(demo.url)
    proxy = TcpProxy("127.0.0.1", parts.port)
    conn = McpConnection(parts._replace(netloc=f"127.0.0.1:{proxy.port}").geturl(), timeout_s=10)
    try:
        await conn.open()
        await conn.send("tools/call", CALL, f"t-{uuid.uuid4()}")
        before = proxy.accepted
        await conn.send("tools/call", CALL, f"t-{uuid.uuid4()}")
        assert proxy.accepted == before  # a connection used a moment ago is reused (the pool works)
        await asyncio.sleep(KEEPALIVE_EXPIRY_S + 0.6)
        await conn.send("tools/call", CALL, f"t-{uuid.uuid4()}")
        assert proxy.accepted > before  # an idle one past the expiry is not: a new connection
    finally:
        await conn.close()
        proxy.close()
        demo.stop()
