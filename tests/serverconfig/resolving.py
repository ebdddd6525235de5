"""Support of the server-configuration tests (public names): the resolver seam
(:func:`mrtrweb.mcp.outbound.resolve_host`) made controllable."""

from __future__ import annotations

import ipaddress

from mrtrweb.mcp import outbound


class Names:
    """The resolver seam, controllable: ``names[host] = ["addr", ...]``; ``asked`` lists each
    resolution; hosts not in ``names`` resolve for real."""

    def __init__(self, monkeypatch) -> None:
        self.names: dict[str, list[str]] = {}
        self.asked: list[str] = []
        real = outbound.resolve_host

        async def resolve(host: str, port: int, timeout_s: float):
            self.asked.append(host)
            if host in self.names:
                return [ipaddress.ip_address(a) for a in self.names[host]]
            return await real(host, port, timeout_s)

        monkeypatch.setattr(outbound, "resolve_host", resolve)
