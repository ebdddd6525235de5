"""Attacks on the connection of a server added under the URL policy: every request to the
server's own origin is checked by the deployer's policy and pinned to the checked address, however
the URL spells its host.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import ipaddress

import httpx2

from mrtrweb.mcp import McpConnection
from mrtrweb.mcp.auth import static_headers_auth
from mrtrweb.mcp.url_policy import UrlPolicy, parse_policy



async def test_an_internationalized_host_is_the_servers_own_origin(names, counted_demo) -> None:
    """httpx2 sends ``bücher.test`` as ``xn--bcher-kva.test``: the requests are still the MCP
    server's own (checked by the URL policy, pinned), not another origin left to the outbound
    guard's rules (which refuse it here, and would bound the event stream as an OAuth request);
    the server's credentials go to it (they go to the server's own origin only); a policy entry
    written either way matches."""
    handle, counted = counted_demo
    names.names["xn--bcher-kva.test"] = ["127.0.0.1"]
    policy = parse_policy({"allow_http_hosts": ["Bücher.test"], "allow_networks": ["127.0.0.0/8"]}, timeout_s=3.0)
    assert policy == parse_policy({"allow_http_hosts": ["xn--bcher-kva.test"], "allow_networks": ["127.0.0.0/8"]},
                                  timeout_s=3.0)
    url = f"http://bücher.test:{handle.port}/mcp"
    first = len(counted.hosts)
    async with McpConnection(url, url_policy=policy, timeout_s=5) as conn:
        assert len(await conn.list_tools()) > 0
    assert names.asked == ["xn--bcher-kva.test"]  # checked once, by the URL policy, then pinned
    assert set(counted.hosts[first:]) == {f"xn--bcher-kva.test:{handle.port}"}
    # a bearer token of this server is added to its requests (as httpx2 spells their URL), to no other
    auth = static_headers_auth(url, {"Authorization": "Bearer t0ken"})
    for target, sent in ((url, True), (f"http://xn--bcher-kva.test:{handle.port}/x", True),
                         (f"http://bucher.test:{handle.port}/mcp", False)):
        request = next(auth.auth_flow(httpx2.Request("POST", target)))
        assert (request.headers.get("authorization") == "Bearer t0ken") is sent, target


async def test_a_lost_sessions_replacement_is_checked_again(names) -> None:
    """(No fault: a regression guard.) A 2025-11-25 server that restarts loses the session; the
    connection opens a new one -- under the URL policy again: a name re-pointed meanwhile to an
    address not allowed reaches nothing, and the next request says why."""
    import asyncio

    import pytest

    from mrtrweb.mcp import McpCallError
    from tests.restarting import ECHO, Restarting

    server = Restarting()
    try:
        names.names["localhost"] = ["127.0.0.1"]
        policy = UrlPolicy(allow_http_hosts=frozenset({"localhost"}),
                           allow_networks=(ipaddress.ip_network("127.0.0.0/8"),), timeout_s=3.0)
        async with McpConnection(f"http://localhost:{server.port}/mcp", url_policy=policy, timeout_s=10) as conn:
            assert (await conn.send("tools/call", ECHO, "call-1"))["isError"] is False
            await asyncio.to_thread(server.restart)
            names.names["localhost"] = ["10.99.0.1"]
            with pytest.raises(McpCallError):  # the lost session (404)
                await conn.send("tools/call", ECHO, "call-2")
            with pytest.raises(McpCallError) as caught:  # its replacement: refused by the policy
                await conn.send("tools/call", ECHO, "call-3")
            assert "URL policy" in str(caught.value), caught.value
        assert server.initializes() == 0  # no new session reached the restarted server
        assert [m.request_id for m in server.requests("tools/call")] == ["call-2"]  # only the one on the lost session
    finally:
        server.stop()
