"""The app CSP builder against addresses a browser reads as private although they are not written
as one (session 18's attack lane): IPv4 in the forms the URL standard still parses (``127.1``,
octal, hex: a host ending in a number), and IPv6 addresses that carry a private IPv4 one (NAT64,
6to4). Each is refused, never shown to the person as an outside domain."""

from __future__ import annotations

import pytest

from mrtrweb.mcpapps import csp


@pytest.mark.parametrize("value", [
    "https://127.1",  # the URL standard: 127.0.0.1
    "https://0x7f.0.0.1",  # hex
    "https://0177.0.0.1",  # octal
    "https://10.1",  # 10.0.0.1
    "https://a.b.c.0x1",  # ends in a number: parsed as IPv4 (or an invalid URL)
    "https://example.123",
    "https://[64:ff9b::a00:1]",  # NAT64 of 10.0.0.1
    "https://[64:ff9b::7f00:1]",  # NAT64 of 127.0.0.1
    "https://[2002:a00:1::]",  # 6to4 of 10.0.0.1
    "https://[2002:a9fe:a9fe::1]",  # 6to4 of 169.254.169.254
])
def test_addresses_a_browser_reads_as_private_are_refused(value):
    policy = csp.build({"connectDomains": [value], "resourceDomains": [value]})
    assert policy.outside_domains == ()
    assert len(policy.refused) == 2
    directives = dict(part.split(" ", 1) for part in policy.header.split("; "))
    assert directives["connect-src"] == "'none'"


@pytest.mark.parametrize("value, expected", [
    ("https://1.1.1.1", "https://1.1.1.1"),
    ("https://[2606:4700:4700::1111]", "https://[2606:4700:4700::1111]"),
    ("https://cdn.example.com", "https://cdn.example.com"),
    ("https://x1.example.com", "https://x1.example.com"),
    ("https://0x.example.com", "https://0x.example.com"),
    ("https://example.com:0443", "https://example.com:443"),  # the port written as a browser reads it
])
def test_public_addresses_and_names_still_pass(value, expected):
    assert csp.checked_origin(value) == (expected, "")


@pytest.mark.parametrize(("cookie_domains", "ok"), [
    ({}, True),
    ({"SESSION_COOKIE_DOMAIN": ".example.com"}, False),  # the session cookie goes to apps.example.com too
    ({"CSRF_COOKIE_DOMAIN": "example.com"}, False),
    ({"SESSION_COOKIE_DOMAIN": "apps.example.com"}, False),
    ({"SESSION_COOKIE_DOMAIN": ".site.example.org"}, True),  # another domain: not sent to the sandbox
    ({"SESSION_COOKIE_DOMAIN": "ps.example.com"}, True),  # a suffix of the name, not a parent domain
])
def test_the_sandbox_host_within_the_sites_cookie_domain_is_refused_at_start_up(settings, cookie_domains, ok):
    from mrtrweb.checks import check_apps_sandbox_origin

    settings.CSRF_TRUSTED_ORIGINS = ["https://site.example.com"]
    settings.MRTRWEB = {**getattr(settings, "MRTRWEB", {}), "APPS_SANDBOX_ORIGIN": "https://apps.example.com"}
    for name, value in cookie_domains.items():
        setattr(settings, name, value)
    errors = check_apps_sandbox_origin()
    assert (errors == []) is ok, errors
    assert all(e.id == "mrtrweb.E060" for e in errors)


def test_the_sites_and_the_sandboxs_own_hosts_are_never_an_apps_outside_domain():
    """An app declaring the site itself (or the sandbox) would send it requests from the person's
    browser -- with the site's same-site cookies where the sandbox shares the site's registrable
    domain: refused, whatever the scheme or port."""
    own = ("https://mrtr.example.com", "http://apps-sandbox.example.com:8001")
    policy = csp.build({"connectDomains": ["https://mrtr.example.com", "wss://MRTR.example.com:8443",
                                           "https://apps-sandbox.example.com", "https://api.example.com"],
                        "frameDomains": ["https://mrtr.example.com"],
                        "resourceDomains": ["https://apps-sandbox.example.com"]}, own=own)
    assert policy.outside_domains == ("https://api.example.com",)
    assert len(policy.refused) == 5
    assert all(why == "the site's or the sandbox's own host" for _, _, why in policy.refused)
