"""Attacks on the address rule shared by the URL policy and the outbound guard
(:func:`mrtrweb.mcp.outbound.is_public_address`): every address of the IANA special-purpose
registries that is not globally reachable is refused, whatever Python's own (version-dependent)
``is_global`` says -- and so is every IPv4-mapped, NAT64 and 6to4 form of it.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import ipaddress

import pytest

from mrtrweb.mcp.outbound import OutboundPolicy, OutboundRefused, check_url, is_public_address
from mrtrweb.mcp.url_policy import UrlPolicy, UrlRefused

NOT_PUBLIC = [
    "192.0.0.192",  # IETF protocol assignments (192.0.0.0/24): a cloud's legacy instance metadata address
    "192.0.0.8",
    "::ffff:192.0.0.192", "64:ff9b::c000:c0", "2002:c000:c0::",  # the same, carried in IPv6 forms
    "fec0::1",  # deprecated site-local: still routed inside some networks
    "fec0:0:0:ffff::1",
    "3fff::1",  # documentation (2024)
    "5f00::1",  # SRv6 SIDs
    "100:0:0:1::1",  # dummy prefix
]


@pytest.mark.parametrize("text", NOT_PUBLIC)
async def test_special_purpose_addresses_are_not_public(text) -> None:
    addr = ipaddress.ip_address(text)
    assert not is_public_address(addr)
    with pytest.raises(UrlRefused) as caught:
        await UrlPolicy(timeout_s=3.0).resolve(f"https://[{addr}]/mcp" if addr.version == 6 else f"https://{addr}/mcp")
    assert caught.value.code == "address"
    with pytest.raises(OutboundRefused):
        await check_url(f"https://[{addr}]/" if addr.version == 6 else f"https://{addr}/", OutboundPolicy())


@pytest.mark.parametrize("text", ["93.184.216.34", "8.8.8.8", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:8.8.8.8",
                                  "2001:4860:4860::8888"])
def test_public_addresses_stay_public(text) -> None:
    assert is_public_address(ipaddress.ip_address(text))
