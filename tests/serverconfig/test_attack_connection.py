"""Attacks on the connection of a server added under the URL policy: every request to the
server's own origin is checked by the deployer's policy and pinned to the checked address, however
the URL spells its host.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import ipaddress

from mrtrweb.mcp import McpConnection
from mrtrweb.mcp.url_policy import UrlPolicy

from .test_url_policy import counted_demo, names  # noqa: F401 -- fixtures


async def test_an_internationalized_host_is_the_servers_own_origin(names, counted_demo) -> None:
    """httpx2 sends ``bücher.test`` as ``xn--bcher-kva.test``: the requests are still the MCP
    server's own (checked by the URL policy, pinned), not another origin left to the outbound
    guard's rules (which refuse it here, and would bound the event stream as an OAuth request)."""
    handle, counted = counted_demo
    names.names["bücher.test"] = ["127.0.0.1"]
    policy = UrlPolicy(allow_http_hosts=frozenset({"bücher.test"}), allow_networks=(ipaddress.ip_network("127.0.0.0/8"),),
                       timeout_s=3.0)
    first = len(counted.hosts)
    async with McpConnection(f"http://bücher.test:{handle.port}/mcp", url_policy=policy, timeout_s=5) as conn:
        assert len(await conn.list_tools()) > 0
    assert names.asked == ["bücher.test"]  # checked once, by the URL policy, then pinned
    assert set(counted.hosts[first:]) == {f"xn--bcher-kva.test:{handle.port}"}
