"""A 2025-11-25 server that declares ``logging`` but never answers ``logging/setLevel``
(:func:`tests.attack28_servers.mute_level`): the call the level comes before waits at most
``SET_LEVEL_TIMEOUT_S`` once per session, not the connection's timeout before every call."""

from __future__ import annotations

import asyncio

from mrtrweb.demo.server import serve_in_thread
from mrtrweb.mcp import McpConnection
from mrtrweb.mcp import server_log
from tests.attack28_servers import mute_level


async def test_a_set_level_never_answered_is_given_up_once_per_session(monkeypatch):
    monkeypatch.setattr(server_log, "SET_LEVEL_TIMEOUT_S", 0.5, raising=False)
    server, asked = mute_level()
    handle = serve_in_thread(server=server)

    async def on_log(level, name, data) -> None:  # pragma: no cover - the server logs nothing
        pass

    try:
        async with McpConnection(handle.url, protocol="2025-11-25", timeout_s=30) as conn:
            loop = asyncio.get_running_loop()
            started = loop.time()
            for i in range(3):
                result = await conn.send("tools/call", {"name": "hello", "arguments": {}}, f"call-{i}",
                                         on_log=on_log, log_level="info")
                assert result["content"][0]["text"] == "hello"
            assert asked == ["info"]  # asked once: not again (and waited for again) before each call
            assert loop.time() - started < 10
    finally:
        handle.stop()
