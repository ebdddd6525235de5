"""The outbound guard's pin of an MCP origin under a URL policy
(:class:`mrtrweb.mcp.outbound.GuardedTransport` with ``mcp_policy``): checked once, at the first
request, and every later request goes to that checked address -- without taking the pin's lock
again (it only keeps concurrent first requests to one check), and without asking the resolver
again (a name re-pointed after the check reaches nothing new)."""

from __future__ import annotations

import asyncio
import ipaddress

import httpx2

from mrtrweb.mcp import outbound
from mrtrweb.mcp.outbound import GuardedTransport, OutboundPolicy
from mrtrweb.mcp.url_policy import parse_policy

ORIGIN = "http://mcp.bench.test:8766"


class _Inner(httpx2.AsyncBaseTransport):
    def __init__(self) -> None:
        self.sent: list[httpx2.Request] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=b"{}", request=request)


def test_a_pinned_origin_is_not_checked_or_locked_again(monkeypatch):
    answers = iter(["93.184.216.34", "10.0.0.5"])  # the second answer (private) must never be used
    looked_up: list[str] = []

    async def resolve_host(host, port, timeout_s):
        looked_up.append(host)
        return [ipaddress.ip_address(next(answers))]

    monkeypatch.setattr(outbound, "resolve_host", resolve_host)
    policy = parse_policy({"allow_http_hosts": ["mcp.bench.test"]})
    inner = _Inner()
    transport = GuardedTransport(OutboundPolicy(), mcp_origin=ORIGIN, mcp_policy=policy, inner=inner)

    async def run() -> None:
        await transport.handle_async_request(httpx2.Request("POST", ORIGIN + "/mcp", content=b"{}"))
        async with transport._pin_lock:  # held: a request that waited for it would never finish
            async with asyncio.timeout(2):
                for _ in range(3):
                    await transport.handle_async_request(httpx2.Request("POST", ORIGIN + "/mcp", content=b"{}"))

    asyncio.run(run())
    assert looked_up == ["mcp.bench.test"]  # one check, at the first request
    assert transport.mcp_address == "93.184.216.34"
    assert [r.url.host for r in inner.sent] == ["93.184.216.34"] * 4  # every request to the checked address
    assert all(r.headers["host"] == "mcp.bench.test:8766" for r in inner.sent)
