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


@pytest.mark.parametrize("url", [
    "https://2130706433/mcp", "https://0x7f.1/mcp", "https://127.1/mcp", "https://0177.0.0.1/mcp",
    "https://017700000001/mcp", "https://0x7f000001/mcp", "https://3232235777/mcp", "https://192.168.1/mcp",
    "https://[fe80::1%25eth0]/mcp", "https://[::1%25lo]/mcp", "https://[::ffff:127.0.0.1]/mcp", "https://[::127.0.0.1]/mcp",
    "https://[0:0:0:0:0:ffff:7f00:1]/mcp", "https://[::ffff:a9fe:a9fe]/mcp", "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/mcp",
    "https://[64:ff9b:1::7f00:1]/mcp", "https://LOCALHOST./mcp", "https://localhost../mcp", "HTTPS://LoCaLhOsT/mcp",
    "https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/mcp", "https://127\u30020\u30020\u30021/mcp", "https://169.254.169.254./mcp",
    "https://[fd00:ec2::254]/mcp", "https://100.100.100.200/mcp", "https://0/mcp", "https://[::]/mcp",
    "https://127.0.0.1#@93.184.216.34/mcp", "https://127.0.0.1?@93.184.216.34/mcp",
])
async def test_every_spelling_of_a_private_address_is_refused(url) -> None:
    """(No fault: a regression guard for the spellings the docs name.) Whatever spelling, the
    address the system resolver makes of it is what is judged."""
    with pytest.raises(UrlRefused) as caught:
        await UrlPolicy(timeout_s=3.0).resolve(url)
    assert caught.value.code == "address", caught.value.reason


@pytest.mark.parametrize("url", ["https://evil\\@127.0.0.1/mcp", "https://127.0.0.1\\@evil.example/mcp",
                                 "https://127.0.0.1%2f@evil.example/mcp", "https://93.184.216.34@127.0.0.1/mcp"])
async def test_backslashes_and_encoded_separators_before_an_at_sign_are_userinfo(url) -> None:
    with pytest.raises(UrlRefused) as caught:
        await UrlPolicy(timeout_s=3.0).resolve(url)
    assert caught.value.code == "userinfo"
